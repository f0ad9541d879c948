/**
 * The `keel` command line as an operator runs it, in child processes: one command to its exit
 * (`runCli`), a `serve` kept running until the test stops it (`startServe`), and a command on a
 * terminal (`runInTerminal`, through util-linux `script`, for the hidden password prompt). They run
 * `bin/keel.js`, the launcher `npx keel` and `npm start` run: the esbuild bundle of `src/` (rebuilt
 * whenever `src/` changed, so it is never stale), on the embedded database of a temp DATA_DIR. The
 * bundle and the console are made current before a test file's first command (`prebuilt`: built by
 * the first file that finds them stale, a fingerprint check after that), so no command prints the
 * launcher's "building" line; a command then starts in about a third of the time `src/main.ts`
 * through tsx takes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';
import { freePort, templateDump } from './app.js';
import { openDatabase, pgliteDirFor } from '../../src/platform/db/client.js';
import { ensureBuilt } from '../../bin/build.js';
import { ensureConsoleBuilt } from '../../bin/console.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NODE_ARGS = ['bin/keel.js'];

let built: Promise<void> | null = null;
/** The bundle of `src/` and the console, built when stale, before this test file's first command. */
function prebuilt(): Promise<void> {
  built ??= (async () => {
    await ensureBuilt();
    await ensureConsoleBuilt();
  })();
  return built;
}

/** Node's arguments for `keel <args>` (the launcher), once the bundle is built: for helpers that spawn it themselves. */
export async function keelArgs(args: string[]): Promise<string[]> {
  await prebuilt();
  return [...NODE_ARGS, ...args];
}

/**
 * Every child still running is killed after the test file (and when the worker exits), so a test
 * that timed out, or a command that should have been refused and serves instead, leaves none behind.
 */
const children = new Set<ChildProcess>();
const killChildren = (): void => {
  for (const child of children) child.kill('SIGKILL');
};
afterAll(killChildren);
process.once('exit', killChildren);
function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

const madeDirs: string[] = [];
afterAll(() => {
  for (const dir of madeDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/**
 * A temp DATA_DIR whose embedded database is already migrated, from the run's migrated template
 * (`openTemplatePglite`): for commands whose test is not about a first start, which then skip
 * PGlite's initdb and the migrations (seconds each on a loaded machine). Removed after the file.
 */
export async function migratedDataDir(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-cli-'));
  madeDirs.push(dir);
  const database = await openDatabase({ pgliteDir: pgliteDirFor(dir), pgliteLoad: await templateDump() });
  await database.close();
  return dir;
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The loopback guard in every child (test/setup/loopback-guard.mjs): a refused lookup or dial prints a line to stderr. */
const GUARD = `--import=${new URL('../setup/loopback-guard.mjs', import.meta.url).href}`;

/** Our environment without database, Redis or administrator settings, plus a temp DATA_DIR and fixed secrets. */
export function cliEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  const dropped = new Set(['DATABASE_URL', 'REDIS_URL', 'ADMIN_EMAIL', 'ADMIN_PASSWORD', 'PUBLIC_URL', 'TRUST_PROXY', 'HOST', 'PORT']);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !dropped.has(k)) env[k] = v;
  return {
    ...env,
    NODE_ENV: 'test',
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    JWT_SECRET: randomBytes(48).toString('base64url'),
    NODE_OPTIONS: [env.NODE_OPTIONS, GUARD].filter(Boolean).join(' '),
    KEEL_LOOPBACK_GUARD: 'child',
    ...extra,
  };
}

/**
 * Runs `keel <args>` with `stdin` written to its standard input; resolves when it exits. One still
 * running after `timeoutMs` (a `serve` that should have been refused) is killed: code null.
 */
export async function runCli(args: string[], env: Record<string, string>, stdin = '', timeoutMs = 60_000): Promise<CliResult> {
  await prebuilt();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...NODE_ARGS, ...args], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    track(child);
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on('error', () => undefined); // a command that exits before reading its input
    child.stdin.end(stdin);
  });
}

export interface ServeProcess {
  child: ChildProcess;
  pid: number;
  port: number;
  url: string;
  stdout(): string;
  stderr(): string;
  /** Sends `signal` (SIGTERM by default) and resolves with the exit code (null when killed by a signal). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

/** Starts `keel serve` on a free port and resolves once GET /health answers 200 (throws if it exits first). */
export async function startServe(env: Record<string, string>, opts: { port?: number } = {}): Promise<ServeProcess> {
  const port = opts.port ?? (await freePort());
  await prebuilt();
  const child = spawn(process.execPath, [...NODE_ARGS, 'serve'], {
    cwd: ROOT,
    env: { ...env, PORT: String(port), HOST: env.HOST ?? '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  track(child);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  const served: ServeProcess = {
    child,
    pid: child.pid ?? -1,
    port,
    url,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await exited;
      throw new Error(`serve exited early (${child.exitCode}):\n${stdout}${stderr}`);
    }
    if (Date.now() > deadline) {
      await served.stop('SIGKILL');
      throw new Error(`serve did not answer /health:\n${stdout}${stderr}`);
    }
    try {
      if ((await fetch(`${url}/health`)).status === 200) return served;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** True when util-linux `script` is installed (runInTerminal needs it). */
export function terminalAvailable(): boolean {
  return existsSync('/usr/bin/script') || existsSync('/bin/script');
}

/**
 * Runs `keel <args>` on a pseudo-terminal (util-linux `script`). Each step waits until the terminal's
 * output matches `waitFor`, then types `send` (end a line with `\r`, as a terminal's Enter does).
 * Resolves with everything the terminal showed and the exit code.
 */
export async function runInTerminal(
  args: string[],
  env: Record<string, string>,
  steps: { waitFor: RegExp; send: string }[],
): Promise<{ code: number | null; output: string }> {
  await prebuilt();
  const quoted = [process.execPath, ...NODE_ARGS, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qec', quoted, '/dev/null'], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    track(child);
    let output = '';
    let step = 0;
    let from = 0; // each step waits for text shown after the previous step's match
    const advance = (): void => {
      const next = steps[step];
      if (next && next.waitFor.test(output.slice(from))) {
        step++;
        from = output.length;
        child.stdin.write(next.send);
      }
    };
    child.stdout.on('data', (c: Buffer) => {
      output += c.toString('utf8');
      advance();
    });
    child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code) => {
      child.stdin.end();
      resolve({ code, output });
    });
  });
}
