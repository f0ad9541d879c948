import { and, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { mustReachOrg, type AccessContext } from '../access/scope.js';
import { partners } from '../tenancy/schema.js';
import { agentUpdateSettings, type MaintenanceWindow, type PinnedVersions } from './schema.js';
import { CONFIG_TOPIC } from './state.js';

export interface SettingsPatch {
  maintenanceWindow?: MaintenanceWindow | null | undefined;
  pinnedVersions?: PinnedVersions | null | undefined;
}

type Owner = { type: 'org'; id: string; partnerId: string | null } | { type: 'partner'; id: string };

const view = (row: typeof agentUpdateSettings.$inferSelect | undefined) => ({
  maintenanceWindow: row?.maintenanceWindow ?? null,
  pinnedVersions: row?.pinnedVersions ?? null,
});

async function owner(keel: Keel, access: AccessContext, type: 'org' | 'partner', id: string): Promise<Owner> {
  if (type === 'org') {
    const org = await mustReachOrg(keel.db, access, id);
    return { type, id: org.id, partnerId: org.partnerId };
  }
  // A partner's own users and platform administrators reach a partner; nobody else learns it exists.
  if (access.scope === 'organization' || (access.scope === 'partner' && access.partnerId !== id)) throw notFound('Partner');
  const [p] = await keel.db.select({ id: partners.id }).from(partners).where(eq(partners.id, id));
  if (!p) throw notFound('Partner');
  return { type, id: p.id };
}

async function read(keel: Keel, o: Owner) {
  const [row] = await keel.db
    .select()
    .from(agentUpdateSettings)
    .where(and(eq(agentUpdateSettings.ownerType, o.type), eq(agentUpdateSettings.ownerId, o.id)));
  return row;
}

export async function getSettings(keel: Keel, access: AccessContext, type: 'org' | 'partner', id: string) {
  return view(await read(keel, await owner(keel, access, type, id)));
}

/** PUT: each field optional; absent is unchanged, null clears it (docs/decisions.md "Agent and update shapes"). */
export async function putSettings(keel: Keel, access: AccessContext, type: 'org' | 'partner', id: string, patch: SettingsPatch, info: AuditRequestInfo) {
  const o = await owner(keel, access, type, id);
  const row = await transaction(keel.db, async (tx) => {
    const set: Partial<typeof agentUpdateSettings.$inferInsert> = { updatedAt: clock.now() };
    const changes: string[] = [];
    if (patch.maintenanceWindow !== undefined) {
      set.maintenanceWindow = patch.maintenanceWindow;
      changes.push('maintenanceWindow');
    }
    if (patch.pinnedVersions !== undefined) {
      set.pinnedVersions = patch.pinnedVersions && Object.keys(patch.pinnedVersions).length > 0 ? patch.pinnedVersions : null;
      changes.push('pinnedVersions');
    }
    const [r] = await tx.db
      .insert(agentUpdateSettings)
      .values({ ownerType: o.type, ownerId: o.id, maintenanceWindow: set.maintenanceWindow ?? null, pinnedVersions: set.pinnedVersions ?? null, updatedAt: clock.now() })
      .onConflictDoUpdate({ target: [agentUpdateSettings.ownerType, agentUpdateSettings.ownerId], set })
      .returning();
    await writeAudit(tx.db, info, {
      action: 'agent.update_settings.update',
      orgId: o.type === 'org' ? o.id : null,
      partnerId: o.type === 'org' ? o.partnerId : o.id,
      target: { type: o.type === 'org' ? 'organization' : 'partner', id: o.id },
      changes,
      details: { maintenanceWindow: r?.maintenanceWindow ?? null, pinnedVersions: r?.pinnedVersions ?? null },
    });
    return r;
  });
  await keel.invalidation.publish(CONFIG_TOPIC, '*');
  return view(row);
}
