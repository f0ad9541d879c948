import { inArray, sql } from 'drizzle-orm';
import { clock } from '../../platform/clock.js';
import { rowsOf } from '../../platform/db/client.js';
import type { AccessContext } from '../access/scope.js';
import { organizations } from '../tenancy/schema.js';
import { agentOffers, agentUpdateSettings, devices, type ComponentVersions } from './schema.js';
import { COMPONENTS, compareVersions, decideComponent, type Component, type ComponentDecision } from './decision.js';
import { statusExpr, visibleDevices } from './devices.js';
import type { Agents } from './heartbeat.js';

/** Why a device is behind its fleet target, in the order they are told (docs/decisions.md "Agent pins and distribution"). */
export const BEHIND_REASONS = ['auto_update_off', 'pinned', 'no_build', 'rolled_back', 'halted', 'offline', 'updating', 'outside_window', 'rollout'] as const;
export type BehindReason = (typeof BEHIND_REASONS)[number];

export interface Distribution {
  versions: { component: Component; version: string; devices: number }[];
  behind: { reason: BehindReason; devices: number }[];
}

interface Row {
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

const groupKey = (r: Row): string =>
  JSON.stringify([r.org_id, r.site_id, r.device_group_id, r.os, r.arch, Boolean(r.auto_update), r.status, r.agent, r.helper, r.watchdog]);

/** The reason of a behind component's decision; a pin at any level reads `pinned`. */
function reasonOf(r: ComponentDecision, status: string): BehindReason {
  if (r.rule === 'auto_update_off') return 'auto_update_off';
  if (r.pinLevel !== null) return 'pinned';
  if (r.rule === 'no_build') return 'no_build';
  if (r.rule === 'blocked') return 'rolled_back';
  if (r.rule === 'halted') return 'halted';
  if (status === 'offline' || status === 'updating') return status;
  return r.rule === 'outside_window' ? 'outside_window' : 'rollout';
}

/**
 * `GET /agent-versions/distribution`: the caller's devices per component version, and per reason for
 * being behind the fleet target of their platform (a component with a target on some platform but
 * none on the device's reads `no_build`). One aggregate groups the devices by everything the decision
 * reads (organisation, site, group, platform, auto-update, status, versions); devices with a pin of
 * their own or a blocked version are the only ones read one by one (by primary key) and taken out of their group. Each group is then decided
 * by the heartbeat's own `decideComponent`, with the same caches. A device behind on several
 * components counts once, for the first (agent, helper, watchdog).
 */
export async function distribution(ctx: Agents, access: AccessContext): Promise<Distribution> {
  const { keel } = ctx;
  await ctx.state.flushLastSeen();
  const status = statusExpr(ctx.intervalSeconds);
  const visible = visibleDevices(access) ?? sql`true`;
  // Devices with a pin of their own or a blocked version: decided one by one (found by primary key).
  const specialIds = sql`select ${agentUpdateSettings.ownerId} from ${agentUpdateSettings} where ${agentUpdateSettings.ownerType} = 'device' and ${agentUpdateSettings.pinnedVersions} is not null
    union select ${agentOffers.deviceId} from ${agentOffers} where ${agentOffers.blocked}`;
  // Grouped by plain columns and the three version texts (grouping by the jsonb itself sorts on disk at 100,000 devices).
  const columns = sql`${devices.orgId} as org_id, ${devices.siteId} as site_id, ${devices.deviceGroupId} as device_group_id, ${devices.os} as os, ${devices.arch} as arch,
    ${devices.autoUpdate} as auto_update, ${status} as status, ${devices.components}->>'agent' as agent, ${devices.components}->>'helper' as helper, ${devices.components}->>'watchdog' as watchdog`;
  const grouped = rowsOf<Row>(
    await keel.db.execute(sql`select ${columns}, null::uuid as device_id, count(*) as n from ${devices} where ${visible} group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10`),
  );
  const special = rowsOf<Row>(
    await keel.db.execute(sql`select ${columns}, ${devices.id} as device_id, 1 as n from ${devices} where ${devices.id} = any(array(${specialIds})) and ${visible}`),
  );
  // Each one-by-one device leaves its group (cheaper than excluding them from the aggregate row by row).
  const groupOf = new Map(grouped.map((g) => [groupKey(g), g]));
  for (const d of special) {
    const g = groupOf.get(groupKey(d));
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
    const b = rowsOf<{ device_id: string; component: string; version: string }>(
      await keel.db.execute(sql`select ${agentOffers.deviceId} as device_id, ${agentOffers.component} as component, ${agentOffers.version} as version
        from ${agentOffers} where ${agentOffers.blocked} and ${agentOffers.deviceId} in (${sql.join(blockedIds.map((id) => sql`${id}`), sql`, `)})`),
    );
    for (const r of b) blocked.add(`${r.device_id}/${r.component}@${r.version}`);
  }
  const versions = new Map<string, number>();
  const behind = new Map<BehindReason, number>();
  const now = clock.now();
  for (const r of rows) {
    const n = Number(r.n);
    const components: ComponentVersions = {};
    for (const c of COMPONENTS) if (r[c] !== null) components[c] = r[c];
    for (const c of COMPONENTS) {
      const v = components[c];
      if (v !== undefined) versions.set(`${c}\u0000${v}`, (versions.get(`${c}\u0000${v}`) ?? 0) + n);
    }
    const deviceId = r.device_id ?? '';
    const { pins, window } = await ctx.state.policy({ id: deviceId, orgId: r.org_id, partnerId: partnerOf.get(r.org_id) ?? null, siteId: r.site_id, deviceGroupId: r.device_group_id });
    const builds = r.os && r.arch ? await ctx.state.builds(r.os, r.arch) : () => undefined;
    for (const c of COMPONENTS) {
      const installed = components[c];
      if (installed === undefined || !withTarget.has(c)) continue;
      const target = r.os && r.arch ? targets.get(`${c}/${r.os}/${r.arch}`) : undefined;
      if (target?.version === installed) continue;
      const decision = decideComponent(
        {
          deviceId, os: r.os, arch: r.arch, components, deviceGroupId: r.device_group_id, autoUpdate: Boolean(r.auto_update), updateNow: false, window, pins, now,
          blocked: deviceId ? (bc, bv) => blocked.has(`${deviceId}/${bc}@${bv}`) : undefined,
          target: (tc, os, arch) => targets.get(`${tc}/${os}/${arch}`),
          build: (bv, bc) => builds(bv, bc),
        },
        c,
      );
      const reason = reasonOf(decision, r.status);
      behind.set(reason, (behind.get(reason) ?? 0) + n);
      break;
    }
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
