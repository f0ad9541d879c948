/**
 * Overload: a login flood at five times the login capacity measured in the same run, while
 * authenticated reads (GET /api/v1/users/me) go on at a steady rate. The password-hashing queue is
 * bounded (HASH_QUEUE_MAX, default 16 per hashing thread): logins beyond it answer 503 `overloaded`
 * at once, so the reads keep their latency. Printed: the capacity, the offered and answered login
 * rates, the share refused, any other answer (there should be none), and the reads' p99 with no flood
 * and during it (goal p99 < 50 ms during the flood).
 *
 *   npm run bench -- overload          (both backends; or: tsx bench/overload.ts [pglite|postgres])
 */
import { randomBytes } from 'node:crypto';
import type { Options, Result } from 'autocannon';
import { BENCH_SECONDS, fmt, isMain, loadInChild, okPerSecond, pool, postJson, printTable, sleep, withBackends, type BenchBackend } from './lib.js';
import { cpuMeter } from './cpu.js';

export const OVERLOAD_READ_P99_GOAL_MS = 50;
const FLOOD_FACTOR = 5;
const USERS = Number(process.env.BENCH_USERS ?? '100');
/** Authenticated reads per second beside the flood (an open-loop rate, so the figure is their latency). */
const READ_RATE = Number(process.env.BENCH_OVERLOAD_READ_RATE ?? '200');
const READ_CONNECTIONS = 10;
/** Enough connections for the offered rate while the admitted logins wait in the queue. */
const FLOOD_CONNECTIONS = 256;
/** The closed-loop flood's connections (each sends its next login as soon as the last is answered). */
const CLOSED_FLOOD_CONNECTIONS = 64;

export interface OverloadResult {
  backend: string;
  /** The settings that differ from the defaults ('' for none). */
  settings: string;
  /** Logins per second at concurrency 8, no flood (the capacity). */
  capacity: number;
  offered: number;
  loginsOk: number;
  refused: number;
  /** Answers that were neither 200 nor 503 (errors and timeouts included). */
  other: number;
  refusedShare: number;
  floodP50: number;
  readP99Idle: number;
  readP50Flood: number;
  readP99Flood: number;
  readFailures: number;
  /** GET /users/me at 10 connections as fast as Keel answers, alone and during the same flood (the goal: >= 0.5). */
  readRateAlone: number;
  readRateFlood: number;
  readRateP99Flood: number;
  /**
   * Keel's main thread busy during the open flood, as a share of the flood's time (its CPU from `/proc`):
   * what the flood, its admitted logins and the reads beside it took of the thread. (Until stop 47 this
   * was a cost per refusal, the CPU less the logins and reads at their own cost over the refusals: since
   * refusals are held (refusal-hold.ts) they are too few for that difference to mean anything;
   * `bench/refusal-cost.ts` measures a refusal.)
   */
  floodMainShare: number;
  /**
   * The closed-loop flood: 64 connections sending logins as fast as they are answered (no rate), with
   * the reads as fast as they go beside it: the refusals and logins it got per second, the reads' rate and p99.
   */
  closedRefused: number;
  closedOk: number;
  closedReadRate: number;
  closedReadP99: number;
}

/**
 * The reads' connections are open before the flood's: the reads stand for clients already signed in,
 * on keep-alive connections. Started together, the reads' generator sometimes connected after the
 * flood's 256 connections, and its connections waited behind them in the listen queue: Node's libuv
 * accepts one connection per event-loop iteration (libuv 1.45, "unix: don't accept() connections in a
 * loop"), and an iteration under the flood's onset takes 1-5 ms, so the reads' first requests waited
 * 300-700 ms (strace of Keel on PostgreSQL: one accept4 per epoll_pwait, 157 connections queued). The
 * flood's generator is started 300 ms after the reads' (both take the same ~0.4 s to start), so the
 * reads' first 0.3 s of their window (3 % of it) run before the flood and its last 0.3 s after them.
 */
const FLOOD_AFTER_READS_MS = 300;

async function readsThenFlood(reads: Promise<Result>, flood: () => Promise<Result>): Promise<[Result, Result]> {
  await sleep(FLOOD_AFTER_READS_MS);
  return Promise.all([reads, flood()]);
}

const count = (r: Result, status: number): number => r.statusCodeStats?.[String(status)]?.count ?? 0;

/** Keel's settings for each row: the defaults (hashing threads at nice 10), then hashing threads at nice 0 (HASH_THREAD_NICE=0). */
export const OVERLOAD_VARIANTS: Record<string, string>[] = [{}, { HASH_THREAD_NICE: '0' }];

export async function benchOverloadAll(backend: BenchBackend): Promise<OverloadResult[]> {
  const out: OverloadResult[] = [];
  for (const env of OVERLOAD_VARIANTS) out.push(await benchOverload(backend, env));
  return out;
}

