import { and, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { transaction } from '../../platform/db/transaction.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { AccessContext } from '../access/scope.js';
import { reachGroup, reachSite } from '../orgs/service.js';
import { organizations } from '../tenancy/schema.js';
import { agentUpdateSettings, type PinnedVersions } from './schema.js';
import { CONFIG_TOPIC } from './state.js';
import { visibleDevice } from './devices.js';
import { agentsError } from './errors.js';

/**
 * Version pins of a device, a device group or a site (docs/decisions.md "Agent pins and distribution"):
 * rows of `agent_update_settings` with owner type `device`, `group` or `site`, beside the organisation's
 * and the partner's. Whoever may administer the level sets them: a caller restricted to some sites or
 * groups only inside its restriction, and never a level that reaches devices outside it (a site, for a
 * caller restricted to device groups; a group without one of its sites, for a caller restricted to sites).
 */
export type PinOwner = 'device' | 'group' | 'site';

interface Reached {
  id: string;
  orgId: string;
  partnerId: string | null;
  target: { type: 'device' | 'device_group' | 'site'; id: string };
}

async function reach(keel: Keel, access: AccessContext, type: PinOwner, id: string): Promise<Reached> {
  if (type === 'device') {
    const d = await visibleDevice(keel, access, id);
    const [org] = await keel.db.select({ partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, d.orgId));
    return { id: d.id, orgId: d.orgId, partnerId: org?.partnerId ?? null, target: { type: 'device', id: d.id } };
  }
  if (type === 'group') {
    const { group, partnerId } = await reachGroup(keel.db, access, id);
    // A group without a site (or of another site) may hold devices of sites the caller does not administer.
    if (access.siteIds !== null && (group.siteId === null || !access.siteIds.includes(group.siteId))) throw agentsError('placement_forbidden');
    return { id: group.id, orgId: group.orgId, partnerId, target: { type: 'device_group', id: group.id } };
  }
  const { site, partnerId } = await reachSite(keel.db, access, id);
  // A site holds devices of every group: a caller restricted to some groups does not pin all of them.
  if (access.deviceGroupIds !== null) throw agentsError('placement_forbidden');
  return { id: site.id, orgId: site.orgId, partnerId, target: { type: 'site', id: site.id } };
}

async function read(keel: Keel, type: PinOwner, id: string): Promise<PinnedVersions | null> {
  const [row] = await keel.db
    .select({ pins: agentUpdateSettings.pinnedVersions })
    .from(agentUpdateSettings)
    .where(and(eq(agentUpdateSettings.ownerType, type), eq(agentUpdateSettings.ownerId, id)));
  return row?.pins ?? null;
}

export async function getPins(keel: Keel, access: AccessContext, type: PinOwner, id: string): Promise<{ pinnedVersions: PinnedVersions | null }> {
  const o = await reach(keel, access, type, id);
  return { pinnedVersions: await read(keel, type, o.id) };
}

/** PUT: `pinnedVersions` absent is unchanged, null (or `{}`) clears them; audited, and every process's decision cache is dropped. */
export async function putPins(
  keel: Keel, access: AccessContext, type: PinOwner, id: string, patch: { pinnedVersions?: PinnedVersions | null | undefined }, info: AuditRequestInfo,
): Promise<{ pinnedVersions: PinnedVersions | null }> {
  const o = await reach(keel, access, type, id);
  if (patch.pinnedVersions === undefined) return { pinnedVersions: await read(keel, type, o.id) };
  const pins = patch.pinnedVersions && Object.keys(patch.pinnedVersions).length > 0 ? patch.pinnedVersions : null;
  await transaction(keel.db, async (tx) => {
    await tx.db
      .insert(agentUpdateSettings)
      .values({ ownerType: type, ownerId: o.id, maintenanceWindow: null, pinnedVersions: pins, updatedAt: clock.now() })
      .onConflictDoUpdate({ target: [agentUpdateSettings.ownerType, agentUpdateSettings.ownerId], set: { pinnedVersions: pins, updatedAt: clock.now() } });
    await writeAudit(tx.db, info, {
      action: 'agent.update_pins.update',
      orgId: o.orgId,
      partnerId: o.partnerId,
      target: o.target,
      changes: ['pinnedVersions'],
      details: { pinnedVersions: pins },
    });
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return { pinnedVersions: pins };
}
