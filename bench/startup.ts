/**
 * Start-up time of `npm start`: from launching the command to the first 200 from GET /health, on a
 * fresh temp DATA_DIR (first start: initdb, migrations, seed) and then again on the same dir
 * (the everyday restart). Goal: a restart answers in under 2 s.
 *
 *   npm run bench -- startup          (or: tsx bench/startup.ts)
 *   STARTUP_RUNS=5                    restarts to measure (default 3; the median is reported)
 *   STARTUP_COMMAND=direct            measure `node bin/keel.js serve` (what npm start runs) without npm
 */
import { rmSync } from 'node:fs';
import { freePort, fmt, isMain, median, printTable, spawnGroup, tempDir, waitForHealthy } from './lib.js';

export interface StartupResult {
  command: string;
  firstMs: number;
  restartMs: number[];
  medianRestartMs: number;
}

const GOAL_MS = 2_000;

async function timeOneStart(command: string[], dataDir: string): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  const proc = spawnGroup(command[0]!, command.slice(1), {
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    // The quick-start situation: embedded database, development secrets from DATA_DIR.
    DATABASE_URL: undefined,
    REDIS_URL: undefined,
    APP_ENCRYPTION_KEY: undefined,
    JWT_SECRET: undefined,
    NODE_ENV: undefined,
  });
  try {
    await waitForHealthy(`http://127.0.0.1:${port}/health`, proc, 120_000, 10);
    return performance.now() - started;
  } finally {
    await proc.stop();
  }
}

export async function benchStartup(runs = Number(process.env.STARTUP_RUNS ?? '3')): Promise<StartupResult> {
  const direct = process.env.STARTUP_COMMAND === 'direct';
  const command = direct ? [process.execPath, 'bin/keel.js', 'serve'] : ['npm', 'start'];
  const dataDir = tempDir('keel-startup-');
  try {
    const firstMs = await timeOneStart(command, dataDir);
    const restartMs: number[] = [];
    for (let i = 0; i < runs; i++) restartMs.push(await timeOneStart(command, dataDir));
    return { command: direct ? 'node bin/keel.js serve' : 'npm start', firstMs, restartMs, medianRestartMs: median(restartMs) };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export function printStartup(r: StartupResult): void {
  printTable(`Start-up: \`${r.command}\` until GET /health answers 200 (goal: restart < ${GOAL_MS} ms)`, ['start', 'ms'], [
    ['first (empty DATA_DIR)', fmt(r.firstMs)],
    ...r.restartMs.map((ms, i) => [`restart ${i + 1}`, fmt(ms)]),
    ['restart median', fmt(r.medianRestartMs)],
  ]);
  process.stdout.write(`goal restart < ${GOAL_MS} ms: ${r.medianRestartMs < GOAL_MS ? 'met' : 'NOT met'}\n`);
}

if (isMain(import.meta.url)) {
  printStartup(await benchStartup());
}