export async function benchOverload(backend: BenchBackend, env: Record<string, string> = {}): Promise<OverloadResult> {
  // LOGIN_IP_LIMIT counts every login in flight from one address until its password proves right: a
  // flood from one loopback client would hit it (429) and measure that limit, not the hash queue.
  const keel = await backend.startKeel({ LOGIN_IP_LIMIT: '1000000', ...env });
  const label = Object.entries(env).map(([k, v]) => `${k}=${v}`).join(' ');
  try {
    const run = randomBytes(3).toString('hex');
    const users = Array.from({ length: USERS }, (_, i) => ({ email: `flood-${run}-${i}@example.com`, password: `correct-horse-battery-${i}-staple`, name: `Flood ${i}` }));
    process.stderr.write(`[overload/${backend.name}${label ? ` ${label}` : ''}] registering ${USERS} users...\n`);
    await pool(users, 4, async (u) => {
      const res = await postJson(`${keel.url}/api/v1/auth/register`, u);
      if (res.status !== 201) throw new Error(`register ${u.email}: ${res.status} ${JSON.stringify(res.body)}`);
    });
    const reader = await postJson(`${keel.url}/api/v1/auth/login`, { email: users[0]!.email, password: users[0]!.password });
    const token = reader.body.accessToken as string | undefined;
    if (!token) throw new Error(`reader login: ${reader.status} ${JSON.stringify(reader.body)}`);

    // Every login load sends the users' bodies in turn, from a process of its own (bench/load-child.ts).
    const bodies = users.map((u) => JSON.stringify({ email: u.email, password: u.password }));
    const logins = (extra: Partial<Options>): Options => ({
      url: keel.url,
      requests: [{ method: 'POST', path: '/api/v1/auth/login', headers: { 'content-type': 'application/json' } }],
      ...extra,
    });
    // Reads come from a process of their own: beside the flood's generator they measured its event loop.
    const reads = (seconds: number): Promise<Result> =>
      loadInChild({ url: `${keel.url}/api/v1/users/me`, headers: { authorization: `Bearer ${token}` }, connections: READ_CONNECTIONS, overallRate: READ_RATE, duration: seconds });

    process.stderr.write(`[overload/${backend.name}] capacity: logins at concurrency 8 for ${BENCH_SECONDS} s...\n`);
    await loadInChild(logins({ connections: 8, duration: 2 }), { bodies });
    const pid = keel.proc.child.pid ?? null;
    const cap = await loadInChild(logins({ connections: 8, duration: BENCH_SECONDS }), { bodies });
    const capacity = count(cap, 200) / cap.duration;
    // The reads are warmed up once, as the logins are: a fresh process's first seconds of a route (its
    // compilation) put 100-190 ms in the first window's p99 on PostgreSQL, which is not the flood's cost.
    await reads(2);
    process.stderr.write(`[overload/${backend.name}] reads alone at ${READ_RATE}/s for ${BENCH_SECONDS} s...\n`);
    const idle = await reads(BENCH_SECONDS);
    // Reads as fast as Keel answers them (closed loop), alone: the rate the flood must not halve.
    const readsMax = (seconds: number): Promise<Result> =>
      loadInChild({ url: `${keel.url}/api/v1/users/me`, headers: { authorization: `Bearer ${token}` }, connections: READ_CONNECTIONS, duration: seconds });
    const alone = await readsMax(BENCH_SECONDS);
    const offered = Math.max(1, Math.round(capacity * FLOOD_FACTOR));
    process.stderr.write(`[overload/${backend.name}] flood: ${offered} logins/s (${FLOOD_FACTOR} × ${fmt(capacity, 1)}) with reads at ${READ_RATE}/s for ${BENCH_SECONDS} s...\n`);
    // The flood comes from a process of its own at nice 10: it stands for clients elsewhere, and must
    // not take a core from Keel or from the reads' generator, whose clock measures the latency.
    const floodOpts = logins({ connections: FLOOD_CONNECTIONS, overallRate: offered, duration: BENCH_SECONDS });
    // The main thread's CPU is metered from the flood's start, not the reads' head start.
    let floodMeter: ReturnType<typeof cpuMeter> | undefined;
    const [during, flood] = await readsThenFlood(reads(BENCH_SECONDS), () => {
      floodMeter = cpuMeter(pid);
      return loadInChild(floodOpts, { bodies, nice: 10 });
    });
    const floodMainMs = floodMeter?.stop(1).mainMs ?? 0;
    process.stderr.write(`[overload/${backend.name}] the same flood with reads as fast as Keel answers them...\n`);
    const [fastDuring] = await readsThenFlood(readsMax(BENCH_SECONDS), () => loadInChild(floodOpts, { bodies, nice: 10 }));
    process.stderr.write(`[overload/${backend.name}] ${CLOSED_FLOOD_CONNECTIONS} connections sending logins as fast as answered, with reads as fast as Keel answers them...\n`);
    const closedOpts = logins({ connections: CLOSED_FLOOD_CONNECTIONS, duration: BENCH_SECONDS });
    const [closedReads, closed] = await readsThenFlood(readsMax(BENCH_SECONDS), () => loadInChild(closedOpts, { bodies, nice: 10 }));
    process.stderr.write(`[overload/${backend.name}${label ? ` ${label}` : ''}] flood answers by status: ${JSON.stringify(flood.statusCodeStats ?? {})}, errors ${flood.errors}, timeouts ${flood.timeouts}\n`);
    const ok = count(flood, 200);
    const refused = count(flood, 503);
    const answered = flood.requests.total ?? ok + refused + flood.non2xx;
    return {
      backend: backend.name,
      settings: label,
      capacity,
      offered,
      loginsOk: ok / flood.duration,
      refused: refused / flood.duration,
      other: Math.max(0, answered - ok - refused) + flood.errors + flood.timeouts,
      refusedShare: refused / Math.max(1, ok + refused),
      floodP50: flood.latency.p50,
      readP99Idle: idle.latency.p99,
      readP50Flood: during.latency.p50,
      readP99Flood: during.latency.p99,
      readFailures: during.non2xx + during.errors + during.timeouts + fastDuring.non2xx + fastDuring.errors + fastDuring.timeouts + closedReads.non2xx + closedReads.errors + closedReads.timeouts,
      readRateAlone: okPerSecond(alone),
      readRateFlood: okPerSecond(fastDuring),
      readRateP99Flood: fastDuring.latency.p99,
      closedRefused: count(closed, 503) / closed.duration,
      closedOk: count(closed, 200) / closed.duration,
      closedReadRate: okPerSecond(closedReads),
      closedReadP99: closedReads.latency.p99,
      floodMainShare: floodMainMs / (flood.duration * 1000),
    };
  } finally {
    await keel.stop();
  }
}

