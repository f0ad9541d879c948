/**
 * Logins per second against the physical limit of a login: one Argon2id verify.
 *
 * Keel runs in a child process (`node bin/keel.js serve`, what `npm start` runs) with registration on
 * and the login limits raised out of the way. N users register through the API, then autocannon signs
 * them in round-robin at concurrency 8; every answer must be 200 with an accessToken. Beside it,
 * bench/argon2-verify.ts measures bare verifies at the same concurrency in its own process: once on
 * libuv's default 4 threads and, in every round, on one thread per core (Keel hashes on one thread
 * per core; on a 2-core machine that is the faster of the two). The better figure is the physical
 * limit. bench/bare-server.ts answers POST /login with one verify over bare hono: the limit of a
 * login over HTTP, without a database. Each round measures the three one after another (Keel and
 * the bare server stay up, idle while the others run); the median round's ratio is reported.
 * Goal printed: login/s ÷ best verify/s >= 0.9. CPU per login from /proc is printed beside it
 * (bench/cpu.ts).
 *
 *   npm run bench -- login             (both backends; or: tsx bench/login.ts [pglite|postgres])
 */
import { randomBytes } from 'node:crypto';
import { HASH_THREADS } from '../src/platform/argon2-pool.js';
import { cpuMeter, type CpuPerOp } from './cpu.js';
import type { Options, Result } from 'autocannon';
import {
  BENCH_SECONDS,
  fmt,
  isMain,
  load,
  median,
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
/**
 * Rounds of (Keel, bare verifies, bare HTTP login), BENCH_SECONDS each. On a shared machine the speed
 * of a core drifts by ±10% over minutes; each ratio compares figures taken within half a minute of
 * each other, and the median of the rounds is the one reported.
 */
const ROUNDS = Math.max(1, Number(process.env.BENCH_LOGIN_ROUNDS ?? '3'));

interface LoginRound {
  loginsPerSecond: number;
  /** Bare verifies per second on one thread per core, measured in this round. */
  verifyPerSecond: number;
  bareHttpPerSecond: number;
  /** Logins ÷ the better of this round's verifies and the 4-thread figure. */
  ratio: number;
}

export interface LoginResult {
  backend: string;
  /** Medians over the rounds. */
  loginsPerSecond: number;
  loginP50: number;
  /** The worst round's p99. */
  loginP99: number;
  failures: number;
  /** The physical limit: the better of the two bare figures below (median over rounds). */
  argon2PerSecond: number;
  /** Bare verifies, library defaults (libuv's 4 threads), measured once. */
  argon2DefaultPerSecond: number;
  /** Bare verifies, libuv's pool sized to the cores (median over rounds). */
  argon2CoresPerSecond: number;
  /** Median of the rounds' ratios; min and max beside it. */
  ratio: number;
  ratioMin: number;
  ratioMax: number;
  /** Bare hono POST /login: JSON body in, one Argon2id verify, JSON out (no database, no Keel). */
  bareHttpPerSecond: number;
  /** Median of the rounds' Keel ÷ bare HTTP login. */
  bareHttpRatio: number;
  /** Median of the rounds' bare HTTP login ÷ best verify: how close a login over HTTP gets at all. */
  bareHttpCeiling: number;
  /** CPU per login (Keel, bare HTTP login) and per verify, from /proc, averaged over the rounds. */
  cpu: { keel: CpuPerOp; bareHttp: CpuPerOp; verifyMs: number };
}

interface Baseline {
  perSecond: number;
  /** CPU of the verifying process per verify (main thread and hashing threads). */
  cpuMsPerVerify: number;
}

/** Keel's hashing threads (one per core, at most 4: platform/argon2-pool.ts), for the bare figure on as many. */
const CORES = String(HASH_THREADS);

function meanCpu(rows: CpuPerOp[]): CpuPerOp {
  const mean = (k: keyof CpuPerOp): number => rows.reduce((a, r) => a + r[k], 0) / rows.length;
  return { mainMs: mean('mainMs'), threadsMs: mean('threadsMs'), serversMs: mean('serversMs'), loadGeneratorMs: mean('loadGeneratorMs'), machineMs: mean('machineMs') };
}

/**
 * Bare Argon2id verifies per second in a separate process, through the library's async API on
 * libuv's pool: its default 4 threads, or `threads` (the number of cores, which hashes faster on a
 * machine with fewer cores than 4).
 */
export async function argon2Baseline(concurrency = CONCURRENCY, seconds = BENCH_SECONDS, threads?: string): Promise<Baseline> {
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
    const parsed = JSON.parse(line) as Baseline;
    return { perSecond: parsed.perSecond, cpuMsPerVerify: parsed.cpuMsPerVerify };
  } catch {
    throw new Error(`argon2 baseline printed no result:\n${proc.output()}`);
  }
}

