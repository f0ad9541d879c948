import { and, count, eq, ne, sql } from 'drizzle-orm';
import { rowsOf, type Db } from '../../platform/db/client.js';
import { organizationUsers, partnerUsers } from './schema.js';
import type { PermissionPair } from './permissions.js';
import { loadRoleChain, resolveRole, ROLES_TOPIC } from './role-cache.js';
import type { Keel } from '../../keel.js';
import { InvalidatedCache } from '../../platform/cache.js';
import { USER_TOPIC } from '../identity/sessions.js';
import { users } from '../identity/schema.js';
import { accessError } from './errors.js';

export type Scope = 'system' | 'partner' | 'organization';
export type OrgAccess = 'all' | 'selected' | 'none';

/** A user's association and effective permissions, as /auth/me and the access checks see them. */
export interface AccessSummary {
  scope: Scope | null;
  partnerId: string | null;
  orgId: string | null;
  roleId: string | null;
  orgAccess: OrgAccess | null;
  orgIds: string[];
  /** null: all sites / device groups. */
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
  /** Own role's permissions plus all ancestors'; platform admins: `*:*`. */
  permissions: PermissionPair[];
  /** The role or one of its ancestors has Force MFA on. */
  forceMfa: boolean;
}

export const NO_ACCESS: AccessSummary = {
  scope: null, partnerId: null, orgId: null, roleId: null, orgAccess: null, orgIds: [], siteIds: null, deviceGroupIds: null,
  permissions: [], forceMfa: false,
};

/** Effective permissions of a role: its own and every ancestor's (single-parent chain). Reads the tables. */
export async function roleChainPermissions(db: Db, roleId: string): Promise<{ permissions: PermissionPair[]; forceMfa: boolean }> {
  const resolved = await loadRoleChain(db, roleId);
  return resolved ? { permissions: [...resolved.permissions.pairs], forceMfa: resolved.forceMfa } : { permissions: [], forceMfa: false };
}

export type Membership =
  | { kind: 'partner'; partnerId: string; roleId: string; orgAccess: OrgAccess; orgIds: string[] }
  | { kind: 'organization'; orgId: string; roleId: string; siteIds: string[] | null; deviceGroupIds: string[] | null };

interface MembershipRow {
  kind: 'partner' | 'organization';
  partner_id: string | null;
  org_id: string | null;
  role_id: string;
  org_access: OrgAccess | null;
  org_ids: string[] | null;
  site_ids: string[] | null;
  device_group_ids: string[] | null;
}

/** The user's one association (a partner or one organisation), or null: one query, straight from the tables. */
async function loadMembership(db: Db, userId: string): Promise<Membership | null> {
  // Arrays travel as JSON so both drivers hand back plain arrays.
  const result = await db.execute(sql`
    select 'partner' as kind, partner_id, null::uuid as org_id, role_id, org_access::text as org_access,
           to_jsonb(org_ids) as org_ids, null::jsonb as site_ids, null::jsonb as device_group_ids
    from partner_users where user_id = ${userId}
    union all
    select 'organization', null, org_id, role_id, null, null, to_jsonb(site_ids), to_jsonb(device_group_ids)
    from organization_users where user_id = ${userId}
    limit 1`);
  const row = rowsOf<MembershipRow>(result)[0];
  if (!row) return null;
  if (row.kind === 'partner' && row.partner_id) {
    return { kind: 'partner', partnerId: row.partner_id, roleId: row.role_id, orgAccess: row.org_access ?? 'none', orgIds: row.org_ids ?? [] };
  }
  if (row.org_id) return { kind: 'organization', orgId: row.org_id, roleId: row.role_id, siteIds: row.site_ids, deviceGroupIds: row.device_group_ids };
  return null;
}

/**
 * Per-process cache of memberships (platform/cache.ts, docs/decisions.md "Caches"). Every change of a user's
 * association publishes the user on the identity `user` topic (`sessions.userChanged`,
 * `revokeAllForUser`); an organisation delete publishes `*` on the roles topic. Either clears the entry
 * here and on every other process at once.
 */
/** After a change that rewrites many members' associations (site or group restrictions): drop every cached one. */
export async function publishMembershipsChanged(keel: Keel): Promise<void> {
  await keel.invalidation.publish(USER_TOPIC, '*');
}

