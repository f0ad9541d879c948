/**
 * `npm run bench`: start-up, logins and authenticated reads in one run, each next to its physical
 * limit measured in the same run (bare Argon2id verifies, bare hono), on the embedded PGlite and,
 * when /usr/lib/postgresql/<v>/bin exists, on a PostgreSQL server started here on loopback.
 *
 *   npm run bench                          everything
 *   npm run bench -- login authed-read     some of: startup, login, authed-read, fleet, webhooks, publish, overload, distribution, scim
 *   npm run bench -- --pglite              only the embedded backend
 *   BENCH_SECONDS=10 BENCH_USERS=200 BENCH_READ_ROUNDS=3 STARTUP_RUNS=3
 *
 * Benchmarks print figures and whether a goal was met; they never fail on time.
 * The machine's other load shows in every figure: the ratios are the comparable part.
 */
import { cpus, loadavg } from 'node:os';
import { benchStartup, printStartup, type StartupResult } from './startup.js';
import { benchLogin, LOGIN_GOAL, printLogin, printLoginCpu, type LoginResult } from './login.js';
import { benchAuthedRead, printAuthedRead, READ_P99_GOAL_MS, READ_RATIO_GOAL, readGoal, type AuthedReadResult } from './authed-read.js';
import { benchFleet, fleetGoal, printFleet, FLEET_P99_GOAL_MS, FLEET_RATE_GOAL, FLEET_RATIO_GOAL, type FleetResult } from './fleet.js';
import { benchWebhooks, printWebhooks, webhookGoal, WEBHOOK_DELIVERIES_GOAL, WEBHOOK_P95_GOAL_MS, WEBHOOK_RATIO_GOAL, type WebhookBenchResult } from './webhooks.js';
import { benchOverloadAll, overloadGoal, printOverload, OVERLOAD_READ_P99_GOAL_MS, OVERLOAD_READ_RATIO_GOAL, type OverloadResult } from './overload.js';
import { benchDistribution, printDistribution } from './distribution.js';
import { benchPublish, isEventsRow, printPublish, PUBLISH_RATIO_GOAL, type PublishRow } from './publish.js';
import { benchScim, printScim, scimGoal, SCIM_IMPORT_GOAL_S, SCIM_LOOKUP_P99_GOAL_MS, type ScimBenchResult } from './scim.js';
import { fmt, pgliteBackend, postgresBackend, printTable, startPostgres, type BenchBackend } from './lib.js';

const args = process.argv.slice(2);
const names = args.filter((a) => !a.startsWith('--'));
const want = (name: string): boolean => names.length === 0 || names.includes(name);
const pgliteOnly = args.includes('--pglite');

process.stdout.write(
  `Keel benchmarks: node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`,
);

let startup: StartupResult | null = null;
const logins: LoginResult[] = [];
const reads: AuthedReadResult[] = [];
const fleets: FleetResult[] = [];
const hooks: WebhookBenchResult[] = [];
const overloads: OverloadResult[] = [];
const publishes: PublishRow[] = [];
const scims: ScimBenchResult[] = [];

if (want('startup')) {
  process.stderr.write('[startup] npm start on a temp DATA_DIR: first start, then restarts...\n');
  startup = await benchStartup();
  printStartup(startup);
}

async function onBackend(backend: BenchBackend): Promise<void> {
  if (want('login')) {
    logins.push(await benchLogin(backend));
    printLogin(logins.slice(-1));
    printLoginCpu(logins.slice(-1));
  }
  if (want('authed-read')) {
    const rows = await benchAuthedRead(backend);
    reads.push(...rows);
    printAuthedRead(rows);
  }
  if (want('fleet')) {
    fleets.push(await benchFleet(backend));
    printFleet(fleets.slice(-1));
  }
  if (want('webhooks')) {
    hooks.push(await benchWebhooks(backend));
    printWebhooks(hooks.slice(-1));
  }
  if (want('publish')) {
    const rows = await benchPublish(backend);
    publishes.push(...rows);
    printPublish(rows);
  }
  if (want('overload')) {
    const rows = await benchOverloadAll(backend);
    overloads.push(...rows);
    printOverload(rows);
  }
  if (want('scim')) {
    scims.push(await benchScim(backend));
    printScim(scims.slice(-1));
  }
}

if (want('login') || want('authed-read') || want('fleet') || want('webhooks') || want('publish') || want('overload') || want('scim')) {
  await onBackend(pgliteBackend());
  if (!pgliteOnly) {
    const server = await startPostgres();
    if (server) {
      try {
        await onBackend(postgresBackend(server));
      } finally {
        await server.stop();
      }
    } else {
      process.stdout.write('\nPostgreSQL binaries not found (/usr/lib/postgresql/*/bin): PostgreSQL figures skipped\n');
    }
  }
}

// PostgreSQL only: its devices are inserted with SQL beside the running Keel (bench/distribution.ts).
if (want('distribution') && !pgliteOnly) {
  const r = await benchDistribution();
  if (r) printDistribution(r);
}

