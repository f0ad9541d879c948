/**
 * Interleaved A/B of Keel builds or settings on one route: one Keel per variant, all started at once
 * (each idle while another is measured), measured in alternating rounds, printing req/s and the
 * server's CPU per request (user + system of its process, from /proc/<pid>/stat: steadier than req/s
 * on a shared machine, and not fooled as sampled profiles are by time spent waiting for a core).
 *
 *   AB_VARIANTS='base:{"KEEL_DIR":"/path/to/other/checkout"};new:{};warn:{"LOG_LEVEL":"warn"}' \
 *   AB_PATH=/api/v1/users/me AB_ROUNDS=3 AB_SECONDS=4 tsx bench/ab.ts
 *
 * A variant is a name and the environment it adds (`KEEL_DIR`: run `node bin/keel.js serve` of that
 * checkout, e.g. a `git worktree` of the commit before a change). Each Keel gets a fresh DATA_DIR
 * (PGlite) and a registered user whose bearer token every request carries. Linux only.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon, { type Result } from 'autocannon';
import { freePort, ROOT } from './lib.js';

const variants = (process.env.AB_VARIANTS ?? 'default:{}').split(';').filter(Boolean).map((s) => {
  const i = s.indexOf(':');
  return { name: s.slice(0, i), env: JSON.parse(s.slice(i + 1)) as Record<string, string> };
});
const path = process.env.AB_PATH ?? '/api/v1/users/me';
const seconds = Number(process.env.AB_SECONDS ?? '4');
const rounds = Number(process.env.AB_ROUNDS ?? '3');

/** CPU ticks (user + system, all threads) of a process so far. */
function cpuTicks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return Number(fields[11]) + Number(fields[12]);
}

function run(url: string, token: string, duration: number): Promise<Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, connections: 10, duration, headers: { authorization: `Bearer ${token}` } }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

async function waitUp(url: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    try {
      await fetch(url);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  throw new Error(`${url} did not come up`);
}

const servers = [];
for (const v of variants) {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-ab-'));
  const child = spawn(process.execPath, ['bin/keel.js', 'serve'], {
    cwd: v.env.KEEL_DIR ?? ROOT,
    env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, ENABLE_REGISTRATION: 'true', LOGIN_LIMIT: '100000', REGISTER_LIMIT: '100000', ...v.env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  servers.push({ ...v, port, dataDir, child, token: '', results: [] as { rps: number; us: number; bad: number }[] });
}
try {
  for (const s of servers) {
    const base = `http://127.0.0.1:${s.port}`;
    await waitUp(`${base}/health`);
    const user = { email: `ab-${s.port}@example.com`, password: 'correct horse battery staple 9!', name: 'A/B' };
    await fetch(`${base}/api/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(user) });
    const login = await fetch(`${base}/api/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(user) });
    s.token = ((await login.json()) as { accessToken?: string }).accessToken ?? '';
    await run(`${base}${path}`, s.token, 2); // warm-up
  }
  for (let round = 0; round < rounds; round++) {
    for (const s of servers) {
      const pid = s.child.pid ?? 0;
      const before = cpuTicks(pid);
      const r = await run(`http://127.0.0.1:${s.port}${path}`, s.token, seconds);
      // Clock ticks are 10 ms: µs per request = ticks × 10,000 / requests.
      s.results.push({ rps: r.requests.average, us: ((cpuTicks(pid) - before) * 10_000) / Math.max(1, r.requests.total ?? 0), bad: r.non2xx + (r.errors ?? 0) });
    }
  }
  for (const s of servers) {
    const rps = s.results.map((r) => Math.round(r.rps)).join(' ');
    const us = s.results.map((r) => r.us.toFixed(1)).join(' ');
    console.log(`${s.name.padEnd(12)} req/s ${rps}   CPU µs/request ${us}   failed ${s.results.map((r) => r.bad).join(',')}`);
  }
} finally {
  for (const s of servers) {
    s.child.kill('SIGTERM');
    await new Promise((r) => s.child.once('exit', r));
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}
