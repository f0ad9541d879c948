/**
 * The agent fleet: simulated agents over real HTTP against Keel at its default settings.
 *
 * 1. Heartbeats: FLEET_DEVICES (default 10,000) devices are enrolled and brought online through the
 *    API; then autocannon sends POST /agents/heartbeat round-robin over all their device tokens (each
 *    up to date with the promoted target: the full update decision runs and answers `update: null`),
 *    next to bare hono answering the same JSON to the same POST (bench/bare-server.ts) in the same
 *    run, in BENCH_FLEET_ROUNDS (default 3) alternating rounds, the median round reported. Goals
 *    printed: ≥ 5,000 heartbeats/s, p99 < 50 ms, ≥ 0.3 of bare.
 * 2. Rollout: ROLLOUT_AGENTS (default 1,000) of those devices run as simulated agents, each
 *    heartbeating every ROLLOUT_INTERVAL_S (default 5 s, phases spread; Keel's own interval stays 60 s,
 *    the client paces itself) and applying an offered update at once (started, the new version,
 *    succeeded). A new version is registered (AGENT_AUTO_PROMOTE: the target at once); the time until
 *    every agent reports it is printed.
 *
 *   npm run bench -- fleet          (both backends; or: tsx bench/fleet.ts [pglite|postgres])
 */
import { loadavg } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Result } from 'autocannon';
import { generate } from 'otplib';
import { BENCH_SECONDS, fmt, isMain, load, okPerSecond, pool, postJson, printTable, sleep, startBare, withBackends, type BenchBackend } from './lib.js';

export const FLEET_RATE_GOAL = 5000;
export const FLEET_P99_GOAL_MS = 50;
export const FLEET_RATIO_GOAL = 0.3;
const DEVICES = Number(process.env.FLEET_DEVICES ?? '10000');
const ROLLOUT_AGENTS = Math.min(DEVICES, Number(process.env.ROLLOUT_AGENTS ?? '1000'));
const ROLLOUT_INTERVAL_S = Number(process.env.ROLLOUT_INTERVAL_S ?? '5');
const CONNECTIONS = 20;
const ROUNDS = Math.max(1, Number(process.env.BENCH_FLEET_ROUNDS ?? '3'));

export interface FleetResult {
  backend: string;
  devices: number;
  enrollSeconds: number;
  heartbeatsPerSecond: number;
  p50: number;
  p99: number;
  failures: number;
  barePerSecond: number;
  bareP99: number;
  ratio: number;
  rolloutAgents: number;
  rolloutSeconds: number;
  load: string;
}

const loadNow = () => loadavg().map((l) => l.toFixed(2)).join(' ');

async function adminToken(url: string, admin: { email: string; password: string }): Promise<string> {
  const first = await postJson(`${url}/api/v1/auth/login`, admin);
  const token = first.body.accessToken as string;
  const auth = { authorization: `Bearer ${token}` };
  const setup = await postJson(`${url}/api/v1/auth/mfa/setup`, {}, auth);
  const code = await generate({ secret: setup.body.secret as string });
  const enabled = await postJson(`${url}/api/v1/auth/mfa/enable`, { code }, auth);
  if (enabled.status !== 200) throw new Error(`mfa enable: ${enabled.status} ${JSON.stringify(enabled.body)}`);
  return enabled.body.accessToken as string;
}

/** The settings a Keel needs for the simulated fleet: it enrols from one address with one key, beyond the default limits. */
export function fleetEnv(admin: { email: string; password: string }): Record<string, string> {
  return { ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password, ENROLL_IP_LIMIT: '1000000', ENROLL_KEY_LIMIT: '1000000',
    // autocannon sends each device's heartbeats far faster than an agent would (its per-device limit is not what is measured)
    AGENT_HEARTBEAT_LIMIT: '1000000' };
}

export interface Fleet {
  /** Each enrolled device's token, every device online and up to date with the promoted target. */
  tokens: string[];
  /** Registers a version of the agent (auto-promoted: the fleet's target at once). */
  register: (version: string) => Promise<unknown>;
}

/**
 * Through the API as an operator would: the platform admin (with MFA) registers 1.0.0, creates a
 * partner, an organisation and its enrolment key; `devices` devices enrol with it and heartbeat once
 * (online, up to date: later heartbeats run the whole update decision and answer `update: null`).
 */
