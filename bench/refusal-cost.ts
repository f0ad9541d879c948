/**
 * The main thread's CPU per refused login: Keel started in this process (through tsx, LOG_LEVEL at
 * its default, lines to stdout: redirect it to a file as `npm start > keel.log` does) with its hash
 * queue held full (`holdHashWorkers`), so every `POST /auth/login` is refused with 503 `overloaded`;
 * 64 connections as fast as Keel answers, from a process of its own; three rounds of 5 s. Printed
 * (stderr): refusals per second and µs of the main thread per refusal (from /proc, bench/cpu.ts).
 * Not in `npm run bench`: a before/after measure of the refusal path, e.g. against a `git worktree`
 * of the commit before a change:
 *
 *   tsx bench/refusal-cost.ts > /tmp/keel.log                      (this checkout)
 *   (cd /tmp/before && tsx /path/to/bench/refusal-cost.ts /tmp/before > /tmp/keel.log)
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadInChild, ROOT } from './lib.js';
import { cpuMeter } from './cpu.js';

const dir = process.argv[2] ?? ROOT;
process.env.DATA_DIR = mkdtempSync(join(tmpdir(), 'keel-refusal-'));
process.env.HASH_QUEUE_MAX = '2';
process.env.LOGIN_IP_LIMIT = '1000000';
const { startServer } = (await import(pathToFileURL(join(dir, 'src/server.ts')).href)) as typeof import('../src/server.js');
const pool = (await import(pathToFileURL(join(dir, 'src/platform/argon2-pool.ts')).href)) as typeof import('../src/platform/argon2-pool.js');
const srv = await startServer({ port: 0, host: '127.0.0.1' });
const hold = pool.holdHashWorkers(2);
const body = JSON.stringify({ email: 'nobody@example.com', password: 'correct horse battery staple' });
const opts = { url: srv.url, connections: 64, duration: 2, requests: [{ method: 'POST' as const, path: '/api/v1/auth/login', headers: { 'content-type': 'application/json' }, body }] };
await loadInChild(opts);
for (let round = 1; round <= 3; round++) {
  const meter = cpuMeter(process.pid);
  const r = await loadInChild({ ...opts, duration: 5 });
  const refused = r.statusCodeStats?.['503']?.count ?? 0;
  const cpu = meter.stop(refused);
  process.stderr.write(`round ${round}: ${Math.round(refused / 5)} refused/s, other answers ${(r.requests.total ?? 0) - refused}, main thread ${(cpu.mainMs * 1000).toFixed(1)} µs per refusal\n`);
}
await hold.release();
await srv.close();
process.exit(0);
