import { and, count, desc, eq, ilike, ne, or, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { notFound } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { organizationUsers, partnerUsers } from '../access/schema.js';
import { visibleOrgCondition, visiblePartnerId, type AccessContext } from '../access/scope.js';
import { assertNotLastFullAdmin, getAccessSummary, getMembership, type Membership, type Tenant } from '../access/service.js';
import { assignableRole } from '../access/roles.js';
import { resolveRole } from '../access/role-cache.js';
import { permissionKey, type PermissionPair } from '../access/permissions.js';
import { users } from '../identity/schema.js';
import { identityOf } from '../identity/context.js';
import { updateAccount } from '../identity/accounts.js';
import { assertAccountChangeable } from '../identity/managed.js';
import { organizations } from '../tenancy/schema.js';
import { invitations } from './schema.js';
import { accessError } from '../access/errors.js';
import { usersError } from './errors.js';

export interface UserView {
  id: string;
  email: string;
  name: string;
  status: 'active' | 'invited' | 'disabled';
  avatarUrl: string | null;
  isPlatformAdmin: boolean;
  scope: 'system' | 'partner' | 'organization' | null;
  partnerId: string | null;
  orgId: string | null;
  roleId: string | null;
  orgAccess: 'all' | 'selected' | 'none' | null;
  orgIds: string[];
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
  mfaEnabled: boolean;
  mfaMethod: 'totp' | 'sms' | 'passkey' | null;
  lastLoginAt: string | null;
  createdAt: string;
}

const selection = {
  user: users,
  pu: {
    partnerId: partnerUsers.partnerId,
    roleId: partnerUsers.roleId,
    orgAccess: partnerUsers.orgAccess,
    orgIds: partnerUsers.orgIds,
  },
  ou: {
    orgId: organizationUsers.orgId,
    roleId: organizationUsers.roleId,
    siteIds: organizationUsers.siteIds,
    deviceGroupIds: organizationUsers.deviceGroupIds,
  },
};

type Row = {
  user: typeof users.$inferSelect;
  pu: { partnerId: string; roleId: string; orgAccess: 'all' | 'selected' | 'none'; orgIds: string[] } | null;
  ou: { orgId: string; roleId: string; siteIds: string[] | null; deviceGroupIds: string[] | null } | null;
};

function view(r: Row): UserView {
  const u = r.user;
  return {
    id: u.id,
    email: u.email,
    name: u.name,
    status: u.status,
    avatarUrl: u.avatarUrl,
    isPlatformAdmin: u.isPlatformAdmin,
    scope: u.isPlatformAdmin ? 'system' : r.pu ? 'partner' : r.ou ? 'organization' : null,
    partnerId: r.pu?.partnerId ?? null,
    orgId: r.ou?.orgId ?? null,
    roleId: r.pu?.roleId ?? r.ou?.roleId ?? null,
    orgAccess: r.pu?.orgAccess ?? null,
    orgIds: r.pu?.orgIds ?? [],
    siteIds: r.ou?.siteIds ?? null,
    deviceGroupIds: r.ou?.deviceGroupIds ?? null,
    mfaEnabled: u.mfaEnabled,
    mfaMethod: u.mfaMethod,
    lastLoginAt: u.lastLoginAt?.toISOString() ?? null,
    createdAt: u.createdAt.toISOString(),
  };
}

/**
 * The users a caller can see (docs/specification.md "Users and invitations": "the users of the current scope"): members of the organisations
 * the access module's `visibleOrgs` gives (the one decision), plus the members of the partner whose
 * own records it shows; for a system caller naming nothing, everyone.
 */
function visibleTo(access: AccessContext): SQL | undefined {
  const orgs = visibleOrgCondition(access, organizationUsers.orgId);
  const partnerId = visiblePartnerId(access);
  return partnerId ? or(eq(partnerUsers.partnerId, partnerId), orgs) : orgs;
}

function baseQuery(db: Db) {
  return db
    .select(selection)
    .from(users)
    .leftJoin(partnerUsers, eq(partnerUsers.userId, users.id))
    .leftJoin(organizationUsers, eq(organizationUsers.userId, users.id))
    .leftJoin(organizations, eq(organizations.id, organizationUsers.orgId));
}

export interface UserFilters {
  page: number;
  limit: number;
  status?: 'active' | 'invited' | 'disabled' | undefined;
  roleId?: string | undefined;
  search?: string | undefined;
}

export async function listUsers(db: Db, access: AccessContext, q: UserFilters): Promise<{ data: UserView[]; total: number }> {
  const where = and(
    visibleTo(access),
    q.status ? eq(users.status, q.status) : undefined,
    q.roleId ? or(eq(partnerUsers.roleId, q.roleId), eq(organizationUsers.roleId, q.roleId)) : undefined,
    q.search ? or(ilike(users.email, `%${escapeLike(q.search)}%`), ilike(users.name, `%${escapeLike(q.search)}%`)) : undefined,
  );
  const [total] = await db
    .select({ n: count() })
    .from(users)
    .leftJoin(partnerUsers, eq(partnerUsers.userId, users.id))
    .leftJoin(organizationUsers, eq(organizationUsers.userId, users.id))
    .leftJoin(organizations, eq(organizations.id, organizationUsers.orgId))
    .where(where);
  const rows = (await baseQuery(db)
    .where(where)
    .orderBy(desc(users.createdAt), desc(users.id))
    .limit(q.limit)
    .offset((q.page - 1) * q.limit)) as Row[];
  return { data: rows.map(view), total: total?.n ?? 0 };
}

function escapeLike(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/** One user the caller can see, or 404 (another tenant's users are never revealed). */
export async function getVisibleUser(db: Db, access: AccessContext, id: string): Promise<UserView> {
  const [row] = (await baseQuery(db).where(and(eq(users.id, id), visibleTo(access)))) as Row[];
  if (!row) throw notFound('User');
  return view(row);
}

export function tenantOf(m: Membership): Tenant {
  return m.kind === 'partner' ? { partnerId: m.partnerId } : { orgId: m.orgId };
}

/** A role may only be given by a caller who holds every permission it grants (the caps of docs/decisions.md "Roles, permissions and seeded roles"). */
export async function assertRoleWithinCaller(db: Db, access: AccessContext, roleId: string): Promise<void> {
  const role = await resolveRole(db, roleId);
  if (!role) throw notFound('Role');
  const missing = access.permissions.missing(role.permissions.pairs);
  if (missing.length > 0) throw privilegeEscalation('You cannot give a role with permissions you do not hold', missing);
}

const privilegeEscalation = (message: string, missing: PermissionPair[]) =>
  accessError('privilege_escalation', { message, details: { missing: missing.map(permissionKey) } });

/**
 * Changing a user (status, name, role, membership, their invitation) needs every permission that user
 * holds now, inheritance applied (the access module's effective permissions, compared with the one
 * matcher), plus `also` (a role about to be given): otherwise 403 `privilege_escalation`. Read
 * straight from the tables when `db` is a transaction, so the check sees what the change will change.
 */
export async function assertCoversUser(
  db: Db,
  access: AccessContext,
  user: { id: string; isPlatformAdmin: boolean },
  also: readonly PermissionPair[] = [],
): Promise<void> {
  const held = await getAccessSummary(db, user);
  const missing = access.permissions.missing([...held.permissions, ...also]);
  if (missing.length > 0) throw privilegeEscalation('You cannot change a user who holds permissions you do not hold', missing);
}

/**
 * Whoever can make someone *become* any member of an organisation (an organisation's SSO provider
 * signs its members in by email, so whoever points it at an identity provider can sign in as each of
 * them) needs what `assertCoversUser` asks for every one of them, whatever their status (a disabled
 * or invited member may be active tomorrow), plus every role in `grants` (the role cap of
 * `assertRoleWithinCaller`): otherwise 403 `privilege_escalation` with `details.missing`. Members are
 * read by role (one statement), and a platform administrator holding a membership there counts as
 * `*:*`, as `getAccessSummary` has it.
 */
export async function assertCoversOrgMembers(db: Db, access: AccessContext, orgId: string, grants: readonly string[] = []): Promise<void> {
  await assertCoversTenantMembers(db, access, { orgId }, grants);
}

/**
 * `assertCoversOrgMembers` for an organisation or a partner: a partner's SSO provider signs in its
 * technicians by email (docs/decisions.md "Partner-level SSO"), so its author must cover every member
 * of the partner the same way.
 */
export async function assertCoversTenantMembers(db: Db, access: AccessContext, tenant: Tenant, grants: readonly string[] = []): Promise<void> {
  const held =
    'orgId' in tenant
      ? await db
          .selectDistinct({ roleId: organizationUsers.roleId, isPlatformAdmin: users.isPlatformAdmin })
          .from(organizationUsers)
          .innerJoin(users, eq(users.id, organizationUsers.userId))
          .where(eq(organizationUsers.orgId, tenant.orgId))
      : await db
          .selectDistinct({ roleId: partnerUsers.roleId, isPlatformAdmin: users.isPlatformAdmin })
          .from(partnerUsers)
          .innerJoin(users, eq(users.id, partnerUsers.userId))
          .where(eq(partnerUsers.partnerId, tenant.partnerId));
  const pairs: PermissionPair[] = [];
  for (const row of held) {
    if (row.isPlatformAdmin) pairs.push({ resource: '*', action: '*' });
    else pairs.push(...((await resolveRole(db, row.roleId))?.permissions.pairs ?? []));
  }
  const members = access.permissions.missing(pairs);
  if (members.length > 0) throw privilegeEscalation(`You cannot configure sign-in for ${'orgId' in tenant ? 'an organization' : 'a partner'} whose members hold permissions you do not hold`, members);
  for (const roleId of new Set(grants)) await assertRoleWithinCaller(db, access, roleId);
}

/** Pending invitations of a user for one partner or organisation (a membership's tenant). */
export function invitationsOfTenant(userId: string, tenant: Tenant): SQL | undefined {
  return and(
    eq(invitations.userId, userId),
    'partnerId' in tenant ? eq(invitations.partnerId, tenant.partnerId) : eq(invitations.orgId, tenant.orgId),
  );
}

export async function targetForChange(db: Db, access: AccessContext, id: string): Promise<{ target: UserView; membership: Membership | null }> {
  const target = await getVisibleUser(db, access, id);
  if (target.id === access.principal.userId) throw usersError('self_change_forbidden');
  if (target.isPlatformAdmin && access.scope !== 'system') throw notFound('User');
  return { target, membership: await getMembership(db, id) };
}

const changes = (o: Record<string, unknown>) => Object.keys(o).filter((k) => o[k] !== undefined);

/** `PATCH /users/:id`: name and status. Disabling ends the user's sessions and API keys at once. */
export async function updateUser(
  keel: Keel,
  access: AccessContext,
  id: string,
  patch: { name?: string | undefined; status?: 'active' | 'disabled' | undefined },
  info: AuditRequestInfo,
): Promise<UserView> {
  const { target, membership } = await targetForChange(keel.db, access, id);
  if (patch.status === 'active' && target.status === 'invited') {
    throw usersError('invitation_pending');
  }
  const set: { name?: string; status?: 'active' | 'disabled' } = {};
  if (patch.name !== undefined && patch.name !== target.name) set.name = patch.name;
  if (patch.status !== undefined && patch.status !== target.status) set.status = patch.status;
  if (Object.keys(set).length === 0) return target;
  await assertAccountChangeable(keel, keel.db, id, Object.keys(set), access.isPlatformAdmin);
  await transaction(keel.db, async (tx) => {
    await assertCoversUser(tx.db, access, target);
    if (set.status === 'disabled' && membership) await assertNotLastFullAdmin(tx.db, tenantOf(membership), id, null);
    // The status changes only from another one: a parallel request that made this change first
    // leaves this one nothing to revoke or record (for the status; a new name is still set).
    const changed = await updateAccount(keel, tx, id, { ...set, updatedAt: clock.now() }, set.status ? ne(users.status, set.status) : undefined);
    let made = set;
    if (!changed) {
      if (set.name === undefined) return;
      made = { name: set.name };
      await updateAccount(keel, tx, id, { ...made, updatedAt: clock.now() });
    }
    if (made.status === 'disabled') await identityOf(keel).sessions.revokeAllForUser(tx.db, id, 'user_disabled', tx.afterCommit);
    await writeAudit(tx.db, info, {
      action: 'user.update',
      partnerId: membership?.kind === 'partner' ? membership.partnerId : access.partnerId,
      orgId: membership?.kind === 'organization' ? membership.orgId : access.orgId,
      target: { type: 'user', id },
      changes: changes(made),
      ...(made.status ? { details: { status: made.status } } : {}),
    });
  });
  return getVisibleUser(keel.db, access, id);
}

/** `DELETE /users/:id`: removes the association; the account stays and can be invited again. */
export async function removeUser(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const { target, membership } = await targetForChange(keel.db, access, id);
  if (!membership) throw notFound('User');
  await transaction(keel.db, async (tx) => {
    await assertCoversUser(tx.db, access, target);
    await assertNotLastFullAdmin(tx.db, tenantOf(membership), id, null);
    // Only the membership read above: a parallel removal that committed first leaves nothing (404,
    // nothing revoked or recorded twice), and a membership made since elsewhere is not this one.
    const removed =
      membership.kind === 'partner'
        ? await tx.db.delete(partnerUsers).where(and(eq(partnerUsers.userId, id), eq(partnerUsers.partnerId, membership.partnerId))).returning({ id: partnerUsers.userId })
        : await tx.db.delete(organizationUsers).where(and(eq(organizationUsers.userId, id), eq(organizationUsers.orgId, membership.orgId))).returning({ id: organizationUsers.userId });
    if (removed.length === 0) throw notFound('User');
    await identityOf(keel).sessions.revokeAllForUser(tx.db, id, 'user_removed', tx.afterCommit);
    // Its pending invitation here goes too: a removed invitee joins again only by a new invitation.
    await tx.db.delete(invitations).where(invitationsOfTenant(id, tenantOf(membership)));
    await writeAudit(tx.db, info, {
      action: 'user.remove',
      partnerId: membership.kind === 'partner' ? membership.partnerId : access.partnerId,
      orgId: membership.kind === 'organization' ? membership.orgId : access.orgId,
      target: { type: 'user', id },
    });
  });
}

/** `POST /users/:id/role`: a role assignable in the user's tenant, within the caller's permissions. */
export async function assignRole(keel: Keel, access: AccessContext, id: string, roleId: string, info: AuditRequestInfo): Promise<UserView> {
  const { target, membership } = await targetForChange(keel.db, access, id);
  if (!membership) throw notFound('User');
  const tenant = tenantOf(membership);
  const role = await assignableRole(keel.db, roleId, tenant);
  if (!role) throw usersError('invalid_role', { details: { fields: [{ path: 'roleId', message: 'is not assignable here' }] } });
  await assertRoleWithinCaller(keel.db, access, roleId);
  await transaction(keel.db, async (tx) => {
    await assertCoversUser(tx.db, access, target);
    await assertNotLastFullAdmin(tx.db, tenant, id, roleId);
    if (membership.kind === 'partner') await tx.db.update(partnerUsers).set({ roleId }).where(eq(partnerUsers.userId, id));
    else await tx.db.update(organizationUsers).set({ roleId }).where(eq(organizationUsers.userId, id));
    // A member who has not accepted yet: the pending invitation grants the new role too.
    await tx.db.update(invitations).set({ roleId }).where(invitationsOfTenant(id, tenant));
    tx.afterCommit(() => identityOf(keel).sessions.userChanged(id));
    await writeAudit(tx.db, info, {
      action: 'user.role.assign',
      partnerId: membership.kind === 'partner' ? membership.partnerId : access.partnerId,
      orgId: membership.kind === 'organization' ? membership.orgId : access.orgId,
      target: { type: 'user', id },
      changes: ['roleId'],
      details: { roleId, previousRoleId: membership.roleId },
    });
  });
  return getVisibleUser(keel.db, access, id);
}
