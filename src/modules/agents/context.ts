import type { Context, MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { sha256Hex } from '../../platform/crypto.js';
import { unauthorized, platformError } from '../../platform/http/errors.js';
import { documentAccess } from '../../platform/http/route-docs.js';
import { bearerToken } from '../../platform/http/bearer-token.js';
import { RateLimits } from '../../platform/rate-limit.js';
import { AgentState, type DeviceState } from './state.js';
import { sweep, type Agents, type DeviceGate } from './heartbeat.js';
import { defineEnrollLimits, DEVICE_TOKEN_PREFIX } from './devices.js';
import { agentMetrics, registerDevicesGauge, type HeartbeatOutcome } from './metrics.js';
import { intervalJob, type KeelModule } from '../../platform/module.js';
import { loggableError } from '../../platform/safe-error.js';
import { agentsError } from './errors.js';
import { advanceSoakedRings } from './rings.js';
import { rollupVersionCounts } from './distribution.js';

/** How often the offline sweep runs. */
const SWEEP_EVERY_MS = 10_000;
/** How often the buffered last-seen stamps are written. */
const FLUSH_EVERY_MS = 1_000;
/** How often soaked rings are advanced (soaks are whole minutes). */
const RING_ADVANCE_EVERY_MS = 30_000;
/** How often the version counts' delta rows are folded (distribution.ts `rollupVersionCounts`). */
const ROLLUP_EVERY_MS = 5_000;

declare module '../../platform/module.js' {
  interface ModuleHandles {
    agents: Agents;
  }
}

/** The agents module of a Keel (installed by the composition root): its caches, limits and device gate. */
export function agentsOf(keel: Keel): Agents {
  return keel.modules.get('agents');
}

/**
 * Installs the agents module: its per-process state, the devices-by-status gauge (counted on each scrape
 * after this process's buffered last-seen stamps are written), and three jobs. The last-seen flush runs
 * where heartbeats are received (the api role); the offline sweep, the rings' advance and the fold of the
 * version counts' deltas where the background work runs (the worker role). The last stamps are written when the Keel closes, whichever jobs ran.
 */
export function installAgents(keel: Keel): KeelModule<Agents> {
  const state = new AgentState(keel, () => keel.config.publicUrl);
  const limits = {
    // In this process's memory: a heartbeat costs no Redis round trip (each process allows the limit).
    heartbeat: new RateLimits(null).define('agent-heartbeat', keel.config.AGENT_HEARTBEAT_LIMIT, 60),
    report: keel.limits.define('agent-report', keel.config.AGENT_REPORT_LIMIT, 3600),
    enrol: defineEnrollLimits(keel),
  };
  const agents: Agents = { keel, state, intervalSeconds: keel.config.AGENT_HEARTBEAT_SECONDS, metrics: agentMetrics(keel), limits, gate: deviceGate(keel.config.AGENT_MAX_IN_FLIGHT) };
  registerDevicesGauge(keel, () => state.flushLastSeen());
  keel.onClose(() => state.flushLastSeen());
  const failed = (what: string) => (err: unknown) => keel.log.warn({ error: loggableError(err) }, `agents: ${what} failed`);
  return {
    handle: agents,
    jobs: [
      // flushLastSeen logs its own failure.
      intervalJob({ name: 'agents.last-seen-flush', roles: ['api'], everyMs: FLUSH_EVERY_MS, run: () => state.flushLastSeen(), failed: failed('last-seen flush'), finally: () => state.flushLastSeen() }),
      intervalJob({ name: 'agents.offline-sweep', roles: ['worker'], everyMs: SWEEP_EVERY_MS, run: () => sweep(agents), failed: failed('sweep') }),
      intervalJob({ name: 'agents.ring-advance', roles: ['worker'], everyMs: RING_ADVANCE_EVERY_MS, run: () => advanceSoakedRings(keel), failed: failed('ring advance') }),
      intervalJob({ name: 'agents.version-counts-rollup', roles: ['worker'], everyMs: ROLLUP_EVERY_MS, run: () => rollupVersionCounts(keel.db), failed: failed('version counts rollup') }),
    ],
  };
}

interface DeviceAuth {
  tokenHash: string;
  device: DeviceState;
}

const authOf = new WeakMap<Request, DeviceAuth>();

/**
 * Requires `Authorization: Bearer <device token>`: the device's cached state by the token's SHA-256
 * (tokens are stored only hashed; the lookup is by hash, so no comparison of secrets happens in
 * JavaScript). A decommissioned device's token is gone from the table and from every cache.
 */
export function deviceAuth(keel: Keel, opts: { counts?: 'heartbeat' } = {}): MiddlewareHandler<AppEnv> {
  const ctx = agentsOf(keel);
  const refused = opts.counts === 'heartbeat' ? (outcome: HeartbeatOutcome) => ctx.metrics.heartbeat(outcome) : () => undefined;
  const invalid = () => {
    refused('unauthorized');
    return agentsError('invalid_device_token');
  };
  const gate = ctx.gate;
  return documentAccess<MiddlewareHandler<AppEnv>>(async (c, next) => {
    // Overload is shed before any work: a quick 503 the agent retries later, not a 10-s time-out.
    if (!gate.enter()) {
      refused('overloaded');
      throw devicesOverloaded();
    }
    try {
      await authenticated(c, next);
    } finally {
      gate.leave();
    }
  }, { device: true, overloadGate: true });

  async function authenticated(c: Context<AppEnv>, next: () => Promise<void>): Promise<void> {
    const token = bearerToken(c.req.header('authorization') ?? '');
    if (!token) {
      refused('unauthorized');
      throw unauthorized('A device token is required');
    }
    if (!token.startsWith(DEVICE_TOKEN_PREFIX)) throw invalid();
    const tokenHash = sha256Hex(token);
    const device = await ctx.state.device(tokenHash);
    if (!device) throw invalid();
    authOf.set(c.req.raw, { tokenHash, device });
    await next();
  }
}

/** Seconds an agent is told to wait when device requests are shed. */
const OVERLOAD_RETRY_AFTER_SECONDS = 5;
const devicesOverloaded = () =>
  platformError('overloaded', { message: 'The server is busy with device requests; try again shortly', headers: { 'Retry-After': String(OVERLOAD_RETRY_AFTER_SECONDS) } });

/** The per-process bound on device requests in flight (AGENT_MAX_IN_FLIGHT), shared by every device route. */
function deviceGate(max: number): DeviceGate {
  let inFlight = 0;
  return {
    enter: () => {
      if (inFlight >= max) return false;
      inFlight++;
      return true;
    },
    leave: () => {
      inFlight--;
    },
  };
}

export function deviceOf(c: Context<AppEnv>): DeviceAuth {
  const auth = authOf.get(c.req.raw);
  if (!auth) throw new Error('deviceAuth must run before this handler');
  return auth;
}
