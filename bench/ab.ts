/**
 * Interleaved A/B of Keel builds or settings on one route: one Keel per variant, all started at once
 * (each idle while another is measured), measured in alternating rounds, printing req/s and the
 * server's CPU per request (user + system of its process, from /proc/<pid>/stat: steadier than req/s
 * on a shared machine, and not fooled as sampled profiles are by time spent waiting for a core).
 *
 *   AB_VARIANTS='base:{"KEEL_DIR":"/path/to/other/checkout"};new:{};metrics:{"METRICS_ENABLED":"true"}' \
 *   AB_PATH=/api/v1/users/me AB_ROUNDS=3 AB_SECONDS=4 tsx bench/ab.ts
 *
 * A variant is a name and the settings it adds to the benchmarks' defaults (`benchEnv`: Keel's own
 * defaults, access log on, written to a file); `KEEL_DIR` runs another checkout's `bin/keel.js serve`
 * (e.g. a `git worktree` of the commit before a change); `KEEL_NODE` runs it on another `node` binary (e.g. the
 * machine's own, to compare runtimes on the same bundle). Each Keel runs on a DATA_DIR of its own (PGlite),
 * or with `AB_BACKEND=postgres` on a database of its own on the benchmarks' PostgreSQL server with
 * its Redis (Keel's production setup); a variant's `BACKEND` (`pglite` or `postgres`) sets its own,
 * so both backends are measured in the same alternating rounds. Each has a registered user whose
 * bearer token every request carries. Each Keel is measured after a restart (`startKeel`). `AB_MODE=heartbeat` measures `POST /agents/heartbeat` instead, round-robin over
 * `AB_DEVICES` (2,000) devices enrolled and online in each Keel (fleet.ts `setUpFleet`); `AB_MODE=login`
 * measures `POST /auth/login` of that user at concurrency 8. Linux only.
 */
import { readFileSync } from 'node:fs';
import type { Result } from 'autocannon';
import { benchEnv, load, postJson, ROOT, startKeel, startPostgres, type BenchPostgres, type RunningKeel } from './lib.js';
import { fleetEnv, heartbeatLoad, setUpFleet } from './fleet.js';

const variants = (process.env.AB_VARIANTS ?? 'default:{}').split(';').filter(Boolean).map((s) => {
  const i = s.indexOf(':');
  const { KEEL_DIR, KEEL_NODE, BACKEND, ...env } = JSON.parse(s.slice(i + 1)) as Record<string, string>;
  return { name: s.slice(0, i), env, dir: KEEL_DIR ?? ROOT, node: KEEL_NODE, backend: BACKEND ?? process.env.AB_BACKEND ?? 'pglite' };
});
const path = process.env.AB_PATH ?? '/api/v1/users/me';
const seconds = Number(process.env.AB_SECONDS ?? '4');
const rounds = Number(process.env.AB_ROUNDS ?? '3');
/**
 * `read` (default): GET AB_PATH with a user's bearer token; `heartbeat`: POST /agents/heartbeat
 * round-robin over AB_DEVICES enrolled devices; `login`: POST /auth/login of the registered user at
 * concurrency 8 (CPU per login counts every thread: the Argon2 verify too).
 */
const mode = process.env.AB_MODE ?? 'read';
if (mode !== 'read' && mode !== 'heartbeat' && mode !== 'login') throw new Error(`AB_MODE must be read, heartbeat or login, not ${mode}`);
const devices = Number(process.env.AB_DEVICES ?? '2000');
const admin = { email: 'ab-admin@example.com', password: 'correct-horse-battery-admin-staple' };
for (const v of variants) if (v.backend !== 'pglite' && v.backend !== 'postgres') throw new Error(`a variant's backend (BACKEND, or AB_BACKEND) must be pglite or postgres, not ${v.backend}`);

/** CPU clock ticks (user, system; all threads) of a process so far. */
function cpuTicks(pid: number): { user: number; system: number } {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  return { user: Number(fields[11]), system: Number(fields[12]) };
}