/** Reads as fast as they go during the flood, as a share of their rate alone. */
export const OVERLOAD_READ_RATIO_GOAL = 0.5;

export function overloadGoal(r: OverloadResult): boolean {
  return (
    r.readP99Flood < OVERLOAD_READ_P99_GOAL_MS &&
    r.readRateP99Flood < OVERLOAD_READ_P99_GOAL_MS &&
    r.closedReadP99 < OVERLOAD_READ_P99_GOAL_MS &&
    r.readRateFlood / r.readRateAlone >= OVERLOAD_READ_RATIO_GOAL &&
    r.closedReadRate / r.readRateAlone >= OVERLOAD_READ_RATIO_GOAL &&
    r.readFailures === 0 &&
    r.other === 0
  );
}

export function printOverload(results: OverloadResult[]): void {
  printTable(
    `Overload: logins at ${FLOOD_FACTOR}× capacity for ${BENCH_SECONDS} s beside GET /users/me at ${READ_RATE}/s, then beside reads as fast as they go; then ${CLOSED_FLOOD_CONNECTIONS} connections of logins as fast as answered beside reads as fast as they go (goal: reads p99 < ${OVERLOAD_READ_P99_GOAL_MS} ms, read rate >= ${OVERLOAD_READ_RATIO_GOAL} of alone, no answer but 200/503 overloaded)`,
    ['backend', 'settings', 'capacity login/s', 'offered/s', 'ok/s', '503/s', 'refused share', 'other', 'login p50 ms', 'read p99 alone', 'read p50 flood', 'read p99 flood', 'reads/s alone', 'reads/s flood (ratio, p99 ms)', 'main thread busy in flood', `${CLOSED_FLOOD_CONNECTIONS}-conn flood: 503/s, ok/s`, 'reads/s in it (ratio, p99 ms)', 'read failed', 'goal'],
    results.map((r) => [
      r.backend,
      r.settings || 'defaults',
      fmt(r.capacity, 1),
      String(r.offered),
      fmt(r.loginsOk, 1),
      fmt(r.refused, 1),
      `${fmt(r.refusedShare * 100, 1)}%`,
      String(r.other),
      fmt(r.floodP50),
      fmt(r.readP99Idle),
      fmt(r.readP50Flood),
      fmt(r.readP99Flood),
      fmt(r.readRateAlone),
      `${fmt(r.readRateFlood)} (${fmt(r.readRateFlood / r.readRateAlone, 2)}, ${fmt(r.readRateP99Flood)})`,
      `${fmt(r.floodMainShare * 100)} %`,
      `${fmt(r.closedRefused)}, ${fmt(r.closedOk, 1)}`,
      `${fmt(r.closedReadRate)} (${fmt(r.closedReadRate / r.readRateAlone, 2)}, ${fmt(r.closedReadP99)})`,
      String(r.readFailures),
      overloadGoal(r) ? 'met' : 'NOT met',
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printOverload((await withBackends(benchOverloadAll, only)).flat());
}
