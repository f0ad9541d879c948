/**
 * What a publish costs beside a read (`npm run bench -- publish`): one Keel at its defaults with 10
 * webhooks of one organisation on a local receiver (bench/webhook-receiver.ts), then, one after
 * another at concurrency 50 for `BENCH_SECONDS` (5) each: `GET /users/me`, `POST /events` (an API key
 * with events:publish; each event delivered 10 times while the next are published) and
 * `POST /webhooks/:id/test` (the manual limits raised out of the way). Printed per case: answers/s,
 * the ratio to the read, the server's CPU per call (main thread and others, from /proc; on
 * PostgreSQL also the database servers) and, on PostgreSQL, the statements Keel sent per call
 * (bench/count-pg.mjs, preloaded into Keel), deliveries included.
 *
 * On PostgreSQL a second Keel runs as an API process alone (`WORKER=off`, as beside a separate
 * `keel worker`): there the publish's own cost shows without the deliveries it causes (nothing
 * delivers them; their rows wait). PGlite has no such deployment (one process owns the data).
 *
 *   tsx bench/publish.ts [pglite|postgres]
 *   BENCH_PUBLISH_CASES=1 tsx bench/publish.ts   the read and POST /events only
 */
import { loadavg } from 'node:os';
import { cpuMeter } from './cpu.js';
import { fmt, freePort, httpGet, isMain, load, pgStatementCounter, postJson, printTable, sleep, spawnGroup, waitForHealthy, withBackends, type BenchBackend } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? '5');
const ONLY = process.env.BENCH_PUBLISH_CASES;
const HOOKS = 10;
const ADMIN = { email: 'bench-publish@example.com', password: 'harbour-velvet-compass-93-lilac' };

/** The publishing goal (bench/README.md "Publishing"): `POST /events` (10 webhooks) accepted at >= this share of the read's rate. */
export const PUBLISH_RATIO_GOAL = 0.2;

export interface PublishRow {
  backend: string;
  /** Keel's settings beside the defaults: '' or 'WORKER=off'. */
  settings: string;
  case: string;
  perSecond: number;
  ratio: number;
  p99: number;
  mainMs: number;
  threadsMs: number;
  serversMs: number;
  statements: number;
  load: string;
}

