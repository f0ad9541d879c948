import { and, inArray, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import { clock } from '../../platform/clock.js';
import { rowsOf } from '../../platform/db/client.js';
import { placementFilter, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import { organizations } from '../tenancy/schema.js';
import { agentOffers, agentUpdateSettings, devices, deviceVersionCounts, type ComponentVersions } from './schema.js';
import { COMPONENTS, compareVersions, decideComponent, type Component, type ComponentDecision, type DecisionRule } from './decision.js';
import { visibleDevices } from './devices.js';
import type { Agents } from './heartbeat.js';

/** Why a device is behind its fleet target, in the order they are told (docs/decisions.md "Agent pins and distribution"). */
export const BEHIND_REASONS = ['auto_update_off', 'pinned', 'no_build', 'rolled_back', 'halted', 'offline', 'updating', 'outside_window', 'rollout'] as const;
export type BehindReason = (typeof BEHIND_REASONS)[number];

export interface Distribution {
  versions: { component: Component; version: string; devices: number }[];
  behind: { reason: BehindReason; devices: number }[];
}

/**
 * The one reading of a decision's rule as a reason for being behind (null: not behind). `byStatus`: an
 * offline or updating device reads `offline` / `updating` instead (it is not waiting for the rule). A
 * pin at any level reads `pinned` whatever its rule (its blocked version, its missing build, its window).
 * A new rule of `decideComponent` is mapped here, and only here.
 */
const REASON_OF_RULE: Record<DecisionRule, { reason: BehindReason; byStatus?: true } | null> = {
  pinned_device: { reason: 'pinned' },
  pinned_group: { reason: 'pinned' },
  pinned_site: { reason: 'pinned' },
  pinned_org: { reason: 'pinned' },
  pinned_partner: { reason: 'pinned' },
  rollout: { reason: 'rollout', byStatus: true },
  ring_waiting: { reason: 'rollout', byStatus: true },
  outside_window: { reason: 'outside_window', byStatus: true },
  halted: { reason: 'halted' },
  blocked: { reason: 'rolled_back' },
  no_build: { reason: 'no_build' },
  auto_update_off: { reason: 'auto_update_off' },
  up_to_date: null,
  not_reported: null,
};

/** The reason of a behind component's decision, for a device in `status` (its stored status). */
export function behindReason(d: ComponentDecision, status: string): BehindReason | null {
  const r = REASON_OF_RULE[d.rule];
  if (!r) return null;
  if (d.pinLevel !== null) return 'pinned';
  if (r.byStatus && (status === 'offline' || status === 'updating')) return status;
  return r.reason;
}

/** Devices alike for the decision: one row of the counts (deviceId null), or one device decided alone. */
interface Group {
  key: string;
  org_id: string;
  site_id: string | null;
  device_group_id: string | null;
  os: string | null;
  arch: string | null;
  auto_update: unknown;
  status: string;
  agent: string | null;
  helper: string | null;
  watchdog: string | null;
  device_id: string | null;
  n: number | string;
}

type KeyColumns = Record<'orgId' | 'siteId' | 'deviceGroupId' | 'os' | 'arch' | 'autoUpdate' | 'status' | 'agent' | 'helper' | 'watchdog', SQL | AnyColumn>;

/** The key of a group, computed by the database alike on the counts and on `devices` (JSON: nulls are distinct). */
const keyOf = (c: KeyColumns) =>
  sql`jsonb_build_array(${c.orgId}, ${c.siteId}, ${c.deviceGroupId}, ${c.os}, ${c.arch}, ${c.autoUpdate}, ${c.status}, ${c.agent}, ${c.helper}, ${c.watchdog})::text`;

const deviceKey: KeyColumns = {
  orgId: devices.orgId, siteId: devices.siteId, deviceGroupId: devices.deviceGroupId, os: devices.os, arch: devices.arch, autoUpdate: devices.autoUpdate, status: devices.status,
  agent: sql`${devices.components}->>'agent'`, helper: sql`${devices.components}->>'helper'`, watchdog: sql`${devices.components}->>'watchdog'`,
};

const columnsOf = (c: KeyColumns) =>
  sql`${keyOf(c)} as key, ${c.orgId} as org_id, ${c.siteId} as site_id, ${c.deviceGroupId} as device_group_id, ${c.os} as os, ${c.arch} as arch,
    ${c.autoUpdate} as auto_update, ${c.status} as status, ${c.agent} as agent, ${c.helper} as helper, ${c.watchdog} as watchdog`;

/** A group decided: its reason per behind component, and the first (agent, helper, watchdog) of them. */
interface Decided {
  group: Group;
  n: number;
  components: ComponentVersions;
  reasons: Partial<Record<Component, BehindReason>>;
  first: BehindReason | null;
}

/**
 * The caller's devices in groups, each decided once by the heartbeat's own `decideComponent` (with the
 * same caches). The groups come from `device_version_counts` (migration 0025: a sum per key over a few
 * rows, not a scan of the devices); devices with a pin of their own or a blocked version are the only
 * ones read one by one (by primary key) and taken out of their group. Status is the stored one, which
 * the offline sweep keeps (docs/decisions.md "Agent distribution at scale").
 */
async function decideGroups(ctx: Agents, access: AccessContext): Promise<Decided[]> {
  const { keel } = ctx;
  const c = deviceVersionCounts;
  const countKey: KeyColumns = {
    orgId: c.orgId, siteId: c.siteId, deviceGroupId: c.deviceGroupId, os: c.os, arch: c.arch, autoUpdate: c.autoUpdate, status: c.status,
    agent: c.agent, helper: c.helper, watchdog: c.watchdog,
  };
  const visibleCounts = and(visibleOrgCondition(access, c.orgId), placementFilter(access, { siteId: c.siteId, deviceGroupId: c.deviceGroupId })) ?? sql`true`;
  const grouped = rowsOf<Group>(
    await keel.db.execute(sql`select ${columnsOf(countKey)}, null::uuid as device_id, sum(${c.n}) as n from ${c} where ${visibleCounts}
      group by ${c.orgId}, ${c.siteId}, ${c.deviceGroupId}, ${c.os}, ${c.arch}, ${c.autoUpdate}, ${c.status}, ${c.agent}, ${c.helper}, ${c.watchdog} having sum(${c.n}) <> 0`),
  );
  // Devices with a pin of their own or a blocked version: decided one by one (found by primary key).
  const specialIds = sql`select ${agentUpdateSettings.ownerId} from ${agentUpdateSettings} where ${agentUpdateSettings.ownerType} = 'device' and ${agentUpdateSettings.pinnedVersions} is not null
    union select ${agentOffers.deviceId} from ${agentOffers} where ${agentOffers.blocked}`;
  const special = rowsOf<Group>(
    await keel.db.execute(sql`select ${columnsOf(deviceKey)}, ${devices.id} as device_id, 1 as n from ${devices} where ${devices.id} = any(array(${specialIds})) and ${visibleDevices(access) ?? sql`true`}`),
  );
  // Each one-by-one device leaves its group.
  const groupOf = new Map(grouped.map((g) => [g.key, g]));
  for (const d of special) {
    const g = groupOf.get(d.key);
    if (g) g.n = Number(g.n) - 1;
  }
  const rows = [...grouped.filter((g) => Number(g.n) > 0), ...special];
  const orgIds = [...new Set(rows.map((r) => r.org_id))];
  const partnerOf = new Map<string, string | null>();
  if (orgIds.length > 0) {
    const orgs = await keel.db.select({ id: organizations.id, partnerId: organizations.partnerId }).from(organizations).where(inArray(organizations.id, orgIds));
    for (const o of orgs) partnerOf.set(o.id, o.partnerId);
  }
  const targets = await ctx.state.targets();
  const withTarget = new Set([...targets.keys()].map((k) => k.split('/')[0]));
  const blockedIds = special.map((r) => r.device_id as string);
  const blocked = new Set<string>();
  if (blockedIds.length > 0) {
    const b = await keel.db
      .select({ deviceId: agentOffers.deviceId, component: agentOffers.component, version: agentOffers.version })
      .from(agentOffers)
      .where(and(sql`${agentOffers.blocked}`, inArray(agentOffers.deviceId, blockedIds)));
    for (const r of b) blocked.add(`${r.deviceId}/${r.component}@${r.version}`);
  }
  const now = clock.now();
  const decided: Decided[] = [];
  for (const r of rows) {
    const components: ComponentVersions = {};
    for (const comp of COMPONENTS) if (r[comp] !== null) components[comp] = r[comp];
    const deviceId = r.device_id ?? '';
    const { pins, window } = await ctx.state.policy({ id: deviceId, orgId: r.org_id, partnerId: partnerOf.get(r.org_id) ?? null, siteId: r.site_id, deviceGroupId: r.device_group_id });
    const builds = r.os && r.arch ? await ctx.state.builds(r.os, r.arch) : () => undefined;
    const reasons: Partial<Record<Component, BehindReason>> = {};
    let first: BehindReason | null = null;
    for (const comp of COMPONENTS) {
      const installed = components[comp];
      if (installed === undefined || !withTarget.has(comp)) continue;
      const target = r.os && r.arch ? targets.get(`${comp}/${r.os}/${r.arch}`) : undefined;
      if (target?.version === installed) continue;
      const decision = decideComponent(
        {
          deviceId, os: r.os, arch: r.arch, components, deviceGroupId: r.device_group_id, autoUpdate: Boolean(r.auto_update), updateNow: false, window, pins, now,
          blocked: deviceId ? (bc, bv) => blocked.has(`${deviceId}/${bc}@${bv}`) : undefined,
          target: (tc, os, arch) => targets.get(`${tc}/${os}/${arch}`),
          build: (bv, bc) => builds(bv, bc),
        },
        comp,
      );
      const reason = behindReason(decision, r.status);
      if (reason === null) continue;
      reasons[comp] = reason;
      first ??= reason;
    }
    decided.push({ group: r, n: Number(r.n), components, reasons, first });
  }
  return decided;
}

/**
 * `GET /agent-versions/distribution`: the caller's devices per component version, and per reason for
 * being behind the fleet target of their platform (a component with a target on some platform but
 * none on the device's reads `no_build`). A device behind on several components counts once, for the
 * first (agent, helper, watchdog).
 */
export async function distribution(ctx: Agents, access: AccessContext): Promise<Distribution> {
  const versions = new Map<string, number>();
  const behind = new Map<BehindReason, number>();
  for (const d of await decideGroups(ctx, access)) {
    for (const c of COMPONENTS) {
      const v = d.components[c];
      if (v !== undefined) versions.set(`${c}\u0000${v}`, (versions.get(`${c}\u0000${v}`) ?? 0) + d.n);
    }
    if (d.first !== null) behind.set(d.first, (behind.get(d.first) ?? 0) + d.n);
  }
  return {
    versions: [...versions]
      .map(([key, devicesOn]) => {
        const [component, version] = key.split('\u0000') as [Component, string];
        return { component, version, devices: devicesOn };
      })
      .sort((a, b) => COMPONENTS.indexOf(a.component) - COMPONENTS.indexOf(b.component) || compareVersions(b.version, a.version)),
    behind: BEHIND_REASONS.filter((reason) => behind.has(reason)).map((reason) => ({ reason, devices: behind.get(reason) ?? 0 })),
  };
}

/**
 * `GET /devices?behind=`: the condition on `devices` of the devices behind for `reason`, decided as the
 * distribution decides them (the same groups, the same decision): for `component`, that component's
 * reason; without, the first behind component's (so each reason lists as many devices as the
 * distribution counts).
 */
export async function behindCondition(ctx: Agents, access: AccessContext, reason: BehindReason, component?: Component): Promise<SQL> {
  const keys: string[] = [];
  const alone: string[] = [];
  const chosen: string[] = [];
  for (const d of await decideGroups(ctx, access)) {
    const r = component ? (d.reasons[component] ?? null) : d.first;
    if (d.group.device_id !== null) {
      alone.push(d.group.device_id);
      if (r === reason) chosen.push(d.group.device_id);
    } else if (r === reason) keys.push(d.group.key);
  }
  const list = (values: string[]) => sql`(select jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`;
  const ofGroups = keys.length > 0 ? sql`(${keyOf(deviceKey)} in ${list(keys)}${alone.length > 0 ? sql` and ${devices.id}::text not in ${list(alone)}` : sql``})` : sql`false`;
  return chosen.length > 0 ? sql`(${ofGroups} or ${devices.id}::text in ${list(chosen)})` : ofGroups;
}

/**
 * The `agents.version-counts-rollup` job: folds the delta rows the triggers wrote into one row per key,
 * for the organisations that have some. One statement: deltas committed after it began stay for the
 * next run; two runs at once delete each row once (the second skips the rows the first deleted).
 */
export async function rollupVersionCounts(db: Agents['keel']['db']): Promise<void> {
  const c = deviceVersionCounts;
  const cols = sql`org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog`;
  await db.execute(sql`with orgs as (select distinct ${c.orgId} as org_id from ${c} where not ${c.folded}),
    gone as (delete from ${c} using orgs where ${c.orgId} = orgs.org_id returning ${c}.*)
    insert into ${c} (${cols}, n, folded) select ${cols}, sum(n), true from gone group by ${cols} having sum(n) <> 0`);
}
