/**
 * An authenticated read against the physical limit of the HTTP stack: GET /api/v1/users/me with a
 * bearer access token (request id, JWT verify, session and MFA checks, the profile from the
 * database) vs bare hono answering a JSON body of the same size (bench/bare-server.ts). Each server
 * runs alone in its own process; autocannon runs here. Goals printed: ratio >= 0.5, Keel p99 < 10 ms.
 *
 *   npm run bench -- authed-read       (both backends; or: tsx bench/authed-read.ts [pglite|postgres])
 */
import { randomBytes } from 'node:crypto';
import type { Result } from 'autocannon';
import { BENCH_SECONDS, fmt, httpGet, isMain, load, okPerSecond, postJson, printTable, startBare, withBackends, type BenchBackend } from './lib.js';

export const READ_RATIO_GOAL = 0.5;
export const READ_P99_GOAL_MS = 10;
const CONNECTIONS = 10;

export interface AuthedReadResult {
  backend: string;
  connections: number;
  keelPerSecond: number;
  keelP50: number;
  keelP99: number;
  keelFailures: number;
  barePerSecond: number;
  bareP50: number;
  bareP99: number;
  ratio: number;
}

async function measure(url: string, headers: Record<string, string>): Promise<Result> {
  const opts = { url, connections: CONNECTIONS, headers };
  await load({ ...opts, duration: 2 });
  return load({ ...opts, duration: BENCH_SECONDS });
}

/** The bare baseline, measured right after each Keel run so both see the same machine. */
export async function bareRead(): Promise<Result> {
  const bare = await startBare();
  try {
    process.stderr.write(`[authed-read] bare hono: warm-up 2 s, then ${BENCH_SECONDS} s at ${CONNECTIONS} connections...\n`);
    return await measure(`${bare.url}/me`, {});
  } finally {
    await bare.stop();
  }
}

export async function benchAuthedRead(backend: BenchBackend): Promise<AuthedReadResult> {
  const keel = await backend.startKeel();
  let keelResult: Result;
  try {
    const user = { email: `reader-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-reader-staple', name: 'Reader' };
    const reg = await postJson(`${keel.url}/api/v1/auth/register`, user);
    const token = reg.body.accessToken;
    if (reg.status !== 201 || !token) throw new Error(`register: ${reg.status} ${JSON.stringify(reg.body)}`);
    const probe = await fetch(`${keel.url}/api/v1/users/me`, { headers: { authorization: `Bearer ${token}` } });
    if (probe.status !== 200) throw new Error(`GET /users/me: ${probe.status} ${await probe.text()}`);
    process.stderr.write(`[authed-read/${backend.name}] Keel: warm-up 2 s, then ${BENCH_SECONDS} s at ${CONNECTIONS} connections...\n`);
    keelResult = await measure(`${keel.url}/api/v1/users/me`, { authorization: `Bearer ${token}` });
    // Still signed in at the end (the token did not expire or get refused half-way).
    const after = await httpGet(`${keel.url}/health`);
    if (after.status !== 200) throw new Error('Keel unhealthy after the run');
  } finally {
    await keel.stop();
  }
  const baseline = await bareRead();
  const keelPerSecond = okPerSecond(keelResult);
  const barePerSecond = okPerSecond(baseline);
  return {
    backend: backend.name,
    connections: CONNECTIONS,
    keelPerSecond,
    keelP50: keelResult.latency.p50,
    keelP99: keelResult.latency.p99,
    keelFailures: keelResult.non2xx + keelResult.errors + keelResult.timeouts,
    barePerSecond,
    bareP50: baseline.latency.p50,
    bareP99: baseline.latency.p99,
    ratio: keelPerSecond / barePerSecond,
  };
}

export function printAuthedRead(results: AuthedReadResult[]): void {
  printTable(
    `Authenticated read (GET /users/me, bearer token, ${CONNECTIONS} connections, ${BENCH_SECONDS} s) vs bare hono JSON (goals: ratio >= ${READ_RATIO_GOAL}, p99 < ${READ_P99_GOAL_MS} ms)`,
    ['backend', 'Keel req/s', 'p50 ms', 'p99 ms', 'failed', 'bare req/s', 'bare p99 ms', 'ratio', 'goal'],
    results.map((r) => [
      r.backend,
      fmt(r.keelPerSecond),
      fmt(r.keelP50),
      fmt(r.keelP99),
      String(r.keelFailures),
      fmt(r.barePerSecond),
      fmt(r.bareP99),
      fmt(r.ratio, 2),
      r.ratio >= READ_RATIO_GOAL && r.keelP99 < READ_P99_GOAL_MS ? 'met' : 'NOT met',
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printAuthedRead(await withBackends(benchAuthedRead, only));
}
