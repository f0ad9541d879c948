import { and, count, desc, eq, ilike, inArray, isNull, ne, or, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { notFound, platformError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { canSeePlacement, mustReachOrg, placementFilter, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import { deviceGroups, sites } from '../tenancy/schema.js';
import type { Limit } from '../../platform/rate-limit.js';
import { agentOffers, agentUpdateReports, devices, enrollmentKeys } from './schema.js';
import type { Component } from './decision.js';
import { DEVICE_TOPIC } from './state.js';
import { releaseKeysOf } from './release-keys.js';
import { agentsError } from './errors.js';

export const DEVICE_TOKEN_PREFIX = 'kd_';
const ENROLLMENT_KEY_PREFIX = 'ke_';
export const UPDATING_TIMEOUT_MS = 5 * 60_000;

type DeviceRow = typeof devices.$inferSelect;
type KeyRow = typeof enrollmentKeys.$inferSelect;

interface Paging {
  page: number;
  limit: number;
}

/** The status a client sees: `updating` for more than 5 minutes, or `online` without a heartbeat for three intervals, reads `offline`. */
export type DeviceStatus = 'online' | 'offline' | 'updating';

export function effectiveStatus(d: { status: string; lastSeenAt: Date | null; updateStartedAt: Date | null }, intervalSeconds: number, nowMs = clock.nowMs()): DeviceStatus {
  if (d.status === 'updating') return d.updateStartedAt && nowMs - d.updateStartedAt.getTime() > UPDATING_TIMEOUT_MS ? 'offline' : 'updating';
  if (d.status === 'online' && (!d.lastSeenAt || nowMs - d.lastSeenAt.getTime() > 3 * intervalSeconds * 1000)) return 'offline';
  return d.status === 'online' ? 'online' : 'offline';
}

/** The same decision in SQL, for filters and the devices-by-status gauge. */
export function statusExpr(intervalSeconds: number): SQL {
  const now = clock.nowMs();
  const stuck = new Date(now - UPDATING_TIMEOUT_MS).toISOString();
  const silent = new Date(now - 3 * intervalSeconds * 1000).toISOString();
  return sql`case when ${devices.status} = 'updating' and ${devices.updateStartedAt} < ${stuck}::timestamptz then 'offline'
    when ${devices.status} = 'online' and (${devices.lastSeenAt} is null or ${devices.lastSeenAt} < ${silent}::timestamptz) then 'offline'
    else ${devices.status} end`;
}

export function deviceView(d: DeviceRow, intervalSeconds: number) {
  return {
    id: d.id,
    orgId: d.orgId,
    siteId: d.siteId,
    deviceGroupId: d.deviceGroupId,
    hostname: d.hostname,
    os: d.os,
    arch: d.arch,
    components: d.components,
    status: effectiveStatus(d, intervalSeconds),
    lastSeenAt: d.lastSeenAt?.toISOString() ?? null,
    autoUpdate: d.autoUpdate,
    loggedInUser: d.loggedInUser,
    updateNowPending: d.updateNow,
    createdAt: d.createdAt.toISOString(),
  };
}

const keyView = (k: KeyRow) => ({
  id: k.id,
  name: k.name,
  siteId: k.siteId,
  deviceGroupId: k.deviceGroupId,
  expiresAt: k.expiresAt?.toISOString() ?? null,
  revokedAt: k.revokedAt?.toISOString() ?? null,
  createdAt: k.createdAt.toISOString(),
});

/**
 * A site and group of the organisation that the caller's own restriction lets it place devices in.
 * Answers the site: the one named, else the group's (a group with a site places in it,
 * docs/decisions.md "Devices in their group's site").
 */
async function checkPlacement(keel: Keel, access: AccessContext, orgId: string, named: string | null, deviceGroupId: string | null): Promise<string | null> {
  let siteId = named;
  if (siteId) {
    const [s] = await keel.db.select({ id: sites.id }).from(sites).where(and(eq(sites.id, siteId), eq(sites.orgId, orgId)));
    if (!s) throw notFound('Site');
  }
  if (deviceGroupId) {
    const [g] = await keel.db.select({ id: deviceGroups.id, siteId: deviceGroups.siteId }).from(deviceGroups).where(and(eq(deviceGroups.id, deviceGroupId), eq(deviceGroups.orgId, orgId)));
    if (!g) throw notFound('Device group');
    if (siteId && g.siteId && g.siteId !== siteId) throw agentsError('placement_mismatch');
    siteId = g.siteId ?? siteId;
  }
  if (!canSeePlacement(access, { siteId, deviceGroupId })) throw agentsError('placement_forbidden');
  return siteId;
}

export async function createEnrollmentKey(
  keel: Keel,
  access: AccessContext,
  orgId: string,
  input: { name?: string | undefined; siteId?: string | null | undefined; deviceGroupId?: string | null | undefined; expiresAt?: string | null | undefined },
  info: AuditRequestInfo,
) {
  await mustReachOrg(keel.db, access, orgId);
  const deviceGroupId = input.deviceGroupId ?? null;
  const siteId = await checkPlacement(keel, access, orgId, input.siteId ?? null, deviceGroupId);
  const expiresAt = input.expiresAt ? new Date(input.expiresAt) : null;
  if (expiresAt && expiresAt.getTime() <= clock.nowMs()) throw platformError('validation_failed', { message: 'expiresAt must be in the future', details: { fields: [{ path: 'expiresAt', message: 'must be in the future' }] } });
  const key = `${ENROLLMENT_KEY_PREFIX}${randomToken(32)}`;
  const row = await transaction(keel.db, async (tx) => {
    const [r] = await tx.db
      .insert(enrollmentKeys)
      .values({ orgId, name: input.name ?? null, keyHash: sha256Hex(key), siteId, deviceGroupId, expiresAt, createdBy: info.actor.id ?? null, createdAt: clock.now() })
      .returning();
    if (!r) throw new Error('enrollment key insert returned nothing');
    await writeAudit(tx.db, info, { action: 'agent.enrollment_key.create', orgId, target: { type: 'enrollment_key', id: r.id }, details: { siteId, deviceGroupId } });
    return r;
  });
  return { ...keyView(row), key, serverUrl: keel.config.publicUrlFromListenPort ? null : keel.config.publicUrl };
}

export async function listEnrollmentKeys(keel: Keel, access: AccessContext, orgId: string, q: Paging) {
  await mustReachOrg(keel.db, access, orgId);
  const where = and(eq(enrollmentKeys.orgId, orgId), placementFilter(access, enrollmentKeys));
  const rows = await keel.db.select().from(enrollmentKeys).where(where).orderBy(desc(enrollmentKeys.createdAt)).limit(q.limit).offset((q.page - 1) * q.limit);
  const [total] = await keel.db.select({ n: count() }).from(enrollmentKeys).where(where);
  return { data: rows.map(keyView), total: total?.n ?? 0 };
}

export async function revokeEnrollmentKey(keel: Keel, access: AccessContext, orgId: string, id: string, info: AuditRequestInfo): Promise<void> {
  await mustReachOrg(keel.db, access, orgId);
  await transaction(keel.db, async (tx) => {
    const [k] = await tx.db.select().from(enrollmentKeys).where(and(eq(enrollmentKeys.id, id), eq(enrollmentKeys.orgId, orgId)));
    if (!k || !canSeePlacement(access, k)) throw notFound('Enrollment key');
    if (!k.revokedAt) await tx.db.update(enrollmentKeys).set({ revokedAt: clock.now() }).where(eq(enrollmentKeys.id, id));
    await writeAudit(tx.db, info, { action: 'agent.enrollment_key.revoke', orgId, target: { type: 'enrollment_key', id } });
  });
}

export interface EnrollInput {
  enrollmentKey: string;
  hostname: string;
  os: string;
  arch: string;
  agentVersion: string;
  siteId?: string | undefined;
  deviceGroupId?: string | undefined;
}

const badKey = () => agentsError('invalid_enrollment_key');

export interface EnrollLimits {
  /** Enrolments per client IP per minute, every attempt (a wrong key too: key guessing). */
  perIp: Limit;
  /** Enrolments per enrolment key per minute (by the SHA-256 of the key presented, never the key). */
  perKey: Limit;
}

/** The enrolment limits of a Keel (tests let a window pass with `reset`). */
export function enrollLimits(keel: Keel): EnrollLimits {
  return keel.modules.get('agents').limits.enrol;
}

/** Defines the enrolment limits, once per Keel (context.ts `installAgents`). */
export function defineEnrollLimits(keel: Keel): EnrollLimits {
  return {
    perIp: keel.limits.define('enroll-ip', keel.config.ENROLL_IP_LIMIT, 60),
    perKey: keel.limits.define('enroll-key', keel.config.ENROLL_KEY_LIMIT, 60),
  };
}

/**
 * Enrols a device with an organisation key: answers its id and its token (shown once, stored hashed).
 * The limits are spent before the key is looked up, so a wrong key counts like a right one; the
 * per-key point is spent only once the IP's is granted (a refused address spends nothing of a key).
 */
export async function enroll(keel: Keel, input: EnrollInput, intervalSeconds: number, ip: string | null) {
  const keyHash = sha256Hex(input.enrollmentKey);
  const limits = enrollLimits(keel);
  await limits.perIp.consume(ip ?? 'unknown');
  await limits.perKey.consume(keyHash);
  const [key] = await keel.db.select().from(enrollmentKeys).where(eq(enrollmentKeys.keyHash, keyHash));
  if (!key || key.revokedAt || (key.expiresAt && key.expiresAt.getTime() <= clock.nowMs())) throw badKey();
  // The key's placement binds; a key without one lets the agent name a site and group of the organisation.
  let siteId = key.siteId ?? input.siteId ?? null;
  const deviceGroupId = key.deviceGroupId ?? input.deviceGroupId ?? null;
  if ((key.siteId && input.siteId && input.siteId !== key.siteId) || (key.deviceGroupId && input.deviceGroupId && input.deviceGroupId !== key.deviceGroupId)) {
    throw agentsError('placement_mismatch', { message: 'The enrollment key places the device in another site or device group' });
  }
  if (siteId && !key.siteId) {
    const [s] = await keel.db.select({ id: sites.id }).from(sites).where(and(eq(sites.id, siteId), eq(sites.orgId, key.orgId)));
    if (!s) throw notFound('Site');
  }
  if (deviceGroupId) {
    // The key's own group or one the agent names: of the key's organisation, and of the device's site
    // (checkPlacement's rule for keys, here for the placement the key and the agent make together).
    const [g] = await keel.db.select({ id: deviceGroups.id, siteId: deviceGroups.siteId }).from(deviceGroups).where(and(eq(deviceGroups.id, deviceGroupId), eq(deviceGroups.orgId, key.orgId)));
    if (!g) throw notFound('Device group');
    // A key bound to the group moves with it (followGroupSite): only a site the agent names may disagree.
    const named = key.deviceGroupId ? (key.siteId ? null : (input.siteId ?? null)) : siteId;
    if (named && g.siteId && g.siteId !== named) throw agentsError('placement_mismatch');
    // A group with a site places its devices there (docs/decisions.md "Devices in their group's site").
    siteId = g.siteId ?? siteId;
  }
  const token = `${DEVICE_TOKEN_PREFIX}${randomToken(32)}`;
  const now = clock.now();
  const device = await transaction(keel.db, async (tx) => {
    if (deviceGroupId) {
      // The group's row is share-locked and its site read again: a move of the group (which locks the
      // row) either ran first, or waits and then takes this device along (followGroupSite).
      const [g] = await tx.db.select({ siteId: deviceGroups.siteId }).from(deviceGroups).where(eq(deviceGroups.id, deviceGroupId)).for('share');
      if (!g) throw notFound('Device group');
      siteId = g.siteId ?? siteId;
    }
    const [d] = await tx.db
      .insert(devices)
      .values({
        orgId: key.orgId, siteId, deviceGroupId, hostname: input.hostname, os: input.os, arch: input.arch, status: 'offline',
        tokenHash: sha256Hex(token), components: { agent: input.agentVersion }, enrolledWithKeyId: key.id, createdAt: now, updatedAt: now,
      })
      .returning();
    if (!d) throw new Error('device insert returned nothing');
    await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'device.enroll', orgId: key.orgId, target: { type: 'device', id: d.id }, details: { enrollmentKeyId: key.id } });
    await keel.events.publish(tx, 'device.enrolled', key.orgId, { deviceId: d.id, hostname: d.hostname, os: d.os, arch: d.arch, siteId, deviceGroupId, agentVersion: input.agentVersion });
    return d;
  });
  return { deviceId: device.id, deviceToken: token, heartbeatIntervalSeconds: intervalSeconds, releaseKeys: releaseKeysOf(keel.config).pinned };
}

export interface DeviceFilters extends Paging {
  status?: string | undefined;
  siteId?: string | undefined;
  deviceGroupId?: string | undefined;
  os?: string | undefined;
  hostname?: string | undefined;
  agentVersion?: string | undefined;
}

/** The devices the caller sees: its organisations, narrowed by its site and device-group restriction. */
export function visibleDevices(access: AccessContext): SQL | undefined {
  return and(isNull(devices.decommissionedAt), visibleOrgCondition(access, devices.orgId), placementFilter(access, devices));
}

/** The caller's devices, filtered; `also`: a condition of another reading (the `behind` filter of distribution.ts). */
export async function listDevices(keel: Keel, access: AccessContext, q: DeviceFilters, intervalSeconds: number, also?: SQL) {
  const parts: (SQL | undefined)[] = [visibleDevices(access), also];
  if (q.status) parts.push(sql`${statusExpr(intervalSeconds)} = ${q.status}`);
  if (q.siteId) parts.push(eq(devices.siteId, q.siteId));
  if (q.deviceGroupId) parts.push(eq(devices.deviceGroupId, q.deviceGroupId));
  if (q.os) parts.push(eq(devices.os, q.os));
  if (q.hostname) parts.push(ilike(devices.hostname, `%${q.hostname.replace(/[\\%_]/g, (m) => `\\${m}`)}%`));
  if (q.agentVersion) parts.push(sql`${devices.components}->>'agent' = ${q.agentVersion}`);
  const where = and(...parts);
  const rows = await keel.db.select().from(devices).where(where).orderBy(devices.hostname, devices.id).limit(q.limit).offset((q.page - 1) * q.limit);
  const [total] = await keel.db.select({ n: count() }).from(devices).where(where);
  return { data: rows.map((d) => deviceView(d, intervalSeconds)), total: total?.n ?? 0 };
}

export async function visibleDevice(keel: Keel, access: AccessContext, id: string): Promise<DeviceRow> {
  const [d] = await keel.db.select().from(devices).where(and(eq(devices.id, id), visibleDevices(access)));
  if (!d) throw notFound('Device');
  return d;
}

export async function getDevice(keel: Keel, access: AccessContext, id: string, intervalSeconds: number) {
  return deviceView(await visibleDevice(keel, access, id), intervalSeconds);
}

export async function decommission(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const d = await visibleDevice(keel, access, id);
  await transaction(keel.db, async (tx) => {
    const [done] = await tx.db
      .update(devices)
      .set({ tokenHash: null, decommissionedAt: clock.now(), status: 'offline', updatedAt: clock.now() })
      .where(and(eq(devices.id, id), isNull(devices.decommissionedAt)))
      .returning({ id: devices.id });
    if (!done) throw notFound('Device');
    await writeAudit(tx.db, info, { action: 'device.decommission', orgId: d.orgId, target: { type: 'device', id } });
    await keel.events.publish(tx, 'device.decommissioned', d.orgId, { deviceId: id, hostname: d.hostname });
  });
  await keel.invalidation.publish(DEVICE_TOPIC, id);
}

export async function setAutoUpdate(keel: Keel, access: AccessContext, id: string, enabled: boolean, info: AuditRequestInfo, intervalSeconds: number) {
  const d = await visibleDevice(keel, access, id);
  const row = await transaction(keel.db, async (tx) => {
    const [r] = await tx.db.update(devices).set({ autoUpdate: enabled, updatedAt: clock.now() }).where(eq(devices.id, id)).returning();
    if (!r) throw notFound('Device');
    await writeAudit(tx.db, info, { action: 'device.auto_update', orgId: d.orgId, target: { type: 'device', id }, details: { enabled } });
    return r;
  });
  await keel.invalidation.publish(DEVICE_TOPIC, id);
  return deviceView(row, intervalSeconds);
}

/**
 * Marks devices for one update offer at their next heartbeat; unknown or invisible ids are a 404 naming
 * none of them. It is also the retry (docs/decisions.md "Honest rollouts"): the versions these devices
 * failed or rolled back are offered again (each lifted block is recorded in the device's history as
 * `retried` and audited).
 */
export async function updateNow(keel: Keel, access: AccessContext, ids: string[], info: AuditRequestInfo): Promise<string[]> {
  const unique = [...new Set(ids.map((i) => i.toLowerCase()))];
  const found = await keel.db.select({ id: devices.id, orgId: devices.orgId }).from(devices).where(and(inArray(devices.id, unique), visibleDevices(access)));
  if (found.length !== unique.length) throw notFound('Device');
  await transaction(keel.db, async (tx) => {
    const now = clock.now();
    await tx.db.update(devices).set({ updateNow: true, updatedAt: now }).where(inArray(devices.id, unique));
    const retried = await tx.db
      .update(agentOffers)
      .set({ blocked: false, retriedAt: now })
      .where(and(inArray(agentOffers.deviceId, unique), eq(agentOffers.blocked, true)))
      .returning({ deviceId: agentOffers.deviceId, component: agentOffers.component, version: agentOffers.version });
    if (retried.length > 0) {
      await tx.db.insert(agentUpdateReports).values(retried.map((r) => ({ deviceId: r.deviceId, component: r.component, toVersion: r.version, state: 'retried', createdAt: now })));
    }
    for (const d of found) {
      const mine = retried.filter((r) => r.deviceId === d.id).map((r) => `${r.component}@${r.version}`);
      await writeAudit(tx.db, info, { action: 'device.update_now', orgId: d.orgId, target: { type: 'device', id: d.id }, ...(mine.length > 0 ? { details: { retried: mine } } : {}) });
    }
  });
  for (const id of unique) await keel.invalidation.publish(DEVICE_TOPIC, id);
  return unique;
}

export const HISTORY_STATES = ['offered', 'started', 'succeeded', 'failed', 'rolled_back', 'retried'] as const;

/** A device's update history, newest first: what Keel offered and retried, and what the agent reported (with its reason). */
export async function updateHistory(keel: Keel, access: AccessContext, id: string, q: Paging) {
  await visibleDevice(keel, access, id);
  const where = eq(agentUpdateReports.deviceId, id);
  const rows = await keel.db
    .select()
    .from(agentUpdateReports)
    .where(where)
    .orderBy(desc(agentUpdateReports.createdAt), desc(agentUpdateReports.id))
    .limit(q.limit)
    .offset((q.page - 1) * q.limit);
  const [total] = await keel.db.select({ n: count() }).from(agentUpdateReports).where(where);
  return {
    data: rows.map((r) => ({
      id: r.id,
      component: r.component as Component,
      fromVersion: r.fromVersion,
      toVersion: r.toVersion,
      state: r.state as (typeof HISTORY_STATES)[number],
      error: r.error,
      at: r.createdAt.toISOString(),
    })),
    total: total?.n ?? 0,
  };
}

/**
 * A device group moved to another site (`PATCH /device-groups/:id`, inside its transaction): its
 * devices and enrolment keys move with it, so every read that filters by site (lists, restrictions,
 * site settings, webhook placements) sees them where their group is (docs/decisions.md "Devices in
 * their group's site"). A group that leaves every site (null) leaves its devices where they were.
 */
export async function followGroupSite(keel: Keel, tx: Tx, groupId: string, siteId: string | null): Promise<number> {
  if (siteId === null) return 0;
  const moved = await tx.db
    .update(devices)
    .set({ siteId, updatedAt: clock.now() })
    .where(and(eq(devices.deviceGroupId, groupId), or(isNull(devices.siteId), ne(devices.siteId, siteId))))
    .returning({ id: devices.id });
  await tx.db.update(enrollmentKeys).set({ siteId }).where(and(eq(enrollmentKeys.deviceGroupId, groupId), or(isNull(enrollmentKeys.siteId), ne(enrollmentKeys.siteId, siteId))));
  // Each process drops the moved devices' cached state (the heartbeat reads the site's settings by it).
  if (moved.length > 0) tx.afterCommit(async () => {
    if (moved.length > 100) await keel.invalidation.publish(DEVICE_TOPIC, '*');
    else for (const d of moved) await keel.invalidation.publish(DEVICE_TOPIC, d.id);
  });
  return moved.length;
}

/** The site and device group (as text) of the device an SQL uuid expression names, for reads of other modules (webhook deliveries). */
export const devicePlacementSql = (deviceId: SQL): { siteId: SQL; deviceGroupId: SQL } => ({
  siteId: sql`(select ${devices.siteId}::text from ${devices} where ${devices.id} = ${deviceId})`,
  deviceGroupId: sql`(select ${devices.deviceGroupId}::text from ${devices} where ${devices.id} = ${deviceId})`,
});
