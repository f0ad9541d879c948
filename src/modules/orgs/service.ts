import { loggableError } from '../../platform/safe-error.js';
import { and, asc, count, eq, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { requestLog } from '../../platform/request-scope.js';
import { clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/client.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { organizationUsers, partnerUsers, roles } from '../access/schema.js';
import { publishRoleChange } from '../access/role-cache.js';
import { ORGS_TOPIC } from '../access/org-cache.js';
import { publishMembershipsChanged } from '../access/service.js';
import { groupListFilter, mustReachOrg, siteListFilter, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import { deviceGroups, organizations, partners, sites, type TenantSettings } from '../tenancy/schema.js';
import { createOrganization, createPartner, groupView, mergeSettings, orgView, partnerView, siteView, type Paging } from '../tenancy/service.js';
import { accessError } from '../access/errors.js';
import { orgsError } from './errors.js';

/*
 * Administration of partners, organisations, sites and device groups under the caller's access
 * (docs/decisions.md "Endpoints Keel adds"): who may see and change which tenant, and what an organisation's
 * deletion takes with it (memberships, roles). The tenant records themselves and their settings are
 * the tenancy module's, below access (docs/architecture.md).
 */

type PartnerRow = typeof partners.$inferSelect;
type SiteRow = typeof sites.$inferSelect;
type GroupRow = typeof deviceGroups.$inferSelect;

const offset = (q: Paging) => (q.page - 1) * q.limit;

// ---------------------------------------------------------------------------------------------
// Partners

export async function listPartners(db: Db, q: Paging) {
  const [rows, [total]] = await Promise.all([
    db.select().from(partners).orderBy(asc(partners.name), asc(partners.id)).limit(q.limit).offset(offset(q)),
    db.select({ n: count() }).from(partners),
  ]);
  return { data: rows.map(partnerView), total: total?.n ?? 0 };
}

const slugTaken = () => orgsError('partner_slug_taken');
const isUniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return e.code === '23505' || e.cause?.code === '23505';
};

export async function createPartnerAudited(keel: Keel, input: { name: string; slug?: string | undefined; settings?: TenantSettings | undefined }, info: AuditRequestInfo) {
  const row = await transaction(keel.db, async (tx) => {
    const p = await createPartner(tx.db, { name: input.name, slug: input.slug, ...(input.settings ? { settings: mergeSettings({}, input.settings) } : {}) });
    if (!p) throw slugTaken();
    await writeAudit(tx.db, info, { action: 'partner.create', partnerId: p.id, target: { type: 'partner', id: p.id }, details: { name: p.name, slug: p.slug } });
    return p;
  });
  return partnerView(row);
}

/** A partner the caller may see: any for system, its own for partner users; otherwise 404. */
async function reachPartner(db: Db, access: AccessContext, id: string): Promise<PartnerRow> {
  if (access.scope === 'organization' || (access.scope === 'partner' && access.partnerId !== id)) throw notFound('Partner');
  const [row] = await db.select().from(partners).where(eq(partners.id, id));
  if (!row) throw notFound('Partner');
  return row;
}

export async function getPartner(db: Db, access: AccessContext, id: string) {
  return partnerView(await reachPartner(db, access, id));
}

/** Partner-wide: the route's guard requires full organisation access of partner users (`fullOrgAccess`). */
export async function updatePartner(keel: Keel, access: AccessContext, id: string, input: { name?: string | undefined; slug?: string | undefined; settings?: TenantSettings | undefined }, info: AuditRequestInfo) {
  if (input.slug !== undefined) {
    // Checked first so a taken slug answers 409 before the transaction (the unique index decides a race, below).
    const [holder] = await keel.db.select({ id: partners.id }).from(partners).where(eq(partners.slug, input.slug));
    if (holder && holder.id !== id) throw slugTaken();
  }
  const row = await transaction(keel.db, async (tx) => {
    const existing = await reachPartner(tx.db, access, id);
    const changes: string[] = [];
    const set: Partial<typeof partners.$inferInsert> = { updatedAt: clock.now() };
    if (input.name !== undefined && input.name !== existing.name) {
      set.name = input.name;
      changes.push('name');
    }
    if (input.slug !== undefined && input.slug !== existing.slug) {
      set.slug = input.slug;
      changes.push('slug');
    }
    if (input.settings !== undefined) {
      set.settings = mergeSettings(existing.settings, input.settings);
      changes.push(...settingsChanges(input.settings));
    }
    const [updated] = await tx.db.update(partners).set(set).where(eq(partners.id, id)).returning();
    if (!updated) throw notFound('Partner');
    await writeAudit(tx.db, info, { action: 'partner.update', partnerId: id, target: { type: 'partner', id }, changes, ...(set.slug ? { details: { from: existing.slug, to: set.slug } } : {}) });
    return updated;
  }).catch((err: unknown) => {
    if (isUniqueViolation(err)) throw slugTaken();
    throw err;
  });
  return partnerView(row);
}

/**
 * Deletes a partner (the route admits platform administrators only): 409 `partner_not_empty` while
 * organisations remain (delete them first). Its members' associations, its roles and API keys go with it;
 * the accounts stay. The partner row is locked first and `createOrg` share-locks it, so an
 * organisation created meanwhile is either counted here or answered 404 once the partner is gone.
 */
export async function deletePartner(keel: Keel, id: string, info: AuditRequestInfo): Promise<void> {
  await transaction(keel.db, async (tx) => {
    const [partner] = await tx.db.select().from(partners).where(eq(partners.id, id)).for('update');
    if (!partner) throw notFound('Partner');
    const [orgsLeft] = await tx.db.select({ n: count() }).from(organizations).where(eq(organizations.partnerId, id));
    const organizationsLeft = orgsLeft?.n ?? 0;
    if (organizationsLeft > 0) {
      throw orgsError('partner_not_empty', { message: `The partner still has ${organizationsLeft} organization(s): delete them first`, details: { organizations: organizationsLeft } });
    }
    const [members] = await tx.db.select({ n: count() }).from(partnerUsers).where(eq(partnerUsers.partnerId, id));
    // Members first (their role references are RESTRICT), then the partner's roles, then the rest by cascade.
    await tx.db.delete(partnerUsers).where(eq(partnerUsers.partnerId, id));
    await tx.db.update(roles).set({ parentRoleId: null }).where(sql`${roles.parentRoleId} in (select ${roles.id} from ${roles} where ${roles.partnerId} = ${id})`);
    await tx.db.delete(roles).where(eq(roles.partnerId, id));
    await tx.db.delete(partners).where(eq(partners.id, id));
    await writeAudit(tx.db, info, { action: 'partner.delete', partnerId: id, target: { type: 'partner', id }, details: { name: partner.name, members: members?.n ?? 0 } });
    tx.afterCommit(() => publishRoleChange(keel, '*'));
    tx.afterCommit(() => publishMembershipsChanged(keel));
  }, (err) => requestLog(keel.log, info).error({ error: loggableError(err) }, 'role or membership invalidation failed'));
}

function settingsChanges(s: TenantSettings): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(s.security ?? {})) {
    if (k === 'allowedMfaMethods' && v && typeof v === 'object') out.push(...Object.keys(v).map((m) => `settings.security.allowedMfaMethods.${m}`));
    else out.push(`settings.security.${k}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Organisations

/** Organisations the caller sees (access/scope `visibleOrgs`: the one decision). */
export async function listOrgs(db: Db, access: AccessContext, q: Paging) {
  const where = visibleOrgCondition(access, organizations.id);
  const [rows, [total]] = await Promise.all([
    db.select().from(organizations).where(where).orderBy(asc(organizations.name), asc(organizations.id)).limit(q.limit).offset(offset(q)),
    db.select({ n: count() }).from(organizations).where(where),
  ]);
  return { data: rows.map(orgView), total: total?.n ?? 0 };
}

/** Partner-wide: the route's guard requires full organisation access of partner users (`fullOrgAccess`). */
export async function createOrg(keel: Keel, access: AccessContext, input: { name: string; settings?: TenantSettings | undefined }, info: AuditRequestInfo) {
  if (access.scope === 'organization') throw accessError('scope_forbidden', { message: 'Organization users cannot create organizations' });
  // Partner users create under their partner; system callers under the partner they name, which
  // they must (docs/decisions.md "Organisations belong to a partner").
  const partnerId = access.partnerId;
  if (partnerId === null) throw validationError([{ path: 'partnerId', message: 'is required: an organisation belongs to a partner (name it in the body or the query)' }]);
  const row = await transaction(keel.db, async (tx) => {
    // The partner row is shared-locked: a concurrent deletePartner (which locks it for update) either
    // counts this organisation or has removed the partner, which is then a 404, never a foreign-key error.
    if (partnerId && !(await tx.db.select({ id: partners.id }).from(partners).where(eq(partners.id, partnerId)).for('share'))[0]) throw notFound('Partner');
    const org = await createOrganization(tx.db, { name: input.name, partnerId, ...(input.settings ? { settings: mergeSettings({}, input.settings) } : {}) });
    await writeAudit(tx.db, info, { action: 'organization.create', partnerId, orgId: org.id, target: { type: 'organization', id: org.id }, details: { name: org.name } });
    return org;
  });
  return orgView(row);
}

export async function getOrg(db: Db, access: AccessContext, id: string) {
  return orgView(await mustReachOrg(db, access, id));
}

export async function updateOrg(keel: Keel, access: AccessContext, id: string, input: { name?: string | undefined; settings?: TenantSettings | undefined }, info: AuditRequestInfo) {
  const row = await transaction(keel.db, async (tx) => {
    const existing = await mustReachOrg(tx.db, access, id);
    const changes: string[] = [];
    const set: Partial<typeof organizations.$inferInsert> = { updatedAt: clock.now() };
    if (input.name !== undefined && input.name !== existing.name) {
      set.name = input.name;
      changes.push('name');
    }
    if (input.settings !== undefined) {
      set.settings = mergeSettings(existing.settings, input.settings);
      changes.push(...settingsChanges(input.settings));
    }
    const [updated] = await tx.db.update(organizations).set(set).where(eq(organizations.id, id)).returning();
    if (!updated) throw notFound('Organization');
    await writeAudit(tx.db, info, { action: 'organization.update', partnerId: updated.partnerId, orgId: id, target: { type: 'organization', id }, changes });
    return updated;
  });
  return orgView(row);
}

/**
 * Deletes an organisation and everything it owns (sites, groups, devices, its custom roles, its
 * members' associations; the accounts stay). Organisation users cannot delete their own organisation.
 * Partner-wide: the route's guard requires full organisation access of partner users (`fullOrgAccess`).
 */
export async function deleteOrg(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  if (access.scope === 'organization') throw accessError('scope_forbidden', { message: 'Organization users cannot delete their organization' });
  await transaction(keel.db, async (tx) => {
    const org = await mustReachOrg(tx.db, access, id);
    const [members] = await tx.db.select({ n: count() }).from(organizationUsers).where(eq(organizationUsers.orgId, id));
    // Members first (their role references are RESTRICT), then the organisation's roles, then the rest by cascade.
    await tx.db.delete(organizationUsers).where(eq(organizationUsers.orgId, id));
    await tx.db.update(roles).set({ parentRoleId: null }).where(eq(roles.orgId, id));
    await tx.db.delete(roles).where(eq(roles.orgId, id));
    await tx.db
      .update(partnerUsers)
      .set({ orgIds: sql`array_remove(${partnerUsers.orgIds}, ${id}::uuid)` })
      .where(sql`${id}::uuid = any(${partnerUsers.orgIds})`);
    await tx.db.delete(organizations).where(eq(organizations.id, id));
    await writeAudit(tx.db, info, {
      action: 'organization.delete', partnerId: org.partnerId, orgId: id, target: { type: 'organization', id }, details: { name: org.name, members: members?.n ?? 0 },
    });
    tx.afterCommit(() => publishRoleChange(keel, '*'));
    tx.afterCommit(() => keel.invalidation.publish(ORGS_TOPIC, id));
  }, (err) => requestLog(keel.log, info).error({ error: loggableError(err) }, 'role or organisation invalidation failed'));
}

// ---------------------------------------------------------------------------------------------
// Sites

export async function listSites(db: Db, access: AccessContext, orgId: string, q: Paging) {
  const where = and(eq(sites.orgId, orgId), siteListFilter(access, sites.id));
  const [rows, [total]] = await Promise.all([
    db.select().from(sites).where(where).orderBy(asc(sites.name), asc(sites.id)).limit(q.limit).offset(offset(q)),
    db.select({ n: count() }).from(sites).where(where),
  ]);
  return { data: rows.map(siteView), total: total?.n ?? 0 };
}

export async function createSite(keel: Keel, access: AccessContext, orgId: string, input: { name: string }, info: AuditRequestInfo) {
  const row = await transaction(keel.db, async (tx) => {
    const org = await mustReachOrg(tx.db, access, orgId);
    const now = clock.now();
    const [site] = await tx.db.insert(sites).values({ orgId: org.id, name: input.name, createdAt: now, updatedAt: now }).returning();
    if (!site) throw new Error('site insert returned nothing');
    await writeAudit(tx.db, info, { action: 'site.create', partnerId: org.partnerId, orgId: org.id, target: { type: 'site', id: site.id }, details: { name: site.name } });
    return site;
  });
  return siteView(row);
}

/** A site in an organisation the caller reaches, within its site restriction; otherwise 404. */
export async function reachSite(db: Db, access: AccessContext, id: string): Promise<{ site: SiteRow; partnerId: string | null }> {
  const [site] = await db.select().from(sites).where(eq(sites.id, id));
  if (!site) throw notFound('Site');
  const org = await mustReachOrg(db, access, site.orgId).catch(() => null);
  if (!org || (access.siteIds !== null && !access.siteIds.includes(site.id))) throw notFound('Site');
  return { site, partnerId: org.partnerId };
}

export async function updateSite(keel: Keel, access: AccessContext, id: string, input: { name?: string | undefined }, info: AuditRequestInfo) {
  const row = await transaction(keel.db, async (tx) => {
    const { site, partnerId } = await reachSite(tx.db, access, id);
    const changes = input.name !== undefined && input.name !== site.name ? ['name'] : [];
    const [updated] = await tx.db
      .update(sites)
      .set({ ...(input.name !== undefined ? { name: input.name } : {}), updatedAt: clock.now() })
      .where(eq(sites.id, id))
      .returning();
    if (!updated) throw notFound('Site');
    await writeAudit(tx.db, info, { action: 'site.update', partnerId, orgId: site.orgId, target: { type: 'site', id }, changes });
    return updated;
  });
  return siteView(row);
}

export async function deleteSite(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  await transaction(keel.db, async (tx) => {
    const { site, partnerId } = await reachSite(tx.db, access, id);
    // Restrictions naming the site lose it; a restriction never widens into "all sites".
    await tx.db
      .update(organizationUsers)
      .set({ siteIds: sql`array_remove(${organizationUsers.siteIds}, ${id}::uuid)` })
      .where(sql`${id}::uuid = any(${organizationUsers.siteIds})`);
    await tx.db.delete(sites).where(eq(sites.id, id));
    await writeAudit(tx.db, info, { action: 'site.delete', partnerId, orgId: site.orgId, target: { type: 'site', id }, details: { name: site.name } });
    tx.afterCommit(() => publishMembershipsChanged(keel));
  });
}

// ---------------------------------------------------------------------------------------------
// Device groups

export async function listGroups(db: Db, access: AccessContext, orgId: string, q: Paging) {
  const where = and(eq(deviceGroups.orgId, orgId), groupListFilter(access, { id: deviceGroups.id, siteId: deviceGroups.siteId }));
  const [rows, [total]] = await Promise.all([
    db.select().from(deviceGroups).where(where).orderBy(asc(deviceGroups.name), asc(deviceGroups.id)).limit(q.limit).offset(offset(q)),
    db.select({ n: count() }).from(deviceGroups).where(where),
  ]);
  return { data: rows.map(groupView), total: total?.n ?? 0 };
}

/** A group's site must be a site of the same organisation that the caller may see. */
async function checkGroupSite(db: Db, access: AccessContext, orgId: string, siteId: string | null): Promise<void> {
  if (siteId === null) return;
  const [site] = await db.select({ id: sites.id }).from(sites).where(and(eq(sites.id, siteId), eq(sites.orgId, orgId)));
  if (!site || (access.siteIds !== null && !access.siteIds.includes(siteId))) {
    throw orgsError('invalid_site');
  }
}

export async function createGroup(keel: Keel, access: AccessContext, orgId: string, input: { name: string; siteId?: string | null | undefined }, info: AuditRequestInfo) {
  const row = await transaction(keel.db, async (tx) => {
    const org = await mustReachOrg(tx.db, access, orgId);
    const siteId = input.siteId ?? null;
    await checkGroupSite(tx.db, access, org.id, siteId);
    const now = clock.now();
    const [group] = await tx.db.insert(deviceGroups).values({ orgId: org.id, siteId, name: input.name, createdAt: now, updatedAt: now }).returning();
    if (!group) throw new Error('device group insert returned nothing');
    await writeAudit(tx.db, info, {
      action: 'device_group.create', partnerId: org.partnerId, orgId: org.id, target: { type: 'device_group', id: group.id }, details: { name: group.name, siteId },
    });
    return group;
  });
  return groupView(row);
}

export async function reachGroup(db: Db, access: AccessContext, id: string): Promise<{ group: GroupRow; partnerId: string | null }> {
  const [group] = await db.select().from(deviceGroups).where(eq(deviceGroups.id, id));
  if (!group) throw notFound('Device group');
  const org = await mustReachOrg(db, access, group.orgId).catch(() => null);
  const hidden =
    (access.deviceGroupIds !== null && !access.deviceGroupIds.includes(group.id)) ||
    (access.siteIds !== null && group.siteId !== null && !access.siteIds.includes(group.siteId));
  if (!org || hidden) throw notFound('Device group');
  return { group, partnerId: org.partnerId };
}

/**
 * What else moves with a group that moves to another site, in the same transaction (the devices and
 * enrolment keys of the agents module above, handed in by the route): answers how many devices moved.
 */
export type GroupSiteFollower = (tx: Tx, groupId: string, siteId: string | null) => Promise<number>;

export async function updateGroup(
  keel: Keel, access: AccessContext, id: string, input: { name?: string | undefined; siteId?: string | null | undefined }, info: AuditRequestInfo,
  follow?: GroupSiteFollower,
) {
  const row = await transaction(keel.db, async (tx) => {
    const { group, partnerId } = await reachGroup(tx.db, access, id);
    const changes: string[] = [];
    const set: Partial<typeof deviceGroups.$inferInsert> = { updatedAt: clock.now() };
    if (input.name !== undefined && input.name !== group.name) {
      set.name = input.name;
      changes.push('name');
    }
    if (input.siteId !== undefined && input.siteId !== group.siteId) {
      await checkGroupSite(tx.db, access, group.orgId, input.siteId);
      set.siteId = input.siteId;
      changes.push('siteId');
    }
    const [updated] = await tx.db.update(deviceGroups).set(set).where(eq(deviceGroups.id, id)).returning();
    if (!updated) throw notFound('Device group');
    const devicesMoved = follow && changes.includes('siteId') ? await follow(tx, id, updated.siteId) : 0;
    await writeAudit(tx.db, info, {
      action: 'device_group.update', partnerId, orgId: group.orgId, target: { type: 'device_group', id }, changes, ...(devicesMoved > 0 ? { details: { devicesMoved } } : {}),
    });
    return updated;
  });
  return groupView(row);
}

export async function deleteGroup(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  await transaction(keel.db, async (tx) => {
    const { group, partnerId } = await reachGroup(tx.db, access, id);
    await tx.db
      .update(organizationUsers)
      .set({ deviceGroupIds: sql`array_remove(${organizationUsers.deviceGroupIds}, ${id}::uuid)` })
      .where(sql`${id}::uuid = any(${organizationUsers.deviceGroupIds})`);
    await tx.db.delete(deviceGroups).where(eq(deviceGroups.id, id));
    await writeAudit(tx.db, info, { action: 'device_group.delete', partnerId, orgId: group.orgId, target: { type: 'device_group', id }, details: { name: group.name } });
    tx.afterCommit(() => publishMembershipsChanged(keel));
  });
}

