import { and, eq, isNotNull, lt, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { rowsOf } from '../../platform/db/client.js';
import { writeAudit } from '../audit/service.js';
import { devices, agentOffers, agentTargets, agentUpdateReports, type ComponentVersions } from './schema.js';
import { COMPONENTS, decideUpdate, type Component, type Offer } from './decision.js';
import { CONFIG_TOPIC, DEVICE_TOPIC, type AgentState, type DeviceState } from './state.js';
import { UPDATING_TIMEOUT_MS, type EnrollLimits } from './devices.js';
import type { AgentMetrics } from './metrics.js';
import type { Limit } from '../../platform/rate-limit.js';
import { releaseKeysOf } from './release-keys.js';
import { haltByRing, lockRings, overThreshold } from './rings.js';

/** Stored length of an update report's `error` (longer text is cut, never refused: the agent's report still counts). */
export const REPORT_ERROR_MAX = 500;

export interface HeartbeatInput {
  components: { agent: string; helper?: string | undefined; watchdog?: string | undefined };
  hostname?: string | undefined;
  loggedInUser?: string | null | undefined;
}

export interface HeartbeatAnswer {
  nextHeartbeatSeconds: number;
  autoUpdate: boolean;
  update: { component: Component; version: string; url: string; sha256: string; size: number; signature: string | null; keyId: string | null } | null;
  /** Two-phase release-key rotation: the key list and the operator's signature over its statement (signing.ts), or null. */
  releaseKeys: { keys: string[]; signature: string } | null;
}

export interface Agents {
  keel: Keel;
  state: AgentState;
  intervalSeconds: number;
  /** Heartbeat and update-report counters (no-ops unless METRICS_ENABLED). */
  metrics: AgentMetrics;
  /** Per device: heartbeats (in-process, AGENT_HEARTBEAT_LIMIT a minute) and update reports (AGENT_REPORT_LIMIT an hour). */
  limits: { heartbeat: Limit; report: Limit; enrol: EnrollLimits };
  /** The per-process bound on device requests in flight (AGENT_MAX_IN_FLIGHT), shared by every device route. */
  gate: DeviceGate;
}

export interface DeviceGate {
  /** False when the bound is reached (the request is shed). */
  enter(): boolean;
  leave(): void;
}

const sameVersions = (a: ComponentVersions, b: ComponentVersions) => COMPONENTS.every((c) => a[c] === b[c]);

async function decide(ctx: Agents, d: DeviceState, components: ComponentVersions, nowMs: number): Promise<Offer | null> {
  // Auto-update is decided in one place, decideUpdate.
  if (!d.os || !d.arch) return null;
  const { pins, window } = await ctx.state.policy(d);
  const targets = await ctx.state.targets();
  const builds = await ctx.state.builds(d.os, d.arch);
  return decideUpdate({
    deviceId: d.id,
    os: d.os,
    arch: d.arch,
    components,
    deviceGroupId: d.deviceGroupId,
    autoUpdate: d.autoUpdate,
    updateNow: d.updateNow,
    window,
    pins,
    now: new Date(nowMs),
    blocked: d.blocked.size === 0 ? undefined : (c, v) => d.blocked.has(`${c}@${v}`),
    target: (c, os, arch) => targets.get(`${c}/${os}/${arch}`),
    build: (v, c) => builds(v, c),
  });
}

/**
 * A heartbeat. When nothing changed (same versions, same user, device already online, no update-now
 * to consume) it costs no statement: last seen is buffered, the answer comes from the caches. A change
 * is written in one transaction that reads the row `for update`, so the database (not a per-process
 * cache) decides which events fire, once.
 */
export async function heartbeat(ctx: Agents, tokenHash: string, d: DeviceState, input: HeartbeatInput): Promise<HeartbeatAnswer> {
  // Beyond the expected interval (generous): 429 with Retry-After, which the agent honours. In-process, no statement.
  await ctx.limits.heartbeat.consume(d.id);
  const now = clock.nowMs();
  ctx.state.seen(d, now);
  const components: ComponentVersions = {};
  for (const c of COMPONENTS) {
    const v = input.components[c];
    if (v !== undefined) components[c] = v;
  }
  const userChanged = input.loggedInUser !== undefined && input.loggedInUser !== d.loggedInUser;
  // A change of the signed-in user held back by the event window is told by the first heartbeat after it.
  const user = input.loggedInUser !== undefined ? input.loggedInUser : d.loggedInUser;
  const userUntold = user !== d.userTold && (d.userEventMs === null || now - d.userEventMs >= ctx.keel.config.AGENT_FIELD_EVENT_WINDOW_SECONDS * 1000);
  const changed = !sameVersions(components, d.components) || d.status !== 'online' || userChanged || userUntold || d.updateNow || (input.hostname !== undefined && input.hostname !== d.hostname);
  // No second offer while an update runs (until it reports, or the 5 minutes pass).
  const offer = d.status === 'updating' ? null : await decide(ctx, d, components, now);
  if (offer) await recordOffer(ctx, d, offer);
  let versionChanged = false;
  if (changed) versionChanged = await applyChange(ctx, tokenHash, d, components, input, now);
  ctx.metrics.heartbeat('ok');
  return {
    nextHeartbeatSeconds: ctx.intervalSeconds + (versionChanged ? Math.floor(Math.random() * 61) : 0),
    autoUpdate: d.autoUpdate,
    update: offer
      ? { component: offer.component, version: offer.version, url: offer.url, sha256: offer.sha256, size: offer.size, signature: offer.signature ?? null, keyId: offer.keyId ?? null }
      : null,
    releaseKeys: releaseKeysOf(ctx.keel.config).statement,
  };
}

/**
 * Records that Keel offered this update to this device (what its reports may count for). Once per
 * (device, component, version): a flag on the cached state skips the statement on later heartbeats,
 * and the conflict rule keeps a reload of the state (another process, a dropped entry) harmless. The
 * first offer, and the first after a retry (`retried_at` set by update-now), go to the device's
 * update history as `offered`.
 */
async function recordOffer(ctx: Agents, d: DeviceState, offer: Offer): Promise<void> {
  const key = `${offer.component}@${offer.version}`;
  if (d.offered === key || !d.os || !d.arch) return;
  const { os, arch } = d;
  const now = clock.now();
  await transaction(ctx.keel.db, async (tx) => {
    const [fresh] = await tx.db
      .insert(agentOffers)
      .values({ deviceId: d.id, component: offer.component, version: offer.version, os, arch, offeredAt: now })
      .onConflictDoUpdate({
        target: [agentOffers.deviceId, agentOffers.component, agentOffers.version],
        set: { offeredAt: now, retriedAt: null },
        setWhere: isNotNull(agentOffers.retriedAt),
      })
      .returning({ id: agentOffers.id });
    if (!fresh) return;
    await tx.db.insert(agentUpdateReports).values({ deviceId: d.id, component: offer.component, fromVersion: d.components[offer.component] ?? null, toVersion: offer.version, state: 'offered', createdAt: now });
  });
  d.offered = key;
}

async function applyChange(ctx: Agents, tokenHash: string, d: DeviceState, components: ComponentVersions, input: HeartbeatInput, nowMs: number): Promise<boolean> {
  const { keel } = ctx;
  let versionChanged = false;
  const next = await transaction(keel.db, async (tx) => {
    const [row] = await tx.db.select().from(devices).where(eq(devices.id, d.id)).for('update');
    if (!row || row.decommissionedAt) return null;
    const patch: Partial<typeof devices.$inferInsert> = { lastSeenAt: new Date(nowMs), updatedAt: new Date(nowMs) };
    const merged: ComponentVersions = { ...row.components, ...components };
    let patchVersions = false;
    for (const c of COMPONENTS) {
      if (components[c] !== undefined && components[c] !== row.components[c]) {
        patchVersions = true;
        // A component reported for the first time is recorded, not an update.
        if (row.components[c] === undefined) continue;
        versionChanged = true;
        await keel.events.publish(tx, 'device.updated', row.orgId, { deviceId: row.id, component: c, fromVersion: row.components[c] ?? null, toVersion: components[c] });
      }
    }
    if (patchVersions) patch.components = merged;
    let status = row.status;
    // An update ends when the component it started for reports the version it went to.
    if (row.status === 'updating' && row.updateComponent && merged[row.updateComponent as Component] === row.updateToVersion) {
      status = 'online';
      Object.assign(patch, { updateStartedAt: null, updateComponent: null, updateToVersion: null });
    }
    if (row.status === 'offline') {
      status = 'online';
      await keel.events.publish(tx, 'device.online', row.orgId, { deviceId: row.id, hostname: row.hostname });
    }
    patch.status = status;
    // The signed-in user: the latest value is always stored; events tell subscribers at most one change
    // per AGENT_FIELD_EVENT_WINDOW_SECONDS (logout of the user they last heard of, login of the current
    // one). A change inside the window waits; the first heartbeat after it tells the value then current,
    // so toggling gives one pair per window and subscribers still end on the right user.
    const user = input.loggedInUser !== undefined ? input.loggedInUser : row.loggedInUser;
    if (input.loggedInUser !== undefined && input.loggedInUser !== row.loggedInUser) patch.loggedInUser = input.loggedInUser;
    const windowMs = keel.config.AGENT_FIELD_EVENT_WINDOW_SECONDS * 1000;
    if (user !== row.loggedInUserTold && (!row.loggedInUserEventAt || nowMs - row.loggedInUserEventAt.getTime() >= windowMs)) {
      if (row.loggedInUserTold) await keel.events.publish(tx, 'session.logout', row.orgId, { deviceId: row.id, username: row.loggedInUserTold });
      if (user) await keel.events.publish(tx, 'session.login', row.orgId, { deviceId: row.id, username: user });
      Object.assign(patch, { loggedInUserTold: user, loggedInUserEventAt: new Date(nowMs) });
    }
    if (input.hostname !== undefined) patch.hostname = input.hostname;
    // Update-now is consumed by the next heartbeat, whether or not it could offer something.
    if (row.updateNow) patch.updateNow = false;
    const [saved] = await tx.db.update(devices).set(patch).where(eq(devices.id, d.id)).returning();
    return saved ?? null;
  });
  await keel.invalidation.publish(DEVICE_TOPIC, d.id);
  if (next) {
    Object.assign(d, {
      hostname: next.hostname, status: next.status, components: next.components, loggedInUser: next.loggedInUser, updateNow: next.updateNow,
      autoUpdate: next.autoUpdate, updateStartedAt: next.updateStartedAt?.getTime() ?? null, updateComponent: next.updateComponent, updateToVersion: next.updateToVersion,
      userTold: next.loggedInUserTold, userEventMs: next.loggedInUserEventAt?.getTime() ?? null,
    });
    ctx.state.remember(tokenHash, d);
  }
  return versionChanged;
}

export interface UpdateReport {
  component: Component;
  fromVersion?: string | null | undefined;
  toVersion: string;
  state: 'started' | 'succeeded' | 'failed' | 'rolled_back';
  error?: string | null | undefined;
}

/**
 * An update report: `started` moves the device to `updating`; an outcome is the device's own state.
 * It counts towards a rollout only when Keel offered that update to this device (`agent_offers`):
 * the offer row keeps the device's last outcome, so a device counts once, on the platform it was
 * offered for. A report of anything else is kept in the history and counts for nothing.
 */
export async function updateReport(ctx: Agents, d: DeviceState, r: UpdateReport): Promise<void> {
  const { keel } = ctx;
  await ctx.limits.report.consume(d.id);
  const now = clock.now();
  const halted = await transaction(keel.db, async (tx) => {
    await tx.db.insert(agentUpdateReports).values({
      deviceId: d.id, component: r.component, fromVersion: r.fromVersion ?? null, toVersion: r.toVersion, state: r.state, error: r.error?.slice(0, REPORT_ERROR_MAX) ?? null, createdAt: now,
    });
    if (r.state === 'started') {
      await tx.db
        .update(devices)
        .set({ status: 'updating', updateStartedAt: now, updateComponent: r.component, updateToVersion: r.toVersion, updatedAt: now })
        .where(eq(devices.id, d.id));
      return false;
    }
    const [row] = await tx.db.select().from(devices).where(eq(devices.id, d.id)).for('update');
    if (!row) return false;
    const patch: Partial<typeof devices.$inferInsert> = { updateStartedAt: null, updateComponent: null, updateToVersion: null, updatedAt: now, lastSeenAt: now };
    patch.status = 'online';
    if (row.status === 'offline') await keel.events.publish(tx, 'device.online', row.orgId, { deviceId: row.id, hostname: row.hostname });
    if (r.state === 'succeeded' && row.components[r.component] !== r.toVersion) {
      patch.components = { ...row.components, [r.component]: r.toVersion };
      await keel.events.publish(tx, 'device.updated', row.orgId, { deviceId: row.id, component: r.component, fromVersion: row.components[r.component] ?? null, toVersion: r.toVersion });
    }
    await tx.db.update(devices).set(patch).where(eq(devices.id, d.id));
    const [offer] = await tx.db
      .update(agentOffers)
      .set({ outcome: r.state, reportedAt: now, blocked: r.state !== 'succeeded' })
      .where(and(eq(agentOffers.deviceId, d.id), eq(agentOffers.component, r.component), eq(agentOffers.version, r.toVersion)))
      .returning();
    if (!offer) return false; // never offered: counts for nothing
    return r.state === 'failed' || r.state === 'rolled_back' ? maybeHalt(ctx, tx, offer, row.deviceGroupId) : false;
  });
  ctx.metrics.updateReport(r.state);
  await keel.invalidation.publish(DEVICE_TOPIC, d.id);
  if (halted) await keel.invalidation.publish(CONFIG_TOPIC, '*');
}

/**
 * Outcome counts of a version's rollout: the last outcome of each device it was offered to, reported
 * since its platform's target counts (`reports_since`), on the platforms where it is the target (or one).
 */
export async function reportCounts(db: Keel['db'], component: string, version: string, platform?: { os: string; arch: string }): Promise<{ succeeded: number; failed: number }> {
  const rows = await db.execute(sql`
    select count(*) filter (where o.outcome = 'succeeded')::int as succeeded, count(*) filter (where o.outcome in ('failed', 'rolled_back'))::int as failed
    from ${agentOffers} o join ${agentTargets} t on t.component = o.component and t.os = o.os and t.arch = o.arch and t.version = o.version
    where o.component = ${component} and o.version = ${version} and o.outcome is not null and o.reported_at >= t.reports_since
      ${platform ? sql`and o.os = ${platform.os} and o.arch = ${platform.arch}` : sql``}`);
  const [r] = rowsOf<{ succeeded: number | string; failed: number | string }>(rows);
  return { succeeded: Number(r?.succeeded ?? 0), failed: Number(r?.failed ?? 0) };
}

/**
 * The automatic halt of one platform's rollout (component, os, arch). The target row is locked
 * (`for update`) before the count, so concurrent failure reports decide one after another, each
 * counting every outcome committed before it: the last of them sees them all (READ COMMITTED takes a
 * new snapshot per statement). A device in a ring of the version's rollout also counts for its ring
 * (rings.ts `haltByRing`, whose rows are locked first). The caller publishes the halt to every process after commit.
 */
async function maybeHalt(ctx: Agents, tx: Tx, offer: typeof agentOffers.$inferSelect, groupId: string | null): Promise<boolean> {
  const { keel } = ctx;
  const { component, version, os, arch } = offer;
  // The ring rule's rows first (rings.ts: the rings row before any target row).
  const rings = groupId ? await lockRings(tx, component, version) : null;
  const [target] = await tx.db
    .select()
    .from(agentTargets)
    .where(and(eq(agentTargets.component, component), eq(agentTargets.os, os), eq(agentTargets.arch, arch)))
    .for('update');
  if (!target || target.version !== version || target.rolloutStatus !== 'active') return false;
  const { succeeded, failed } = await reportCounts(tx.db, component, version, { os, arch });
  // Counted on the platform, and on the device's ring: either halts (a ring halts every platform).
  if (!overThreshold(keel, { succeeded, failed })) return rings && groupId ? haltByRing(keel, tx, rings, groupId) : false;
  await tx.db.update(agentTargets).set({ rolloutStatus: 'halted', updatedAt: clock.now() }).where(eq(agentTargets.id, target.id));
  await writeAudit(tx.db, { actor: { type: 'system' } }, {
    action: 'agent.rollout.halt', target: { type: 'agent_version', id: version },
    details: { component, version, succeeded, failed, platforms: [`${os}/${arch}`] },
  });
  return true;
}

/**
 * The timer: devices `online` without a heartbeat for three intervals, and devices `updating` for more
 * than 5 minutes, become `offline` (one `device.offline` each; the conditional update lets only one
 * process emit it).
 */
export async function sweep(ctx: Agents): Promise<number> {
  const { keel } = ctx;
  await ctx.state.flushLastSeen();
  const nowMs = clock.nowMs();
  const silent = new Date(nowMs - 3 * ctx.intervalSeconds * 1000);
  const stuck = new Date(nowMs - UPDATING_TIMEOUT_MS);
  const gone = await transaction(keel.db, async (tx) => {
    const rows = await tx.db
      .update(devices)
      .set({ status: 'offline', updatedAt: new Date(nowMs) })
      .where(sql`${devices.decommissionedAt} is null and ((${devices.status} = 'online' and (${devices.lastSeenAt} is null or ${lt(devices.lastSeenAt, silent)}))
        or (${devices.status} = 'updating' and ${lt(devices.updateStartedAt, stuck)}))`)
      .returning({ id: devices.id, orgId: devices.orgId, hostname: devices.hostname, lastSeenAt: devices.lastSeenAt });
    for (const r of rows) await keel.events.publish(tx, 'device.offline', r.orgId, { deviceId: r.id, hostname: r.hostname, lastSeenAt: r.lastSeenAt?.toISOString() ?? null });
    return rows;
  });
  for (const r of gone) await keel.invalidation.publish(DEVICE_TOPIC, r.id);
  return gone.length;
}