/** Creates this process's membership cache, subscribed to invalidations (when the access module is installed). */
export function createMembershipCache(keel: Keel): InvalidatedCache<Membership | null> {
  const cache = new InvalidatedCache<Membership | null>()
    .listen(keel.invalidation, USER_TOPIC)
    .listen(keel.invalidation, ROLES_TOPIC, (roleId) => (roleId === '*' ? '*' : null));
  return cache;
}

/**
 * Where access is read from: a Keel (its main database handle, through the access module's caches)
 * or a database handle, read straight from the tables (a transaction's, so a check sees what the
 * change will change).
 */
export type AccessSource = Keel | Db;

const isKeel = (source: AccessSource): source is Keel => 'modules' in source;

/** The user's one association, or null: cached when read through a Keel, fresh from a database handle. */
export function getMembership(source: AccessSource, userId: string): Promise<Membership | null> {
  if (!isKeel(source)) return loadMembership(source, userId);
  return source.modules.get('access').memberships.get(userId, () => loadMembership(source.db, userId));
}

/**
 * The user's association and effective permissions, inheritance applied. Both the association and
 * the role chain come from per-process caches invalidated at once on every change, across processes.
 */
export async function getAccessSummary(source: AccessSource, user: { id: string; isPlatformAdmin: boolean }): Promise<AccessSummary> {
  if (user.isPlatformAdmin) {
    return { ...NO_ACCESS, scope: 'system', permissions: [{ resource: '*', action: '*' }] };
  }
  const m = await getMembership(source, user.id);
  if (!m) return NO_ACCESS;
  const role = await resolveRole(source, m.roleId);
  const chain = { permissions: role ? [...role.permissions.pairs] : [], forceMfa: role?.forceMfa ?? false };
  if (m.kind === 'partner') {
    return { ...NO_ACCESS, scope: 'partner', partnerId: m.partnerId, roleId: m.roleId, orgAccess: m.orgAccess, orgIds: m.orgIds, ...chain };
  }
  return { ...NO_ACCESS, scope: 'organization', orgId: m.orgId, roleId: m.roleId, siteIds: m.siteIds, deviceGroupIds: m.deviceGroupIds, ...chain };
}

/** Makes a user a member of a partner (register-partner, invitations). Runs in the caller's transaction. */
export async function addPartnerMember(
  db: Db,
  input: { partnerId: string; userId: string; roleId: string; orgAccess?: OrgAccess; orgIds?: string[] },
): Promise<void> {
  await db.insert(partnerUsers).values({
    partnerId: input.partnerId, userId: input.userId, roleId: input.roleId, orgAccess: input.orgAccess ?? 'all', orgIds: input.orgIds ?? [],
  });
}

/** Makes a user a member of an organisation. Runs in the caller's transaction. */
export async function addOrganizationMember(
  db: Db,
  input: { orgId: string; userId: string; roleId: string; siteIds?: string[] | null; deviceGroupIds?: string[] | null },
): Promise<void> {
  await db.insert(organizationUsers).values({
    orgId: input.orgId, userId: input.userId, roleId: input.roleId, siteIds: input.siteIds ?? null, deviceGroupIds: input.deviceGroupIds ?? null,
  });
}

export type Tenant = { partnerId: string } | { orgId: string };

/** True when the role grants `*:*` (directly or through an ancestor). */
export async function isFullAdminRole(db: Db, roleId: string): Promise<boolean> {
  const role = await resolveRole(db, roleId);
  return role?.permissions.has('*', '*') ?? false;
}

/**
 * Active members of a partner or organisation whose role grants `*:*`, optionally leaving one user
 * out. A disabled or invited holder cannot sign in and act, so it does not count: otherwise two
 * administrators disabling each other would each count the other.
 */
export async function countFullAdmins(db: Db, tenant: Tenant, excludeUserId?: string): Promise<number> {
  const rows =
    'partnerId' in tenant
      ? await db
          .select({ roleId: partnerUsers.roleId, n: count() })
          .from(partnerUsers)
          .innerJoin(users, and(eq(users.id, partnerUsers.userId), eq(users.status, 'active')))
          .where(and(eq(partnerUsers.partnerId, tenant.partnerId), excludeUserId ? ne(partnerUsers.userId, excludeUserId) : undefined))
          .groupBy(partnerUsers.roleId)
      : await db
          .select({ roleId: organizationUsers.roleId, n: count() })
          .from(organizationUsers)
          .innerJoin(users, and(eq(users.id, organizationUsers.userId), eq(users.status, 'active')))
          .where(and(eq(organizationUsers.orgId, tenant.orgId), excludeUserId ? ne(organizationUsers.userId, excludeUserId) : undefined))
          .groupBy(organizationUsers.roleId);
  let total = 0;
  for (const r of rows) if (await isFullAdminRole(db, r.roleId)) total += r.n;
  return total;
}

