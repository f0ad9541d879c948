/**
 * Logins per second against the physical limit of a login: one Argon2id verify.
 *
 * Keel runs in a child process (`node bin/keel.js serve`, what `npm start` runs) with registration on
 * and the login limits raised out of the way. N users register through the API, then autocannon signs
 * them in round-robin at concurrency 8 for BENCH_SECONDS; every answer must be 200 with an accessToken.
 * With Keel stopped, bench/argon2-verify.ts measures bare verifies at the same concurrency in its
 * own process, twice: on libuv's default 4 threads and on one thread per core (Keel hashes on one
 * thread per core; on a 2-core machine that is the faster of the two). The better figure is the
 * physical limit. bench/bare-server.ts answers POST /login with one verify over bare hono (the limit
 * of a login over HTTP, without a database). Goal printed: login/s ÷ best verify/s >= 0.9.
 *
 *   npm run bench -- login             (both backends; or: tsx bench/login.ts [pglite|postgres])
 */
import { randomBytes } from 'node:crypto';
import { HASH_THREADS } from '../src/platform/argon2-pool.js';
import {
  BENCH_SECONDS,
  fmt,
  isMain,
  load,
  pool,
  postJson,
  printTable,
  spawnGroup,
  startBare,
  withBackends,
  type BenchBackend,
} from './lib.js';

export const LOGIN_GOAL = 0.9;
const USERS = Number(process.env.BENCH_USERS ?? '200');
const CONCURRENCY = 8;
/**
 * Logins come ~100 a second, so V8 optimises the login path only after a few thousand: measured at
 * one client, main-thread CPU per login fell from 2.87 ms after 30 logins to 2.27 ms after 4,000.
 * The warm-up lets both Keel and the bare HTTP login reach that steady state before the count.
 */
const WARMUP_SECONDS = Number(process.env.BENCH_LOGIN_WARMUP ?? '20');

export interface LoginResult {
  backend: string;
  users: number;
  concurrency: number;
  loginsPerSecond: number;
  loginP50: number;
  loginP99: number;
  failures: number;
  /** The physical limit: the better of the two bare figures below. */
  argon2PerSecond: number;
  /** Bare verifies, library defaults (libuv's 4 threads). */
  argon2DefaultPerSecond: number;
  /** Bare verifies, libuv's pool sized to the cores. */
  argon2CoresPerSecond: number;
  ratio: number;
  /** Bare hono POST /login: JSON body in, one Argon2id verify, JSON out (no database, no Keel). */
  bareHttpPerSecond: number;
  bareHttpRatio: number;
}

/** Keel's hashing threads (one per core, at most 4: platform/argon2-pool.ts), for the bare figure on as many. */
const CORES = String(HASH_THREADS);

/**
 * Bare Argon2id verifies per second in a separate process, through the library's async API on
 * libuv's pool: its default 4 threads, or `threads` (the number of cores, which hashes faster on a
 * machine with fewer cores than 4).
 */
export async function argon2Baseline(concurrency = CONCURRENCY, seconds = BENCH_SECONDS, threads?: string): Promise<number> {
  const proc = spawnGroup(process.execPath, ['--import', 'tsx', 'bench/argon2-verify.ts'], {
    BENCH_CONCURRENCY: String(concurrency),
    BENCH_SECONDS: String(seconds),
    ...(threads ? { UV_THREADPOOL_SIZE: threads } : {}),
  });
  await new Promise<void>((resolve) => {
    if (proc.exited()) resolve();
    else proc.child.once('exit', () => resolve());
  });
  const line = proc.output().trim().split('\n').pop() ?? '';
  await proc.stop();
  try {
    const parsed = JSON.parse(line) as { perSecond: number };
    return parsed.perSecond;
  } catch {
    throw new Error(`argon2 baseline printed no result:\n${proc.output()}`);
  }
}

/** Logins per second of bare hono answering POST /login with one Argon2id verify (bench/bare-server.ts). */
export async function bareHttpLoginBaseline(concurrency = CONCURRENCY, seconds = BENCH_SECONDS): Promise<number> {
  const bare = await startBare({ UV_THREADPOOL_SIZE: CORES });
  try {
    const opts = {
      url: bare.url,
      connections: concurrency,
      requests: [{ method: 'POST', path: '/login', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'bench@example.com', password: 'x' }) }],
      verifyBody: (body: string) => body.includes('"accessToken"'),
    };
    await load({ ...opts, duration: WARMUP_SECONDS });
    const r = await load({ ...opts, duration: seconds });
    return (r['2xx'] - r.mismatches) / r.duration;
  } finally {
    await bare.stop();
  }
}

