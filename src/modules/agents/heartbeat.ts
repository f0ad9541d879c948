import { and, eq, lt, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { rowsOf } from '../../platform/db/client.js';
import { writeAudit } from '../audit/service.js';
import { devices, agentTargets, agentUpdateReports, type ComponentVersions } from './schema.js';
import { COMPONENTS, decideUpdate, type Component, type Offer } from './decision.js';
import { CONFIG_TOPIC, DEVICE_TOPIC, type AgentState, type DeviceState } from './state.js';
import { UPDATING_TIMEOUT_MS } from './devices.js';
import type { AgentMetrics } from './metrics.js';
import { releaseKeysOf } from './release-keys.js';

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
}

const sameVersions = (a: ComponentVersions, b: ComponentVersions) => COMPONENTS.every((c) => a[c] === b[c]);

async function decide(ctx: Agents, d: DeviceState, components: ComponentVersions, nowMs: number): Promise<Offer | null> {
  // Auto-update is decided in one place, decideUpdate.
  if (!d.os || !d.arch) return null;
  const org = await ctx.state.settings('org', d.orgId);
  const partner = d.partnerId ? await ctx.state.settings('partner', d.partnerId) : null;
  const targets = await ctx.state.targets();
  const builds = await ctx.state.builds(d.os, d.arch);
  return decideUpdate({
    deviceId: d.id,
    os: d.os,
    arch: d.arch,
    components,
    autoUpdate: d.autoUpdate,
    updateNow: d.updateNow,
    window: org?.maintenanceWindow ?? partner?.maintenanceWindow ?? null,
    pins: { ...(partner?.pinnedVersions ?? {}), ...(org?.pinnedVersions ?? {}) },
    now: new Date(nowMs),
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
  const now = clock.nowMs();
  ctx.state.seen(d, now);
  const components: ComponentVersions = {};
  for (const c of COMPONENTS) {
    const v = input.components[c];
    if (v !== undefined) components[c] = v;
  }
  const userChanged = input.loggedInUser !== undefined && input.loggedInUser !== d.loggedInUser;
  const changed = !sameVersions(components, d.components) || d.status !== 'online' || userChanged || d.updateNow || (input.hostname !== undefined && input.hostname !== d.hostname);
  // No second offer while an update runs (until it reports, or the 5 minutes pass).
  const offer = d.status === 'updating' ? null : await decide(ctx, d, components, now);
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
    if (input.loggedInUser !== undefined && input.loggedInUser !== row.loggedInUser) {
      if (row.loggedInUser) await keel.events.publish(tx, 'session.logout', row.orgId, { deviceId: row.id, username: row.loggedInUser });
      if (input.loggedInUser) await keel.events.publish(tx, 'session.login', row.orgId, { deviceId: row.id, username: input.loggedInUser });
      patch.loggedInUser = input.loggedInUser;
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

/** An update report: `started` moves the device to `updating`; a failure may halt the rollout (AGENT_HALT_*). */
export async function updateReport(ctx: Agents, d: DeviceState, r: UpdateReport): Promise<void> {
  const { keel } = ctx;
  const now = clock.now();
  const halted = await transaction(keel.db, async (tx) => {
    await tx.db.insert(agentUpdateReports).values({
      deviceId: d.id, component: r.component, fromVersion: r.fromVersion ?? null, toVersion: r.toVersion, state: r.state, error: r.error?.slice(0, 2000) ?? null, createdAt: now,
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
    return r.state === 'failed' || r.state === 'rolled_back' ? maybeHalt(ctx, tx, r.component, r.toVersion) : false;
  });
  ctx.metrics.updateReport(r.state);
  await keel.invalidation.publish(DEVICE_TOPIC, d.id);
  if (halted) await keel.invalidation.publish(CONFIG_TOPIC, '*');
}

/** Outcome counts of a version's update reports (the last outcome of each device). */
export async function reportCounts(db: Keel['db'], component: string, version: string): Promise<{ succeeded: number; failed: number }> {
  const rows = await db.execute(sql`
    select count(*) filter (where state = 'succeeded')::int as succeeded, count(*) filter (where state in ('failed', 'rolled_back'))::int as failed
    from (select distinct on (device_id) state from ${agentUpdateReports}
          where component = ${component} and to_version = ${version} and state <> 'started'
            and created_at >= coalesce((select min(reports_since) from ${agentTargets} where component = ${component} and version = ${version}), '-infinity'::timestamptz)
          order by device_id, created_at desc, id desc) last`);
  const [r] = rowsOf<{ succeeded: number | string; failed: number | string }>(rows);
  return { succeeded: Number(r?.succeeded ?? 0), failed: Number(r?.failed ?? 0) };
}

async function maybeHalt(ctx: Agents, tx: Tx, component: Component, version: string): Promise<boolean> {
  const { keel } = ctx;
  const { succeeded, failed } = await reportCounts(tx.db, component, version);
  const total = succeeded + failed;
  if (total < keel.config.AGENT_HALT_MIN_REPORTS || failed * 100 < keel.config.AGENT_HALT_FAILURE_PERCENT * total) return false;
  const halted = await tx.db
    .update(agentTargets)
    .set({ rolloutStatus: 'halted', updatedAt: clock.now() })
    .where(and(eq(agentTargets.component, component), eq(agentTargets.version, version), eq(agentTargets.rolloutStatus, 'active')))
    .returning({ id: agentTargets.id, os: agentTargets.os, arch: agentTargets.arch });
  if (halted.length === 0) return false;
  await writeAudit(tx.db, { actor: { type: 'system' } }, {
    action: 'agent.rollout.halt', target: { type: 'agent_version', id: version },
    details: { component, version, succeeded, failed, platforms: halted.map((h) => `${h.os}/${h.arch}`) },
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