/** Lock class of `lockFullAdmins` (the second key is a hash of `fullAdminLockKey`). */
export const FULL_ADMIN_LOCK = 7_243_002;
export const fullAdminLockKey = (tenant: Tenant): string => ('partnerId' in tenant ? `partner:${tenant.partnerId}` : `organization:${tenant.orgId}`);

/**
 * Serialises every change that can take `*:*` away from a member of this partner or organisation
 * (removing, disabling or re-roling a member; changing or deleting a role its members hold), so two
 * such changes cannot each count the other's administrator as the one that stays. A
 * transaction-scoped advisory lock: take it inside the transaction, before counting; it is released
 * at commit or rollback. Both `assertNotLastFullAdmin` and `keepsFullAdmin` take it themselves.
 */
export async function lockFullAdmins(db: Db, tenant: Tenant): Promise<void> {
  await db.execute(sql`select pg_advisory_xact_lock(${FULL_ADMIN_LOCK}, hashtext(${fullAdminLockKey(tenant)}))`);
}

export const lastAdmin = () => accessError('last_admin');

/**
 * Removing a member or giving them `newRoleId` (null: removal or disabling) must leave the partner or
 * organisation with at least one active `*:*` holder: otherwise 409 `last_admin` (docs/decisions.md "Roles, permissions and seeded roles").
 * For the users module; call it inside the transaction that makes the change, before making it. It
 * takes the tenant's lock (`lockFullAdmins`) first and reads the membership and the count after it,
 * so of two administrators removing each other at once, the second sees the first's removal.
 */
export async function assertNotLastFullAdmin(db: Db, tenant: Tenant, userId: string, newRoleId: string | null): Promise<void> {
  await lockFullAdmins(db, tenant);
  const m = await loadMembership(db, userId);
  if (!m || !(await isFullAdminRole(db, m.roleId))) return;
  // A holder that is not active (disabled, invited) is not counted, so changing it takes nothing away.
  const [target] = await db.select({ status: users.status }).from(users).where(eq(users.id, userId));
  if (target?.status !== 'active') return;
  if (newRoleId && (await isFullAdminRole(db, newRoleId))) return;
  if ((await countFullAdmins(db, tenant, userId)) === 0) throw lastAdmin();
}

/**
 * For changes that act on roles rather than on one member (a role's permissions or parent changed,
 * a role deleted): run `change` inside the transaction under the tenant's lock, and answer 409
 * `last_admin` (the caller's transaction then rolls back) when the tenant had a `*:*` holder before
 * and has none after. A tenant that had none is left as it is.
 */
export async function keepsFullAdmin<T>(db: Db, tenant: Tenant, change: () => Promise<T>): Promise<T> {
  await lockFullAdmins(db, tenant);
  const before = await countFullAdmins(db, tenant);
  const result = await change();
  if (before > 0 && (await countFullAdmins(db, tenant)) === 0) throw lastAdmin();
  return result;
}

/**
 * Sets an organisation member's role (the SSO module's group mapping). Runs in the caller's
 * transaction, after `assertNotLastFullAdmin`; the caller publishes the user's invalidation after commit.
 */
export async function setOrganizationMemberRole(db: Db, orgId: string, userId: string, roleId: string): Promise<void> {
  await db.update(organizationUsers).set({ roleId }).where(and(eq(organizationUsers.orgId, orgId), eq(organizationUsers.userId, userId)));
}

/**
 * Sets a partner member's role and organisation access (partner SSO's group mappings, docs/decisions.md
 * "Partner-level SSO"). Runs in the caller's transaction, after `assertNotLastFullAdmin`; the caller
 * publishes the user's invalidation after commit.
 */
export async function setPartnerMemberAccess(db: Db, partnerId: string, userId: string, input: { roleId: string; orgAccess: OrgAccess; orgIds: string[] }): Promise<void> {
  await db
    .update(partnerUsers)
    .set({ roleId: input.roleId, orgAccess: input.orgAccess, orgIds: input.orgIds })
    .where(and(eq(partnerUsers.partnerId, partnerId), eq(partnerUsers.userId, userId)));
}
