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
import { BENCH_SECONDS, fmt, httpGet, isMain, load, median, okPerSecond, postJson, printTable, startBare, withBackends, type BenchBackend, type RunningKeel } from './lib.js';

export const READ_RATIO_GOAL = 0.5;
export const READ_P99_GOAL_MS = 10;
const CONNECTIONS = 10;
/**
 * Keel and bare hono are measured in alternating rounds, both servers up (the idle one waits), and
 * each round's ratio compares figures taken seconds apart; the median round is reported, with the
 * smallest and largest ratio beside it. On a shared machine the load of the moment moved bare hono
 * alone between 33k and 69k req/s from one run to the next.
 */
const ROUNDS = Math.max(1, Number(process.env.BENCH_READ_ROUNDS ?? '3'));

export interface AuthedReadResult {
  backend: string;
  /** What was read: the route and whose token. */
  route: string;
  /** Whether the throughput goal applies (GET /users/me); the inherited-role route is recorded beside it. */
  hasGoal: boolean;
  connections: number;
  keelPerSecond: number;
  keelP50: number;
  keelP99: number;
  keelFailures: number;
  barePerSecond: number;
  bareP50: number;
  bareP99: number;
  /** The median round's ratio (its figures are the ones above); smallest and largest round beside it. */
  ratio: number;
  ratioMin: number;
  ratioMax: number;
  rounds: number;
}

function measure(url: string, headers: Record<string, string>, seconds = BENCH_SECONDS): Promise<Result> {
  return load({ url, connections: CONNECTIONS, headers, duration: seconds });
}

/**
 * A member of an organisation whose only role grants nothing itself: `users:read` comes from its
 * grandparent (role L3 → L2 → L1). Built through the API as a person would: the platform admin
 * (ADMIN_EMAIL) creates the organisation and the role chain, invites a registered account, and the
 * bench accepts with the link the development email sink logged.
 */