export async function benchLogin(backend: BenchBackend): Promise<LoginResult> {
  const keel = await backend.startKeel();
  let keelRunning = true;
  try {
    const run = randomBytes(3).toString('hex');
    const users = Array.from({ length: USERS }, (_, i) => ({
      email: `bench-${run}-${i}@example.com`,
      password: `correct-horse-battery-${i}-staple`,
      name: `Bench User ${i}`,
    }));
    process.stderr.write(`[login/${backend.name}] registering ${USERS} users...\n`);
    await pool(users, 4, async (u) => {
      const res = await postJson(`${keel.url}/api/v1/auth/register`, u);
      if (res.status !== 201) throw new Error(`register ${u.email}: ${res.status} ${JSON.stringify(res.body)}`);
    });
    const probe = await postJson(`${keel.url}/api/v1/auth/login`, { email: users[0]!.email, password: users[0]!.password });
    if (probe.status !== 200 || !probe.body.accessToken) throw new Error(`login probe: ${probe.status} ${JSON.stringify(probe.body)}`);

    let next = 0;
    const requests = [
      {
        method: 'POST',
        path: '/api/v1/auth/login',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req: { body?: string | Buffer }) => {
          const u = users[next++ % users.length]!;
          return { ...req, body: JSON.stringify({ email: u.email, password: u.password }) };
        },
      },
    ];
    const opts = { url: keel.url, connections: CONCURRENCY, requests, verifyBody: (body: string) => body.includes('"accessToken"') };
    process.stderr.write(`[login/${backend.name}] warm-up ${WARMUP_SECONDS} s, then ${BENCH_SECONDS} s of logins at concurrency ${CONCURRENCY}...\n`);
    await load({ ...opts, duration: WARMUP_SECONDS });
    const result = await load({ ...opts, duration: BENCH_SECONDS });
    await keel.stop();
    keelRunning = false;

    process.stderr.write(`[login/${backend.name}] bare Argon2id verifies, ${BENCH_SECONDS} s at concurrency ${CONCURRENCY}...\n`);
    const argon2DefaultPerSecond = await argon2Baseline();
    const argon2CoresPerSecond = await argon2Baseline(CONCURRENCY, BENCH_SECONDS, CORES);
    const argon2PerSecond = Math.max(argon2DefaultPerSecond, argon2CoresPerSecond);
    process.stderr.write(`[login/${backend.name}] bare HTTP login (hono + one verify), ${BENCH_SECONDS} s at concurrency ${CONCURRENCY}...\n`);
    const bareHttpPerSecond = await bareHttpLoginBaseline();
    // A mismatch is a 2xx without an access token; count it out of the logins.
    const loginsPerSecond = (result['2xx'] - result.mismatches) / result.duration;
    return {
      backend: backend.name,
      users: USERS,
      concurrency: CONCURRENCY,
      loginsPerSecond,
      loginP50: result.latency.p50,
      loginP99: result.latency.p99,
      failures: result.non2xx + result.errors + result.timeouts + result.mismatches,
      argon2PerSecond,
      argon2DefaultPerSecond,
      argon2CoresPerSecond,
      ratio: loginsPerSecond / argon2PerSecond,
      bareHttpPerSecond,
      bareHttpRatio: loginsPerSecond / bareHttpPerSecond,
    };
  } finally {
    if (keelRunning) await keel.stop();
  }
}

export function printLogin(results: LoginResult[]): void {
  printTable(
    `Logins (POST /auth/login, ${USERS} users round-robin, concurrency ${CONCURRENCY}, ${BENCH_SECONDS} s) vs bare Argon2id verify (goal: ratio >= ${LOGIN_GOAL})`,
    ['backend', 'login/s', 'p50 ms', 'p99 ms', 'failed', 'verify/s 4 thr', `verify/s ${CORES} thr`, 'ratio to best', 'goal', 'bare HTTP login/s', 'ratio to it'],
    results.map((r) => [
      r.backend,
      fmt(r.loginsPerSecond, 1),
      fmt(r.loginP50),
      fmt(r.loginP99),
      String(r.failures),
      fmt(r.argon2DefaultPerSecond, 1),
      fmt(r.argon2CoresPerSecond, 1),
      fmt(r.ratio, 2),
      r.ratio >= LOGIN_GOAL ? 'met' : 'NOT met',
      fmt(r.bareHttpPerSecond, 1),
      fmt(r.bareHttpRatio, 2),
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printLogin(await withBackends(benchLogin, only));
}
