/**
 * Webhook delivery against its physical limit: N events, each fanned out to 10 webhooks on
 * one local receiver (bench/webhook-receiver.ts, its own process), Keel at its default settings
 * (`node bin/keel.js serve`, LOG_LEVEL info, the worker inline) with ALLOW_INSECURE_TARGETS for the
 * http loopback receiver. Printed:
 *
 * - deliveries per second: from the first `POST /events` to the last arrival (publishing included);
 * - beside it, bare undici POSTs per second to the same receiver in the same run, each signed with
 *   HMAC-SHA256 as Keel signs (concurrency 64, one process): the ratio (goal >= 0.15, and >= 2,000/s);
 * - publish-to-arrival p50/p95/p99 at a steady 200 events per second (2,000 deliveries per second),
 *   from the event's `timestamp` to its arrival at the receiver (goal p95 < 50 ms);
 * - then the same steady rate with one of the ten webhooks throttled at 10/s (`rateLimitPerSecond`,
 *   on a receiver of its own): the nine others' p50/p95 beside the ten's above (goal: not slowed,
 *   p95 < 50 ms), and the throttled one's arrivals per second (at most 10).
 *
 *   npm run bench -- webhooks            (both backends; or: tsx bench/webhooks.ts [pglite|postgres])
 *   BENCH_WEBHOOK_EVENTS=2000 BENCH_WEBHOOK_SECONDS=5 BENCH_WEBHOOK_RATE=200
 */
import { createHmac } from 'node:crypto';
import { cpuMeter } from './cpu.js';
import { Pool } from 'undici';
import { fmt, freePort, httpGet, isMain, pgStatementCounter, postJson, printTable, sleep, spawnGroup, waitForHealthy, withBackends, type BenchBackend } from './lib.js';

export const WEBHOOK_DELIVERIES_GOAL = 2_000;
export const WEBHOOK_RATIO_GOAL = 0.15;
export const WEBHOOK_P95_GOAL_MS = 50;
const HOOKS = 10;
const EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? '2000');
const SECONDS = Number(process.env.BENCH_WEBHOOK_SECONDS ?? '5');
const RATE = Number(process.env.BENCH_WEBHOOK_RATE ?? '200');
const ADMIN = { email: 'bench-hooks@example.com', password: 'harbour-velvet-compass-93-lilac' };
const SECRET = 'bench-webhook-signing-secret-0123456789';

export interface WebhookBenchResult {
  backend: string;
  events: number;
  deliveries: number;
  deliveriesPerSecond: number;
  bareSignedPerSecond: number;
  ratio: number;
  /** PostgreSQL: statements Keel sent per delivery in the throughput phase, publishing included (NaN on PGlite). */
  statementsPerDelivery: number;
  /** Keel's CPU (all its threads) per delivery in the throughput phase, publishing included. */
  keelCpuMsPerDelivery: number;
  rate: number;
  rateDeliveries: number;
  rateArrived: number;
  p50: number;
  p95: number;
  p99: number;
  /** The same rate with one webhook throttled at THROTTLE/s: the nine others' latency, the throttled one's rate. */
  nineArrived: number;
  nineDeliveries: number;
  nineP50: number;
  nineP95: number;
  throttledArrived: number;
  /** The most arrivals in one second at the throttled webhook's receiver. */
  throttledMaxPerSecond: number;
}

/** The throttled webhook's limit in the last phase. */
const THROTTLE = 10;

interface Stats {
  count: number;
  first: number;
  last: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  /** The most arrivals in one wall-clock second. */
  maxPerSecond: number;
}

async function patchJson(url: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { method: 'PATCH', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text };
}

async function stats(rx: string): Promise<Stats> {
  return JSON.parse((await httpGet(`${rx}/stats`)).body) as Stats;
}

async function waitForCount(rx: string, n: number, timeoutMs: number): Promise<Stats> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await stats(rx);
    if (s.count >= n || Date.now() > deadline) return s;
    await sleep(20);
  }
}

/** Bare undici: signed POSTs of a webhook-sized body, `connections` at a time, for `seconds`. */
async function bareSigned(rx: string, seconds: number, connections = 64): Promise<number> {
  const pool = new Pool(rx, { connections });
  let done = 0;
  const end = Date.now() + seconds * 1000;
  const worker = async (): Promise<void> => {
    while (Date.now() < end) {
      const ts = String(Date.now());
      const body = JSON.stringify({ id: '0192f3a4-5b6c-7d8e-9f00-112233445566', type: 'device.online', timestamp: new Date().toISOString(), orgId: '0192f3a4-5b6c-7d8e-9f00-112233445567', data: { deviceId: 'd-1' } });
      const res = await pool.request({
        path: '/hook',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-service-signature': `sha256=${createHmac('sha256', SECRET).update(`${ts}.${body}`).digest('hex')}`, 'x-service-signature-timestamp': ts },
        body,
      });
      await res.body.text();
      if (res.statusCode === 200) done++;
    }
  };
  const started = Date.now();
  await Promise.all(Array.from({ length: connections }, worker));
  const elapsed = (Date.now() - started) / 1000;
  await pool.close();
  return done / elapsed;
}

