import { and, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { rowsOf } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { notFound } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { groupListFilter, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import { deviceGroups } from '../tenancy/schema.js';
import { agentOffers, agentRolloutRings, agentTargets, devices, type RingEntry } from './schema.js';
import type { Component } from './decision.js';
import { CONFIG_TOPIC } from './state.js';
import { agentsError } from './errors.js';

/**
 * Rings of a rollout (docs/decisions.md "Agent update rings"): a promotion names ordered device groups
 * that get the version first. Ring 1 opens with the promotion; ring k+1 (after the last ring: the rest
 * of the fleet) opens when ring k has soaked its minutes (from when it opened, on the controllable
 * clock) with a failure rate under AGENT_HALT_FAILURE_PERCENT (the `agents.ring-advance` job), or by
 * hand (`advanceRollout`). A ring whose failures reach the halt rule halts the whole rollout.
 *
 * Lock order, everywhere both are taken: the rings row before any target row.
 */

/** One promote (or rollout change) at a time: a transaction-scoped advisory lock. */
export const PROMOTE_LOCK = 7345016;
export const MAX_RINGS = 10;
export const MAX_SOAK_MINUTES = 14 * 24 * 60;

export type RingRow = typeof agentRolloutRings.$inferSelect;
export interface RingInput {
  deviceGroupId: string;
  soakMinutes: number;
}

/** 404 for a device group that does not exist (the platform reaches every organisation's groups). */
export async function checkRingGroups(db: Db, rings: readonly RingInput[]): Promise<void> {
  if (rings.length === 0) return;
  const ids = rings.map((r) => r.deviceGroupId);
  const found = new Set((await db.select({ id: deviceGroups.id }).from(deviceGroups).where(inArray(deviceGroups.id, ids))).map((g) => g.id));
  const missing = ids.find((id) => !found.has(id));
  if (missing) throw notFound('Device group');
}

/**
 * Inside a promote of `version` (before its targets are written: the rings row is locked first): drops
 * the rings of the component's earlier promotions that no platform targets any more (`keep`: the
 * versions other platforms keep) and those of this version, then writes the new rings, ring 1 open now.
 */
export async function replaceRings(tx: Tx, component: string, version: string, keep: readonly string[], rings: readonly RingInput[], now: Date): Promise<void> {
  const kept = keep.filter((v) => v !== version);
  await tx.db
    .delete(agentRolloutRings)
    .where(and(eq(agentRolloutRings.component, component), kept.length > 0 ? sql`${agentRolloutRings.version} not in (${sql.join(kept.map((v) => sql`${v}`), sql`, `)})` : undefined));
  if (rings.length === 0) return;
  const entries: RingEntry[] = rings.map((r, i) => ({ deviceGroupId: r.deviceGroupId, soakMinutes: r.soakMinutes, openedAt: i === 0 ? now.toISOString() : null }));
  await tx.db.insert(agentRolloutRings).values({ component, version, rings: entries, opened: 1, createdAt: now, updatedAt: now });
}

const haltedExpr = sql<unknown>`exists (select 1 from ${agentTargets} t where t.component = ${agentRolloutRings.component} and t.version = ${agentRolloutRings.version} and t.rollout_status = 'halted')`;
const targetedExpr = sql`exists (select 1 from ${agentTargets} t where t.component = ${agentRolloutRings.component} and t.version = ${agentRolloutRings.version})`;

/** The rings of the versions that are fleet targets (of one component, or all), with whether the rollout is halted. */
export async function liveRings(db: Db, component?: string): Promise<{ row: RingRow; halted: boolean }[]> {
  const rows = await db
    .select({ row: agentRolloutRings, halted: haltedExpr })
    .from(agentRolloutRings)
    .where(and(component ? eq(agentRolloutRings.component, component) : undefined, targetedExpr));
  return rows.map((r) => ({ row: r.row, halted: Boolean(r.halted) }));
}

export interface RingCounts {
  offered: number;
  succeeded: number;
  failed: number;
}

/**
 * Per device group: the devices of the group offered this version, and their last outcomes reported
 * since their platform's target counts (`reports_since`), as the rollout's halt counts them. `visible`
 * narrows the devices (the caller's).
 */
export async function ringCounts(db: Db, component: string, version: string, groupIds: readonly string[], visible?: SQL): Promise<Map<string, RingCounts>> {
  const out = new Map<string, RingCounts>();
  if (groupIds.length === 0) return out;
  const rows = rowsOf<{ group_id: string; offered: number | string; succeeded: number | string; failed: number | string }>(
    await db.execute(sql`
      select ${devices.deviceGroupId} as group_id, count(*)::int as offered,
        count(*) filter (where o.outcome = 'succeeded' and o.reported_at >= t.reports_since)::int as succeeded,
        count(*) filter (where o.outcome in ('failed', 'rolled_back') and o.reported_at >= t.reports_since)::int as failed
      from ${agentOffers} o join ${devices} on ${devices.id} = o.device_id
        join ${agentTargets} t on t.component = o.component and t.os = o.os and t.arch = o.arch and t.version = o.version
      where o.component = ${component} and o.version = ${version}
        and ${devices.deviceGroupId} in (${sql.join(groupIds.map((g) => sql`${g}`), sql`, `)}) ${visible ? sql`and ${visible}` : sql``}
      group by ${devices.deviceGroupId}`),
  );
  for (const r of rows) out.set(r.group_id, { offered: Number(r.offered), succeeded: Number(r.succeeded), failed: Number(r.failed) });
  return out;
}

/** The halt rule (heartbeat.ts `maybeHalt`): enough reports, and failures at or over the threshold. */
export function overThreshold(keel: Keel, n: { succeeded: number; failed: number }): boolean {
  const total = n.succeeded + n.failed;
  return total >= keel.config.AGENT_HALT_MIN_REPORTS && n.failed * 100 >= keel.config.AGENT_HALT_FAILURE_PERCENT * total;
}

/** Whether a ring's failure rate lets it advance on its own: under the threshold (no report: nothing failed). */
function underThreshold(keel: Keel, n: { succeeded: number; failed: number }): boolean {
  const total = n.succeeded + n.failed;
  return total === 0 || n.failed * 100 < keel.config.AGENT_HALT_FAILURE_PERCENT * total;
}

/** The rings row of a version's rollout, locked (`for update`): taken before any target row. */
export async function lockRings(tx: Tx, component: string, version: string): Promise<RingRow | null> {
  const [row] = await tx.db
    .select()
    .from(agentRolloutRings)
    .where(and(eq(agentRolloutRings.component, component), eq(agentRolloutRings.version, version)))
    .for('update');
  return row ?? null;
}

/**
 * The ring rule of the automatic halt, for a failure report of a device in `groupId` (heartbeat.ts,
 * with the rings row locked): counts the device's ring when it is open, and at the halt rule halts
 * every platform of the version's rollout. Answers whether it halted.
 */
export async function haltByRing(keel: Keel, tx: Tx, row: RingRow, groupId: string): Promise<boolean> {
  const position = row.rings.findIndex((r) => r.deviceGroupId === groupId) + 1;
  if (position === 0 || position > row.opened) return false;
  const counts = (await ringCounts(tx.db, row.component, row.version, [groupId])).get(groupId) ?? { offered: 0, succeeded: 0, failed: 0 };
  if (!overThreshold(keel, counts)) return false;
  const now = clock.now();
  const halted = await tx.db
    .update(agentTargets)
    .set({ rolloutStatus: 'halted', updatedAt: now })
    .where(and(eq(agentTargets.component, row.component), eq(agentTargets.version, row.version), eq(agentTargets.rolloutStatus, 'active')))
    .returning();
  if (halted.length === 0) return false;
  await tx.db.update(agentRolloutRings).set({ haltedRing: position, updatedAt: now }).where(eq(agentRolloutRings.id, row.id));
  await writeAudit(tx.db, { actor: { type: 'system' } }, {
    action: 'agent.rollout.halt', target: { type: 'agent_version', id: row.version },
    details: { component: row.component, version: row.version, ring: position, deviceGroupId: groupId, succeeded: counts.succeeded, failed: counts.failed, platforms: halted.map((t) => `${t.os}/${t.arch}`).sort() },
  });
  return true;
}

/** The rings row after opening the next ring (or the rest of the fleet after the last). */
function opened(row: RingRow, now: Date): Pick<RingRow, 'rings' | 'opened'> {
  const rings = row.rings.map((r, i) => (i === row.opened ? { ...r, openedAt: now.toISOString() } : r));
  return { rings, opened: row.opened + 1 };
}

export interface Advanced {
  component: Component;
  version: string;
  /** The ring opened (1-based), or null: the rest of the fleet. */
  ring: number | null;
}

/**
 * Opens the next ring of `rows` (as read before the lock), each only if nobody moved it meanwhile
 * (`opened` unchanged) and its rollout is not halted. Answers the rings it moved.
 */
async function openNext(keel: Keel, rows: readonly RingRow[], info: AuditRequestInfo, how: 'hand' | 'soak'): Promise<Advanced[]> {
  const now = clock.now();
  const moved = await transaction(keel.db, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(${PROMOTE_LOCK})`);
    const out: Advanced[] = [];
    for (const row of rows) {
      const [saved] = await tx.db
        .update(agentRolloutRings)
        .set({ ...opened(row, now), updatedAt: now })
        .where(and(eq(agentRolloutRings.id, row.id), eq(agentRolloutRings.opened, row.opened), sql`not ${haltedExpr}`))
        .returning();
      if (!saved) {
        if (how === 'hand') throw agentsError('rollout_changed');
        continue;
      }
      const ring = row.opened < row.rings.length ? row.opened + 1 : null;
      out.push({ component: row.component as Component, version: row.version, ring });
      await writeAudit(tx.db, info, {
        action: 'agent.rollout.advance', target: { type: 'agent_version', id: row.version },
        details: { component: row.component, version: row.version, finished: row.opened, opened: ring ?? 'fleet', by: how },
      });
    }
    return out;
  });
  if (moved.length > 0) await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return moved;
}

/**
 * `POST /agent-versions/rollout/advance`: ends the soak of the current ring of each rollout with rings
 * (of one component, or all) at once, whatever its counts. 409 `no_further_ring` when none has a ring
 * (or the rest of the fleet) left to open, `rollout_halted` when those that have are halted,
 * `rollout_changed` when another advance moved one since this request read it.
 */
export async function advanceRollout(keel: Keel, component: Component | undefined, info: AuditRequestInfo): Promise<{ advanced: Advanced[] }> {
  const open = (await liveRings(keel.db, component)).filter((r) => r.row.opened <= r.row.rings.length);
  if (open.length === 0) throw agentsError('no_further_ring');
  const movable = open.filter((r) => !r.halted).map((r) => r.row);
  if (movable.length === 0) throw agentsError('rollout_halted');
  return { advanced: await openNext(keel, movable, info, 'hand') };
}

/**
 * The `agents.ring-advance` job: opens the next ring of each rollout whose current ring has soaked its
 * minutes with a failure rate under the threshold. A ring that soaked with more failures waits (for a
 * halt, or an advance by hand).
 */
export async function advanceSoakedRings(keel: Keel): Promise<Advanced[]> {
  const nowMs = clock.nowMs();
  const due: RingRow[] = [];
  for (const { row, halted } of await liveRings(keel.db)) {
    if (halted || row.opened > row.rings.length) continue;
    const current = row.rings[row.opened - 1];
    if (!current?.openedAt || nowMs - new Date(current.openedAt).getTime() < current.soakMinutes * 60_000) continue;
    const counts = (await ringCounts(keel.db, row.component, row.version, [current.deviceGroupId])).get(current.deviceGroupId);
    if (counts && !underThreshold(keel, counts)) continue;
    due.push(row);
  }
  return due.length === 0 ? [] : openNext(keel, due, { actor: { type: 'system' } }, 'soak');
}

/**
 * Inside a resume (before the targets: rings first): the halted rollouts' rings forget their halt and
 * the current ring's soak starts again now, as failure counting does.
 */
export async function resumeRings(tx: Tx, component: Component | undefined, now: Date): Promise<void> {
  const rows = await tx.db
    .select()
    .from(agentRolloutRings)
    .where(and(component ? eq(agentRolloutRings.component, component) : undefined, haltedExpr))
    .for('update');
  for (const row of rows) {
    const rings = row.rings.map((r, i) => (i === row.opened - 1 ? { ...r, openedAt: now.toISOString() } : r));
    await tx.db.update(agentRolloutRings).set({ rings, haltedRing: null, updatedAt: now }).where(eq(agentRolloutRings.id, row.id));
  }
}

export const RING_STATES = ['waiting', 'soaking', 'done', 'halted'] as const;
export type RingState = (typeof RING_STATES)[number];

export interface RingView {
  ring: number;
  deviceGroupId: string | null;
  name: string | null;
  soakMinutes: number;
  state: RingState;
  openedAt: string | null;
  offered: number;
  succeeded: number;
  failed: number;
}

/**
 * Each ring of a version's rollout as the caller sees it: a group it cannot see reads as null (id and
 * name) and its counts are over the devices the caller sees. The halted ring is the one whose failures
 * halted the rollout, else (another rule halted it) the ring that was soaking.
 */
export async function ringsView(db: Db, access: AccessContext, component: string, version: string, halted: boolean, visibleDevices: SQL | undefined): Promise<RingView[]> {
  const [row] = await db.select().from(agentRolloutRings).where(and(eq(agentRolloutRings.component, component), eq(agentRolloutRings.version, version)));
  if (!row) return [];
  const ids = row.rings.map((r) => r.deviceGroupId);
  const seen = await db
    .select({ id: deviceGroups.id, name: deviceGroups.name })
    .from(deviceGroups)
    .where(and(inArray(deviceGroups.id, ids), visibleOrgCondition(access, deviceGroups.orgId), groupListFilter(access, { id: deviceGroups.id, siteId: deviceGroups.siteId })));
  const names = new Map(seen.map((g) => [g.id, g.name]));
  const counts = await ringCounts(db, component, version, ids, visibleDevices);
  const haltedRing = halted ? (row.haltedRing ?? (row.opened <= row.rings.length ? row.opened : null)) : null;
  return row.rings.map((r, i) => {
    const ring = i + 1;
    const state: RingState = ring === haltedRing ? 'halted' : ring < row.opened ? 'done' : ring === row.opened ? 'soaking' : 'waiting';
    const n = counts.get(r.deviceGroupId) ?? { offered: 0, succeeded: 0, failed: 0 };
    const visible = names.has(r.deviceGroupId);
    return { ring, deviceGroupId: visible ? r.deviceGroupId : null, name: names.get(r.deviceGroupId) ?? null, soakMinutes: r.soakMinutes, state, openedAt: r.openedAt, ...n };
  });
}