export async function setUpFleet(keelUrl: string, admin: { email: string; password: string }, devices: number, label = 'fleet'): Promise<Fleet> {
  const token = await adminToken(keelUrl, admin);
  const auth = { authorization: `Bearer ${token}` };
  const api = async (path: string, body: unknown, expect = 201) => {
    const res = await postJson(`${keelUrl}/api/v1${path}`, body, auth);
    if (res.status !== expect) throw new Error(`POST ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const register = (version: string) =>
    api('/agent-versions', { version, component: 'agent', os: 'linux', arch: 'amd64', url: `https://releases.example.com/${version}/agent`, sha256: 'a'.repeat(64), size: 1000 });
  await register('1.0.0');
  // An organisation belongs to a partner.
  const partner = await api('/partners', { name: 'Fleet Partner' });
  const org = await api('/orgs', { name: 'Fleet', partnerId: partner.id });
  const key = (await api(`/orgs/${org.id}/enrollment-keys`, {})).key as string;
  process.stderr.write(`[${label}] enrolling ${devices} devices and bringing them online...\n`);
  const tokens = await pool(Array.from({ length: devices }, (_, i) => i), 16, async (i) => {
    const res = await postJson(`${keelUrl}/api/v1/agents/enroll`, { enrollmentKey: key, hostname: `sim-${i}`, os: 'linux', arch: 'amd64', agentVersion: '1.0.0' });
    if (res.status !== 201) throw new Error(`enroll: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.deviceToken as string;
  });
  await pool(tokens, 16, async (t) => {
    const res = await postJson(`${keelUrl}/api/v1/agents/heartbeat`, { components: { agent: '1.0.0' } }, { authorization: `Bearer ${t}` });
    if (res.status !== 200 || res.body.update !== null) throw new Error(`first heartbeat: ${res.status} ${JSON.stringify(res.body)}`);
  });
  return { tokens, register };
}

/**
 * `POST <url>` with a heartbeat body, round-robin over `tokens` (each response makes its connection
 * send the next device's token). The bare server gets the same requests, tokens and all, so the load
 * generator (which shares the cores) does the same work for both.
 */
export function heartbeatLoad(url: string, tokens: string[], seconds: number, connections = CONNECTIONS): Promise<Result> {
  let next = 0;
  return load({
    url,
    connections,
    duration: seconds,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: HEARTBEAT_BODY,
    setupClient: (client) => {
      const rotate = () => client.setHeaders({ 'content-type': 'application/json', authorization: `Bearer ${tokens[next++ % tokens.length] ?? ''}` });
      rotate();
      client.on('response', rotate);
    },
  });
}

const HEARTBEAT_BODY = JSON.stringify({ components: { agent: '1.0.0' } });

export async function benchFleet(backend: BenchBackend): Promise<FleetResult> {
  const admin = { email: `admin-${randomBytes(4).toString('hex')}@example.com`, password: 'correct-horse-battery-admin-staple' };
  const keel = await backend.startKeel(fleetEnv(admin));
  const bare = await startBare();
  try {
    const started = Date.now();
    const { tokens, register } = await setUpFleet(keel.url, admin, DEVICES, `fleet/${backend.name}`);
    const enrollSeconds = (Date.now() - started) / 1000;
    const heartbeats = (url: string, seconds: number): Promise<Result> => heartbeatLoad(url, tokens, seconds);
    await heartbeats(`${keel.url}/api/v1/agents/heartbeat`, 2);
    await heartbeats(`${bare.url}/heartbeat`, 2);
    // Alternating rounds (the machine's load moves between runs); the median round's ratio is reported.
    const rounds: { keel: Result; bare: Result; ratio: number }[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      process.stderr.write(`[fleet/${backend.name}] round ${round}/${ROUNDS}: Keel then bare hono, ${BENCH_SECONDS} s each at ${CONNECTIONS} connections...\n`);
      const k = await heartbeats(`${keel.url}/api/v1/agents/heartbeat`, BENCH_SECONDS);
      const b = await heartbeats(`${bare.url}/heartbeat`, BENCH_SECONDS);
      rounds.push({ keel: k, bare: b, ratio: okPerSecond(k) / okPerSecond(b) });
    }
    const sorted = [...rounds].sort((x, y) => x.ratio - y.ratio);
    const { keel: keelRun, bare: bareRun } = sorted[Math.floor(sorted.length / 2)] ?? { keel: rounds[0]!.keel, bare: rounds[0]!.bare };

    // Rollout: simulated agents, a promoted version, the time until all report it.
    process.stderr.write(`[fleet/${backend.name}] rollout to ${ROLLOUT_AGENTS} online agents (heartbeat every ${ROLLOUT_INTERVAL_S} s)...\n`);
    const fleet = tokens.slice(0, ROLLOUT_AGENTS).map((t) => ({ token: t, version: '1.0.0' }));
    let stop = false;
    const agentLoop = async (a: { token: string; version: string }, phase: number) => {
      await sleep(phase);
      while (!stop) {
        try {
          await beat(a);
        } catch {
          // A keep-alive connection the server closed as it was reused: a real agent retries.
          await sleep(100);
        }
      }
    };
    const beat = async (a: { token: string; version: string }) => {
      const h = { authorization: `Bearer ${a.token}` };
      const res = await postJson(`${keel.url}/api/v1/agents/heartbeat`, { components: { agent: a.version } }, h);
      const offer = res.body?.update as { version: string } | null | undefined;
      if (offer) {
        await postJson(`${keel.url}/api/v1/agents/update-report`, { component: 'agent', fromVersion: a.version, toVersion: offer.version, state: 'started' }, h);
        const from = a.version;
        a.version = offer.version;
        await postJson(`${keel.url}/api/v1/agents/heartbeat`, { components: { agent: a.version } }, h); // at once, no jitter
        await postJson(`${keel.url}/api/v1/agents/update-report`, { component: 'agent', fromVersion: from, toVersion: offer.version, state: 'succeeded' }, h);
        return;
      }
      await sleep(ROLLOUT_INTERVAL_S * 1000);
    };
    const loops = fleet.map((a, i) => agentLoop(a, (i / fleet.length) * ROLLOUT_INTERVAL_S * 1000));
    await sleep(ROLLOUT_INTERVAL_S * 1000); // every agent has heartbeated once
    const promotedAt = Date.now();
    await register('1.1.0'); // AGENT_AUTO_PROMOTE (default true): the fleet target at once
    while (fleet.some((a) => a.version !== '1.1.0') && Date.now() - promotedAt < 10 * 60_000) await sleep(100);
    const rolloutSeconds = (Date.now() - promotedAt) / 1000;
    stop = true;
    await Promise.all(loops);
    return {
      backend: backend.name,
      devices: DEVICES,
      enrollSeconds,
      heartbeatsPerSecond: okPerSecond(keelRun),
      p50: keelRun.latency.p50,
      p99: keelRun.latency.p99,
      failures: rounds.reduce((n, r) => n + r.keel.non2xx + r.keel.errors + r.keel.timeouts, 0),
      barePerSecond: okPerSecond(bareRun),
      bareP99: bareRun.latency.p99,
      ratio: okPerSecond(keelRun) / okPerSecond(bareRun),
      rolloutAgents: ROLLOUT_AGENTS,
      rolloutSeconds,
      load: loadNow(),
    };
  } finally {
    await bare.stop();
    await keel.stop();
  }
}

export function fleetGoal(r: FleetResult): string {
  return r.heartbeatsPerSecond >= FLEET_RATE_GOAL && r.p99 < FLEET_P99_GOAL_MS && r.ratio >= FLEET_RATIO_GOAL ? 'met' : 'NOT met';
}

export function printFleet(results: FleetResult[]): void {
  printTable(
    `Agent fleet: heartbeats at ${DEVICES} enrolled devices (${CONNECTIONS} connections, ${BENCH_SECONDS} s) vs bare hono; rollout to ${ROLLOUT_AGENTS} online agents (goals: >= ${FLEET_RATE_GOAL}/s, p99 < ${FLEET_P99_GOAL_MS} ms, ratio >= ${FLEET_RATIO_GOAL})`,
    ['backend', 'devices', 'enrol+online s', 'heartbeats/s', 'p50 ms', 'p99 ms', 'failed', 'bare req/s', 'bare p99', 'ratio', 'rollout 100%', 'load avg', 'goal'],
    results.map((r) => [
      r.backend, String(r.devices), fmt(r.enrollSeconds, 1), fmt(r.heartbeatsPerSecond), fmt(r.p50), fmt(r.p99), String(r.failures), fmt(r.barePerSecond), fmt(r.bareP99),
      fmt(r.ratio, 2), `${fmt(r.rolloutSeconds, 1)} s (${r.rolloutAgents} agents)`, r.load, fleetGoal(r),
    ]),
  );
}

if (isMain(import.meta.url)) {
  const only = process.argv[2] as 'pglite' | 'postgres' | undefined;
  printFleet((await withBackends(benchFleet, only)).flat());
  process.exit(0);
}