const goal = (met: boolean): string => (met ? 'met' : 'NOT met');
const rows: string[][] = [];
if (startup) {
  rows.push(['start-up', 'pglite', '`npm start` restart until /health 200', `${fmt(startup.medianRestartMs)} ms`, `first start ${fmt(startup.firstMs)} ms`, '-', `< 2000 ms: ${goal(startup.medianRestartMs < 2000)}`]);
}
for (const r of logins) {
  rows.push(['login', r.backend, 'POST /auth/login, concurrency 8', `${fmt(r.loginsPerSecond, 1)} login/s`, `${fmt(r.argon2PerSecond, 1)} argon2 verify/s (best bare)`, fmt(r.ratio, 2), `>= ${LOGIN_GOAL}: ${goal(r.ratio >= LOGIN_GOAL)}`]);
  // The same limit for bare hono + one verify, no database: how close any HTTP login gets on this machine.
  rows.push(['  bare HTTP login', r.backend, 'hono POST /login, one verify, same run', `${fmt(r.bareHttpPerSecond, 1)} login/s`, `${fmt(r.argon2PerSecond, 1)} argon2 verify/s (best bare)`, fmt(r.bareHttpPerSecond / r.argon2PerSecond, 2), `(Keel ÷ it: ${fmt(r.bareHttpRatio, 2)})`]);
}
for (const r of reads) {
  rows.push([
    'authed read',
    r.backend,
    `${r.route}, ${r.connections} connections, median of ${r.rounds} rounds`,
    `${fmt(r.keelPerSecond)} req/s, p99 ${fmt(r.keelP99)} ms`,
    `${fmt(r.barePerSecond)} req/s, p99 ${fmt(r.bareP99)} ms`,
    `${fmt(r.ratio, 2)} (${fmt(r.ratioMin, 2)}-${fmt(r.ratioMax, 2)})`,
    r.hasGoal ? `>= ${READ_RATIO_GOAL} and p99 < ${READ_P99_GOAL_MS} ms: ${readGoal(r)}` : 'recorded, no goal',
  ]);
}
for (const r of fleets) {
  rows.push([
    'agent heartbeats', r.backend, `POST /agents/heartbeat, ${r.devices} devices`, `${fmt(r.heartbeatsPerSecond)} req/s, p99 ${fmt(r.p99)} ms`, `${fmt(r.barePerSecond)} req/s (bare hono POST)`, fmt(r.ratio, 2),
    `>= ${FLEET_RATE_GOAL}/s, p99 < ${FLEET_P99_GOAL_MS} ms, >= ${FLEET_RATIO_GOAL}: ${fleetGoal(r)}`,
  ]);
  rows.push(['  rollout', r.backend, `promoted version to 100% of ${r.rolloutAgents} online agents`, `${fmt(r.rolloutSeconds, 1)} s`, '-', '-', 'recorded']);
}
for (const r of hooks) {
  rows.push([
    'webhooks',
    r.backend,
    `${r.events} events x 10 webhooks; latency at ${r.rate} events/s`,
    `${fmt(r.deliveriesPerSecond)} deliveries/s, p50/p95/p99 ${fmt(r.p50)}/${fmt(r.p95)}/${fmt(r.p99)} ms`,
    `${fmt(r.bareSignedPerSecond)} bare signed POST/s`,
    fmt(r.ratio, 2),
    `>= ${WEBHOOK_DELIVERIES_GOAL}/s, >= ${WEBHOOK_RATIO_GOAL}, p95 < ${WEBHOOK_P95_GOAL_MS} ms: ${webhookGoal(r)}`,
  ]);
}
for (const r of publishes.filter(isEventsRow)) {
  rows.push([
    'publish',
    r.backend,
    `${r.case}, 50 connections${r.settings ? `, ${r.settings} (API process alone)` : ''}`,
    `${fmt(r.perSecond)} events/s, p99 ${fmt(r.p99)} ms, ${fmt(r.mainMs, 3)} ms main thread each`,
    'GET /users/me, same Keel, same run',
    fmt(r.ratio, 2),
    `>= ${PUBLISH_RATIO_GOAL} of the read: ${goal(r.ratio >= PUBLISH_RATIO_GOAL)}`,
  ]);
}
for (const r of overloads) {
  rows.push([
    'overload',
    r.backend,
    `logins at ${r.offered}/s (5× capacity) beside GET /users/me${r.settings ? `, ${r.settings}` : ''}`,
    `reads p99 ${fmt(r.readP99Flood)} ms (alone ${fmt(r.readP99Idle)} ms), reads/s ${fmt(r.readRateFlood)} vs ${fmt(r.readRateAlone)} alone (${fmt(r.readRateFlood / r.readRateAlone, 2)}), ${fmt(r.refusedShare * 100, 1)}% of logins refused (main thread ${fmt(r.floodMainShare * 100)} % busy); 64 connections as fast as answered: reads/s ${fmt(r.closedReadRate)} (${fmt(r.closedReadRate / r.readRateAlone, 2)}, p99 ${fmt(r.closedReadP99)} ms), ${fmt(r.closedRefused)} refused/s`,
    `${fmt(r.capacity, 1)} login/s capacity`,
    fmt(r.loginsOk / r.capacity, 2),
    `reads p99 < ${OVERLOAD_READ_P99_GOAL_MS} ms, read rate >= ${OVERLOAD_READ_RATIO_GOAL} of alone, only 200/503: ${goal(overloadGoal(r))}`,
  ]);
}
for (const r of scims) {
  rows.push([
    'SCIM import',
    r.backend,
    `${r.users} users POSTed then ${r.groups} groups; GET /Users?filter=userName eq`,
    `import ${fmt(r.importSeconds, 1)} s, lookup p99 ${fmt(r.lookupP99, 2)} ms`,
    '-',
    '-',
    `< ${SCIM_IMPORT_GOAL_S} s, p99 < ${SCIM_LOOKUP_P99_GOAL_MS} ms: ${scimGoal(r)}`,
  ]);
}
printTable('Summary', ['benchmark', 'backend', 'what', 'Keel', 'physical limit', 'ratio', 'goal'], rows);
process.stdout.write(`load average at the end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
process.exit(0);