async function benchOne(backend: BenchBackend, extra: Record<string, string>): Promise<PublishRow[]> {
  const rxPort = await freePort();
  const rxProc = spawnGroup(process.execPath, ['--import', 'tsx', 'bench/webhook-receiver.ts'], { PORT: String(rxPort) });
  const rx = `http://127.0.0.1:${rxPort}`;
  await waitForHealthy(`${rx}/health`, rxProc, 30_000, 50);
  const counter = pgStatementCounter(backend.name);
  const keel = await backend.startKeel({
    ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, ALLOW_INSECURE_TARGETS: 'true', EVENTS_PUBLISH_LIMIT: '1000000',
    WEBHOOK_MANUAL_LIMIT: '100000', WEBHOOK_MANUAL_CALLER_LIMIT: '100000', ...counter.env, ...extra,
  });
  const pid = keel.proc.child.pid ?? null;
  const statements = () => counter.read(keel);
  try {
    const token = (await postJson(`${keel.url}/api/v1/auth/login`, ADMIN)).body.accessToken as string;
    const auth = { authorization: `Bearer ${token}` };
    const partner = await postJson(`${keel.url}/api/v1/partners`, { name: 'Bench Partner' }, auth);
    const org = await postJson(`${keel.url}/api/v1/orgs`, { name: 'Bench Org', partnerId: partner.body.id as string }, auth);
    const orgId = org.body.id as string;
    const hookIds: string[] = [];
    for (let i = 0; i < HOOKS; i++) {
      const h = await postJson(`${keel.url}/api/v1/webhooks`, { orgId, name: `bench-${i}`, url: `${rx}/hook`, secret: 'bench-webhook-signing-secret-0123456789', events: ['device.online'] }, auth);
      if (h.status !== 201) throw new Error(`webhook: ${h.status} ${JSON.stringify(h.body)}`);
      hookIds.push(h.body.id as string);
    }
    const key = await postJson(`${keel.url}/api/v1/api-keys`, { name: 'bench', permissions: [{ resource: 'events', action: 'publish' }] }, auth);
    const apiKey = key.body.key as string;
    const cases = [
      { name: 'GET /users/me', arrivals: 0, opts: { url: `${keel.url}/api/v1/users/me`, headers: auth } },
      {
        name: `POST /events (${HOOKS} webhooks)`,
        arrivals: HOOKS,
        opts: { url: `${keel.url}/api/v1/events`, method: 'POST' as const, headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ type: 'device.online', orgId, data: { deviceId: 'd-1' } }) },
      },
      {
        name: 'POST /webhooks/:id/test',
        arrivals: 1,
        opts: { url: `${keel.url}/api/v1/webhooks/${hookIds[0]}/test?orgId=${orgId}`, method: 'POST' as const, headers: { ...auth, 'content-type': 'application/json' }, body: '{}' },
      },
    ];
    const rows: PublishRow[] = [];
    const settings = Object.entries(extra).map(([k, v]) => `${k}=${v}`).join(' ');
    let read = NaN;
    // Arrivals expected at the receiver so far: every accepted event once per webhook, every test once.
    let expected = 0;
    const delivering = extra.WORKER !== 'off';
    const drained = async (): Promise<void> => {
      // Until every accepted call's deliveries have arrived (a publish under load is routed after its
      // answer: inbox.ts); a count that stops short for 20 s is reported and left.
      let last = -1;
      let still = Date.now();
      for (;;) {
        const s = JSON.parse((await httpGet(`${rx}/stats`)).body) as { count: number };
        if (!delivering || s.count >= expected) return;
        if (s.count !== last) {
          last = s.count;
          still = Date.now();
        } else if (Date.now() - still > 20_000) {
          process.stderr.write(`publish: ${expected - s.count} deliveries did not arrive\n`);
          expected = s.count;
          return;
        }
        await sleep(100);
      }
    };
    for (const [i, c] of cases.entries()) {
      if (ONLY !== undefined && i !== 0 && !ONLY.split(',').includes(String(i))) continue;
      const warm = await load({ ...c.opts, connections: 50, duration: 1 }); // warm-up
      expected += warm['2xx'] * c.arrivals;
      await drained();
      await sleep(500);
      const la = loadavg()[0]?.toFixed(2) ?? '?';
      const n0 = await statements();
      const meter = cpuMeter(pid);
      const r = await load({ ...c.opts, connections: 50, duration: SECONDS });
      const ok = r['2xx'];
      // The deliveries of the calls belong to them: the meter runs until they have arrived.
      expected += ok * c.arrivals;
      await drained();
      const cpu = meter.stop(ok);
      const n1 = await statements();
      const perSecond = ok / SECONDS;
      if (Number.isNaN(read)) read = perSecond;
      if (r.non2xx > 0) process.stderr.write(`${c.name}: ${r.non2xx} answers not 2xx\n`);
      rows.push({ backend: backend.name, settings, case: c.name, perSecond, ratio: perSecond / read, p99: r.latency.p99, mainMs: cpu.mainMs, threadsMs: cpu.threadsMs, serversMs: cpu.serversMs, statements: (n1 - n0) / ok, load: la });
    }
    return rows;
  } finally {
    await keel.stop();
    await rxProc.stop();
  }
}

/** One backend: at the defaults, and on PostgreSQL again as an API process alone (WORKER=off). */
export async function benchPublish(backend: BenchBackend): Promise<PublishRow[]> {
  const rows = await benchOne(backend, {});
  if (backend.name === 'postgres') rows.push(...(await benchOne(backend, { WORKER: 'off' })));
  return rows;
}

/** Whether a row is the `POST /events` case (the one the publishing goal judges). */
export const isEventsRow = (r: PublishRow): boolean => r.case.startsWith('POST /events');

export function printPublish(rows: PublishRow[]): void {
  printTable(
    `Publishing beside a read: concurrency 50, ${SECONDS} s each, Keel at its defaults unless the settings say`,
    ['backend', 'settings', 'case', 'answers/s', 'ratio to the read', 'p99 ms', 'main thread ms/call', 'other threads ms/call', 'db servers ms/call', 'statements/call', 'load average'],
    rows.map((r) => [r.backend, r.settings || 'defaults', r.case, fmt(r.perSecond), fmt(r.ratio, 2), fmt(r.p99), fmt(r.mainMs, 3), fmt(r.threadsMs, 3), fmt(r.serversMs, 3), fmt(r.statements, 2), r.load]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printPublish((await withBackends(benchPublish, only)).flat());
  process.exit(0);
}