/** Counts answers that are 2xx and carry an access token for `seconds`, with the CPU they took. */
async function countLogins(opts: Options, pid: number | null, seconds: number): Promise<{ perSecond: number; cpu: CpuPerOp; result: Result }> {
  const meter = cpuMeter(pid);
  const result = await load({ ...opts, duration: seconds });
  // A mismatch is a 2xx without an access token; count it out of the logins.
  const ok = result['2xx'] - result.mismatches;
  return { perSecond: ok / result.duration, cpu: meter.stop(ok), result };
}

export async function benchLogin(backend: BenchBackend): Promise<LoginResult> {
  const keel = await backend.startKeel();
  // bare hono answering POST /login with one verify (bench/bare-server.ts), on one hashing thread per core.
  const bare = await startBare({ UV_THREADPOOL_SIZE: CORES });
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
    const keelOpts: Options = {
      url: keel.url,
      connections: CONCURRENCY,
      requests: [
        {
          method: 'POST',
          path: '/api/v1/auth/login',
          headers: { 'content-type': 'application/json' },
          setupRequest: (req: { body?: string | Buffer }) => {
            const u = users[next++ % users.length]!;
            return { ...req, body: JSON.stringify({ email: u.email, password: u.password }) };
          },
        },
      ],
      verifyBody: (body: string) => body.includes('"accessToken"'),
    };
    const bareOpts: Options = {
      url: bare.url,
      connections: CONCURRENCY,
      requests: [{ method: 'POST', path: '/login', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'bench@example.com', password: 'x' }) }],
      verifyBody: (body: string) => body.includes('"accessToken"'),
    };
    process.stderr.write(`[login/${backend.name}] warm-up ${WARMUP_SECONDS} s each for Keel and the bare HTTP login; bare verifies on libuv's 4 threads...\n`);
    await load({ ...keelOpts, duration: WARMUP_SECONDS });
    await load({ ...bareOpts, duration: WARMUP_SECONDS });
    const argon2Default = await argon2Baseline();

    const rounds: LoginRound[] = [];
    const keelCpu: CpuPerOp[] = [];
    const bareCpu: CpuPerOp[] = [];
    const verifyCpu: number[] = [];
    const p50s: number[] = [];
    let p99 = 0;
    let failures = 0;
    for (let i = 1; i <= ROUNDS; i++) {
      process.stderr.write(`[login/${backend.name}] round ${i}/${ROUNDS}: ${BENCH_SECONDS} s each of Keel logins, bare verifies, bare HTTP logins (concurrency ${CONCURRENCY})...\n`);
      // Keel and the bare server stay up; only the one under load uses the cores.
      const k = await countLogins(keelOpts, keel.proc.child.pid ?? null, BENCH_SECONDS);
      const v = await argon2Baseline(CONCURRENCY, BENCH_SECONDS, CORES);
      const b = await countLogins(bareOpts, bare.pid, BENCH_SECONDS);
      const best = Math.max(v.perSecond, argon2Default.perSecond);
      rounds.push({ loginsPerSecond: k.perSecond, verifyPerSecond: v.perSecond, bareHttpPerSecond: b.perSecond, ratio: k.perSecond / best });
      keelCpu.push(k.cpu);
      bareCpu.push(b.cpu);
      verifyCpu.push(v.cpuMsPerVerify);
      p50s.push(k.result.latency.p50);
      p99 = Math.max(p99, k.result.latency.p99);
      failures += k.result.non2xx + k.result.errors + k.result.timeouts + k.result.mismatches;
    }
    const ratios = rounds.map((r) => r.ratio);
    const bestVerify = rounds.map((r) => Math.max(r.verifyPerSecond, argon2Default.perSecond));
    return {
      backend: backend.name,
      loginsPerSecond: median(rounds.map((r) => r.loginsPerSecond)),
      loginP50: median(p50s),
      loginP99: p99,
      failures,
      argon2PerSecond: median(bestVerify),
      argon2DefaultPerSecond: argon2Default.perSecond,
      argon2CoresPerSecond: median(rounds.map((r) => r.verifyPerSecond)),
      ratio: median(ratios),
      ratioMin: Math.min(...ratios),
      ratioMax: Math.max(...ratios),
      bareHttpPerSecond: median(rounds.map((r) => r.bareHttpPerSecond)),
      bareHttpRatio: median(rounds.map((r) => r.loginsPerSecond / r.bareHttpPerSecond)),
      bareHttpCeiling: median(rounds.map((r, i) => r.bareHttpPerSecond / bestVerify[i]!)),
      cpu: { keel: meanCpu(keelCpu), bareHttp: meanCpu(bareCpu), verifyMs: verifyCpu.reduce((a, b) => a + b, 0) / verifyCpu.length },
    };
  } finally {
    await bare.stop();
    await keel.stop();
  }
}