async function inheritedReader(keel: RunningKeel, admin: { email: string; password: string }): Promise<string> {
  const adminToken = (await postJson(`${keel.url}/api/v1/auth/login`, admin)).body.accessToken as string;
  const auth = { authorization: `Bearer ${adminToken}` };
  const call = async (path: string, body: unknown): Promise<{ id: string }> => {
    const res = await postJson(`${keel.url}/api/v1${path}`, body, auth);
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body as { id: string };
  };
  // An organisation belongs to a partner.
  const partner = await call('/partners', { name: 'Bench Partner' });
  const org = await call('/orgs', { name: 'Bench Org', partnerId: partner.id });
  const l1 = await call(`/roles?orgId=${org.id}`, { name: 'L1 readers', permissions: [{ resource: 'users', action: 'read' }] });
  const l2 = await call(`/roles?orgId=${org.id}`, { name: 'L2', parentRoleId: l1.id, permissions: [] });
  const l3 = await call(`/roles?orgId=${org.id}`, { name: 'L3', parentRoleId: l2.id, permissions: [] });
  const member = { email: `inherited-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-member-staple', name: 'Member' };
  const reg = await postJson(`${keel.url}/api/v1/auth/register`, member);
  if (reg.status !== 201) throw new Error(`register: ${reg.status}`);
  await call(`/users/invite?orgId=${org.id}`, { email: member.email, name: member.name, roleId: l3.id });
  let token: string | undefined;
  for (let i = 0; i < 100 && !token; i++) {
    token = /accept-invite\?token=([\w-]+)/.exec(keel.proc.output(1 << 20))?.[1];
    if (!token) await new Promise((r) => setTimeout(r, 20));
  }
  if (!token) throw new Error('no invitation link in the development email log');
  const accepted = await postJson(`${keel.url}/api/v1/auth/accept-invite`, { token, password: member.password });
  if (accepted.status !== 200) throw new Error(`accept-invite: ${accepted.status} ${JSON.stringify(accepted.body)}`);
  return accepted.body.accessToken as string;
}

const INHERITED_ROUTE = '/api/v1/roles/permissions/available';
export const METRICS_ROUTE = 'GET /users/me, METRICS_ENABLED=true';

export async function benchAuthedRead(backend: BenchBackend): Promise<AuthedReadResult[]> {
  const admin = { email: `admin-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-admin-staple' };
  // Keel's default LOG_LEVEL (info): an access line per request, to a file; the development email
  // sink's invitation link is read from the same file.
  const keel = await backend.startKeel({ ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password });
  // The same read on a Keel with METRICS_ENABLED: the latency histogram's cost on the hot path.
  const withMetrics = await backend.startKeel({ METRICS_ENABLED: 'true' });
  const bare = await startBare();
  const rounds: { route: string; keel: Result; bare: Result }[][] = [];
  try {
    const user = { email: `reader-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-reader-staple', name: 'Reader' };
    const reg = await postJson(`${keel.url}/api/v1/auth/register`, user);
    const token = reg.body.accessToken;
    if (reg.status !== 201 || !token) throw new Error(`register: ${reg.status} ${JSON.stringify(reg.body)}`);
    const inheritedToken = await inheritedReader(keel, admin);
    const metricsReg = await postJson(`${withMetrics.url}/api/v1/auth/register`, user);
    if (metricsReg.status !== 201) throw new Error(`register (metrics on): ${metricsReg.status}`);
    const routes = [
      ['GET /users/me', '/api/v1/users/me', token as string, keel.url],
      [METRICS_ROUTE, '/api/v1/users/me', metricsReg.body.accessToken as string, withMetrics.url],
      ['GET /roles/permissions/available (users:read via a 3-level inherited role)', INHERITED_ROUTE, inheritedToken, keel.url],
    ] as const;
    for (const [, path, bearer, base] of routes) {
      const probe = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${bearer}` } });
      if (probe.status !== 200) throw new Error(`GET ${path}: ${probe.status} ${await probe.text()}`);
      await measure(`${base}${path}`, { authorization: `Bearer ${bearer}` }, 2);
    }
    await measure(`${bare.url}/me`, {}, 2);
    for (let round = 1; round <= ROUNDS; round++) {
      const runs: { route: string; keel: Result; bare: Result }[] = [];
      for (const [route, path, bearer, base] of routes) {
        process.stderr.write(`[authed-read/${backend.name}] round ${round}/${ROUNDS}: Keel ${route}, then bare hono, ${BENCH_SECONDS} s each at ${CONNECTIONS} connections...\n`);
        const keelResult = await measure(`${base}${path}`, { authorization: `Bearer ${bearer}` });
        runs.push({ route, keel: keelResult, bare: await measure(`${bare.url}/me`, {}) });
      }
      rounds.push(runs);
    }
    // Still signed in at the end (the token did not expire or get refused half-way).
    const after = await httpGet(`${keel.url}/health`);
    if (after.status !== 200) throw new Error('Keel unhealthy after the run');
  } finally {
    await bare.stop();
    await withMetrics.stop();
    await keel.stop();
  }
  const byRoute = new Map<string, { keel: Result; bare: Result; ratio: number }[]>();
  for (const run of rounds.flat()) {
    const list = byRoute.get(run.route) ?? [];
    list.push({ ...run, ratio: okPerSecond(run.keel) / okPerSecond(run.bare) });
    byRoute.set(run.route, list);
  }
  return [...byRoute].map(([route, list]) => {
    const ratios = list.map((r) => r.ratio);
    const mid = median(ratios);
    const chosen = list.reduce((best, r) => (Math.abs(r.ratio - mid) < Math.abs(best.ratio - mid) ? r : best));
    return {
      backend: backend.name,
      route,
      hasGoal: route === 'GET /users/me',
      connections: CONNECTIONS,
      keelPerSecond: okPerSecond(chosen.keel),
      keelP50: chosen.keel.latency.p50,
      keelP99: chosen.keel.latency.p99,
      keelFailures: list.reduce((n, r) => n + r.keel.non2xx + r.keel.errors + r.keel.timeouts, 0),
      barePerSecond: okPerSecond(chosen.bare),
      bareP50: chosen.bare.latency.p50,
      bareP99: chosen.bare.latency.p99,
      ratio: chosen.ratio,
      ratioMin: Math.min(...ratios),
      ratioMax: Math.max(...ratios),
      rounds: list.length,
    };
  });
}

/** 'met' / 'NOT met' against the goals, or 'recorded' for a route without a goal. */
export function readGoal(r: AuthedReadResult): string {
  if (!r.hasGoal) return 'recorded';
  return r.ratio >= READ_RATIO_GOAL && r.keelP99 < READ_P99_GOAL_MS ? 'met' : 'NOT met';
}

export function printAuthedRead(results: AuthedReadResult[]): void {
  printTable(
    `Authenticated reads (bearer token, ${CONNECTIONS} connections, ${BENCH_SECONDS} s, median of ${ROUNDS} alternating rounds) vs bare hono JSON (goals: ratio >= ${READ_RATIO_GOAL}, p99 < ${READ_P99_GOAL_MS} ms)`,
    ['backend', 'route', 'Keel req/s', 'p50 ms', 'p99 ms', 'failed', 'bare req/s', 'bare p99 ms', 'ratio', 'rounds min-max', 'goal'],
    results.map((r) => [
      r.backend,
      r.route,
      fmt(r.keelPerSecond),
      fmt(r.keelP50),
      fmt(r.keelP99),
      String(r.keelFailures),
      fmt(r.barePerSecond),
      fmt(r.bareP99),
      fmt(r.ratio, 2),
      `${fmt(r.ratioMin, 2)}-${fmt(r.ratioMax, 2)}`,
      readGoal(r),
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printAuthedRead((await withBackends(benchAuthedRead, only)).flat());
}