const servers: { name: string; keel: RunningKeel; run: (seconds: number) => Promise<Result>; results: { rps: number; us: number; sysUs: number; bad: number }[] }[] = [];
const databases: { drop(): Promise<void> }[] = [];
let postgres: BenchPostgres | null = null;
try {
  if (variants.some((v) => v.backend === 'postgres')) {
    postgres = await startPostgres();
    if (!postgres) throw new Error('a PostgreSQL variant: no PostgreSQL binaries in /usr/lib/postgresql/*/bin');
  }
  for (const v of variants) {
    let env = v.env;
    if (postgres && v.backend === 'postgres') {
      const db = await postgres.createDatabase();
      databases.push(db);
      env = { DATABASE_URL: db.url, ...(postgres.redisUrl ? { REDIS_URL: postgres.redisUrl } : {}), ...env };
    }
    const keel = await startKeel(benchEnv(mode === 'heartbeat' ? { ...fleetEnv(admin), ...env } : env), v.dir, v.node);
    servers.push({ name: v.name, keel, run: () => Promise.reject(new Error('not set up')), results: [] });
  }
  for (const s of servers) {
    if (mode === 'heartbeat') {
      const { tokens } = await setUpFleet(s.keel.url, admin, devices, `ab/${s.name}`);
      s.run = (secs) => heartbeatLoad(`${s.keel.url}/api/v1/agents/heartbeat`, tokens, secs);
      await s.run(2); // warm-up
      continue;
    }
    const user = { email: `ab-${s.name}@example.com`, password: 'correct horse battery staple 9!', name: 'A/B' };
    const registered = await postJson(`${s.keel.url}/api/v1/auth/register`, user);
    if (registered.status !== 201) throw new Error(`register: ${registered.status} ${JSON.stringify(registered.body)}`);
    const login = await postJson(`${s.keel.url}/api/v1/auth/login`, { email: user.email, password: user.password });
    if (login.status !== 200) throw new Error(`login: ${login.status} ${JSON.stringify(login.body)}`);
    const token = (login.body as { accessToken: string }).accessToken;
    if (mode === 'login') {
      const body = JSON.stringify({ email: user.email, password: user.password });
      s.run = (secs) => load({ url: `${s.keel.url}/api/v1/auth/login`, connections: 8, duration: secs, method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await s.run(2); // warm-up
      continue;
    }
    s.run = (secs) => load({ url: `${s.keel.url}${path}`, connections: 10, duration: secs, headers: { authorization: `Bearer ${token}` } });
    await s.run(2); // warm-up
  }
  for (let round = 0; round < rounds; round++) {
    for (const s of servers) {
      const pid = s.keel.proc.child.pid ?? 0;
      const before = cpuTicks(pid);
      const r = await s.run(seconds);
      // Clock ticks are 10 ms: µs per request = ticks × 10,000 / requests.
      const after = cpuTicks(pid);
      const perRequest = (ticks: number) => (ticks * 10_000) / Math.max(1, r.requests.total ?? 0);
      s.results.push({
        rps: r.requests.average,
        us: perRequest(after.user - before.user + after.system - before.system),
        sysUs: perRequest(after.system - before.system),
        bad: r.non2xx + (r.errors ?? 0),
      });
    }
  }
  for (const s of servers) {
    const rps = s.results.map((r) => Math.round(r.rps)).join(' ');
    const us = s.results.map((r) => r.us.toFixed(1)).join(' ');
    const sys = s.results.map((r) => r.sysUs.toFixed(1)).join(' ');
    console.log(`${s.name.padEnd(12)} req/s ${rps}   CPU µs/request ${us} (of which system ${sys})   failed ${s.results.map((r) => r.bad).join(',')}`);
  }
} finally {
  for (const s of servers) await s.keel.stop();
  for (const db of databases) await db.drop().catch(() => undefined);
  await postgres?.stop();
}