export async function benchWebhooks(backend: BenchBackend): Promise<WebhookBenchResult> {
  const rxPort = await freePort();
  const rxProc = spawnGroup(process.execPath, ['--import', 'tsx', 'bench/webhook-receiver.ts'], { PORT: String(rxPort) });
  const rx = `http://127.0.0.1:${rxPort}`;
  await waitForHealthy(`${rx}/health`, rxProc, 30_000, 50);
  // The throttled webhook's own receiver (the last phase).
  const slowPort = await freePort();
  const slowProc = spawnGroup(process.execPath, ['--import', 'tsx', 'bench/webhook-receiver.ts'], { PORT: String(slowPort) });
  const slowRx = `http://127.0.0.1:${slowPort}`;
  await waitForHealthy(`${slowRx}/health`, slowProc, 30_000, 50);
  // Profile Keel with BENCH_KEEL_NODE_ARGS (bench/lib.ts startKeel).
  const counter = pgStatementCounter(backend.name);
  const keel = await backend.startKeel({ ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, ALLOW_INSECURE_TARGETS: 'true', EVENTS_PUBLISH_LIMIT: '1000000', ...counter.env });
  const api = new Pool(keel.url, { connections: 32 });
  try {
    const token = (await postJson(`${keel.url}/api/v1/auth/login`, ADMIN)).body.accessToken as string;
    const auth = { authorization: `Bearer ${token}` };
    const partner = await postJson(`${keel.url}/api/v1/partners`, { name: 'Bench Partner' }, auth);
    const org = await postJson(`${keel.url}/api/v1/orgs`, { name: 'Bench Org', partnerId: partner.body.id as string }, auth);
    const orgId = org.body.id as string;
    const hookIds: string[] = [];
    for (let i = 0; i < HOOKS; i++) {
      const h = await postJson(`${keel.url}/api/v1/webhooks`, { orgId, name: `bench-${i}`, url: `${rx}/hook`, secret: SECRET, events: ['device.online'] }, auth);
      if (h.status !== 201) throw new Error(`webhook: ${h.status} ${JSON.stringify(h.body)}`);
      hookIds.push(h.body.id as string);
    }
    const key = await postJson(`${keel.url}/api/v1/api-keys`, { name: 'bench', permissions: [{ resource: 'events', action: 'publish' }] }, auth);
    const apiKey = key.body.key as string;
    const publishOne = async (i: number): Promise<void> => {
      const res = await api.request({
        path: '/api/v1/events',
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ type: 'device.online', orgId, data: { deviceId: `d-${i}` } }),
      });
      await res.body.text();
      if (res.statusCode !== 202) throw new Error(`publish: ${res.statusCode}`);
    };
    const publishMany = async (n: number, concurrency: number): Promise<void> => {
      let next = 0;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < n) await publishOne(next++);
        }),
      );
    };

    // Warm-up: connections, prepared statements, JIT.
    await publishMany(100, 16);
    await waitForCount(rx, 100 * HOOKS, 60_000);

    // Throughput: N events as fast as the API takes them; deliveries counted at the receiver.
    await postJson(`${rx}/reset`, {});
    const n0 = await counter.read(keel);
    const meter = cpuMeter(keel.proc.child.pid ?? null);
    const t0 = Date.now();
    await publishMany(EVENTS, 32);
    const thr = await waitForCount(rx, EVENTS * HOOKS, 120_000);
    const cpu = meter.stop(thr.count);
    // The last results are recorded up to 100 ms after their arrival (recorder.ts).
    await sleep(300);
    const statementsPerDelivery = ((await counter.read(keel)) - n0) / thr.count;
    const deliveriesPerSecond = thr.count / ((thr.last - t0) / 1000);

    // The physical limit: bare signed POSTs to the same receiver.
    await postJson(`${rx}/reset`, {});
    const bareSignedPerSecond = await bareSigned(rx, SECONDS);

    // Latency at a steady rate.
    await postJson(`${rx}/reset`, {});
    const total = RATE * SECONDS;
    const start = Date.now();
    const inflight: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = start + (i * 1000) / RATE;
      const wait = due - Date.now();
      if (wait > 1) await sleep(wait);
      inflight.push(publishOne(i));
    }
    await Promise.all(inflight);
    const lat = await waitForCount(rx, total * HOOKS, 60_000);

    // The same rate with one webhook throttled at THROTTLE/s on its own receiver: the nine are not slowed.
    const patched = await patchJson(`${keel.url}/api/v1/webhooks/${hookIds[0]}?orgId=${orgId}`, { rateLimitPerSecond: THROTTLE, url: `${slowRx}/hook` }, auth);
    if (patched.status !== 200) throw new Error(`throttle: ${patched.status} ${JSON.stringify(patched.body)}`);
    await postJson(`${rx}/reset`, {});
    await postJson(`${slowRx}/reset`, {});
    const start2 = Date.now();
    const inflight2: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = start2 + (i * 1000) / RATE;
      const wait = due - Date.now();
      if (wait > 1) await sleep(wait);
      inflight2.push(publishOne(total + i));
    }
    await Promise.all(inflight2);
    const nine = await waitForCount(rx, total * (HOOKS - 1), 60_000);
    const slow = await stats(slowRx);
    return {
      backend: backend.name,
      events: EVENTS,
      deliveries: thr.count,
      deliveriesPerSecond,
      bareSignedPerSecond,
      ratio: deliveriesPerSecond / bareSignedPerSecond,
      statementsPerDelivery,
      keelCpuMsPerDelivery: cpu.mainMs + cpu.threadsMs,
      rate: RATE,
      rateDeliveries: total * HOOKS,
      rateArrived: lat.count,
      p50: lat.p50,
      p95: lat.p95,
      p99: lat.p99,
      nineArrived: nine.count,
      nineDeliveries: total * (HOOKS - 1),
      nineP50: nine.p50,
      nineP95: nine.p95,
      throttledArrived: slow.count,
      throttledMaxPerSecond: slow.maxPerSecond,
    };
  } finally {
    await api.close();
    await keel.stop();
    await rxProc.stop();
    await slowProc.stop();
  }
}