export function printLogin(results: LoginResult[]): void {
  printTable(
    `Logins (POST /auth/login, ${USERS} users round-robin, concurrency ${CONCURRENCY}, ${ROUNDS} rounds of ${BENCH_SECONDS} s; medians) vs bare Argon2id verify (goal: ratio >= ${LOGIN_GOAL})`,
    ['backend', 'login/s', 'p50 ms', 'p99 ms', 'failed', 'verify/s 4 thr', `verify/s ${CORES} thr`, 'ratio to best', 'rounds min-max', 'goal', 'bare HTTP login/s', 'ratio to it', 'bare HTTP ÷ best verify'],
    results.map((r) => [
      r.backend,
      fmt(r.loginsPerSecond, 1),
      fmt(r.loginP50),
      fmt(r.loginP99),
      String(r.failures),
      fmt(r.argon2DefaultPerSecond, 1),
      fmt(r.argon2CoresPerSecond, 1),
      fmt(r.ratio, 2),
      `${fmt(r.ratioMin, 2)}-${fmt(r.ratioMax, 2)}`,
      r.ratio >= LOGIN_GOAL ? 'met' : 'NOT met',
      fmt(r.bareHttpPerSecond, 1),
      fmt(r.bareHttpRatio, 2),
      fmt(r.bareHttpCeiling, 2),
    ]),
  );
}

/**
 * Where a login's CPU goes (ms per login, from /proc over the counted window), next to a bare verify's.
 * With both cores busy, logins/s ÷ verifies/s is about (CPU per verify) ÷ (machine CPU per login): the
 * goal allows a login `verify ÷ goal − verify` ms of CPU beyond its verify, load generator included.
 */
export function printLoginCpu(results: LoginResult[]): void {
  const row = (label: string, c: CpuPerOp, verifyMs: number): string[] => [
    label,
    fmt(c.mainMs, 2),
    fmt(c.threadsMs, 2),
    fmt(c.serversMs, 2),
    fmt(c.loadGeneratorMs, 2),
    fmt(c.machineMs, 2),
    fmt(c.machineMs - verifyMs, 2),
  ];
  printTable(
    `CPU per login, ms (from /proc; "beyond the verify" = machine − one bare verify; the goal allows verify × ${fmt(1 / LOGIN_GOAL - 1, 3)})`,
    ['run', 'main thread', 'other threads', 'db servers', 'load generator', 'machine', 'beyond the verify'],
    results.flatMap((r) => [
      row(`Keel, ${r.backend}`, r.cpu.keel, r.cpu.verifyMs),
      row(`bare HTTP login (${r.backend} run)`, r.cpu.bareHttp, r.cpu.verifyMs),
      [`bare verify (${r.backend} run)`, '-', fmt(r.cpu.verifyMs, 2), '-', '-', fmt(r.cpu.verifyMs, 2), `allowed: ${fmt(r.cpu.verifyMs * (1 / LOGIN_GOAL - 1), 2)}`],
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  const results = await withBackends(benchLogin, only);
  printLogin(results);
  printLoginCpu(results);
}