const goal = (met: boolean): string => (met ? 'met' : 'NOT met');

export function webhookGoal(r: WebhookBenchResult): string {
  return goal(r.deliveriesPerSecond >= WEBHOOK_DELIVERIES_GOAL && r.ratio >= WEBHOOK_RATIO_GOAL && r.p95 < WEBHOOK_P95_GOAL_MS && r.rateArrived === r.rateDeliveries);
}

export function printWebhooks(results: WebhookBenchResult[]): void {
  printTable(
    `Webhooks: ${HOOKS} webhooks on one local receiver, Keel at its defaults`,
    ['backend', 'events', 'deliveries/s', 'bare signed POST/s', 'ratio', 'Keel CPU ms/delivery', 'statements/delivery', `at ${RATE} events/s: arrived`, 'p50 ms', 'p95 ms', 'p99 ms', 'goal'],
    results.map((r) => [
      r.backend,
      String(r.events),
      fmt(r.deliveriesPerSecond),
      fmt(r.bareSignedPerSecond),
      fmt(r.ratio, 2),
      fmt(r.keelCpuMsPerDelivery, 3),
      fmt(r.statementsPerDelivery, 3),
      `${r.rateArrived}/${r.rateDeliveries}`,
      fmt(r.p50),
      fmt(r.p95),
      fmt(r.p99),
      `>= ${WEBHOOK_DELIVERIES_GOAL}/s, >= ${WEBHOOK_RATIO_GOAL}, p95 < ${WEBHOOK_P95_GOAL_MS} ms: ${webhookGoal(r)}`,
    ]),
  );
  printTable(
    `Webhooks: the same ${RATE} events/s with one webhook throttled at ${THROTTLE}/s beside nine unthrottled`,
    ['backend', 'nine: arrived', 'nine p50 ms', 'nine p95 ms', 'ten unthrottled p95 ms (above)', 'throttled: arrived', 'throttled: most in 1 s', 'goal'],
    results.map((r) => [
      r.backend,
      `${r.nineArrived}/${r.nineDeliveries}`,
      fmt(r.nineP50),
      fmt(r.nineP95),
      fmt(r.p95),
      String(r.throttledArrived),
      String(r.throttledMaxPerSecond),
      `nine p95 < ${WEBHOOK_P95_GOAL_MS} ms, throttled <= ${THROTTLE}/s: ${goal(r.nineP95 < WEBHOOK_P95_GOAL_MS && r.nineArrived === r.nineDeliveries && r.throttledMaxPerSecond <= THROTTLE)}`,
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printWebhooks(await withBackends(benchWebhooks, only));
  process.exit(0);
}
