import { loggableError } from '../../platform/safe-error.js';
import { and, count, desc, eq, gt, inArray, or, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { KeelModule } from '../../platform/module.js';
import { requestLog, type RequestRef } from '../../platform/request-scope.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import type { Limit } from '../../platform/rate-limit.js';
import { notFound, validationError, platformError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { visibleOrgCondition, visiblePartnerId, type AccessContext } from '../access/scope.js';
import { addOrganizationMember, addPartnerMember, assertNotLastFullAdmin, getAccessSummary, getMembership, type Membership, type Tenant } from '../access/service.js';
import { assignableRole } from '../access/roles.js';
import { resolveRole } from '../access/role-cache.js';
import { PermissionSet } from '../access/permissions.js';
import { organizationUsers, partnerUsers } from '../access/schema.js';
import { users } from '../identity/schema.js';
import { identityOf } from '../identity/context.js';
import { createAccount, updateAccount } from '../identity/accounts.js';
import { findUserByEmail, invalidCredentials, signIn, type RequestInfo, type TokenAnswer } from '../identity/service.js';
import { assertStrongPassword, hashPassword } from '../identity/passwords.js';
import { verifyReenteredPassword } from '../identity/lockout.js';
import { signInRefusal } from '../identity/password-policy.js';
import { requireUserPrincipal } from '../access/bearer.js';
import { selfProfile, type SelfProfile } from '../identity/profile.js';
import { deviceGroups, organizations, partners, sites } from '../tenancy/schema.js';
import { enrolledMethods, loginSecondFactor, type MfaChallenge } from '../mfa/login.js';
import { assertCoversUser, assertRoleWithinCaller, getVisibleUser, type UserView } from './service.js';
import { invitations } from './schema.js';
import { accessError } from '../access/errors.js';
import { mfaError } from '../mfa/errors.js';
import { usersError } from './errors.js';

/** Links are valid 7 days (docs/decisions.md "Registration, bootstrap, invitations"). */
export const INVITE_TTL_MS = 7 * 24 * 3600_000;

type InvitationRow = typeof invitations.$inferSelect;

/** Only the SHA-256 of a link's token is stored (the same form the single-use store used for invites). */
const tokenHash = (token: string) => sha256Hex(`invite:${token}`);

export interface InviteInput {
  email: string;
  name: string;
  roleId: string;
  siteIds?: string[] | null | undefined;
  deviceGroupIds?: string[] | null | undefined;
  orgAccess?: 'all' | 'selected' | 'none' | undefined;
  orgIds?: string[] | undefined;
}

/** The membership an invitation grants; stored with the invitation for accounts that join on accept. */
type Grant =
  | { kind: 'organization'; orgId: string; roleId: string; siteIds: string[] | null; deviceGroupIds: string[] | null }
  | { kind: 'partner'; partnerId: string; roleId: string; orgAccess: 'all' | 'selected' | 'none'; orgIds: string[] };

async function grantFor(keel: Keel, access: AccessContext, input: InviteInput): Promise<Grant> {
  if (access.orgId) {
    if (input.orgAccess !== undefined || input.orgIds !== undefined) {
      throw validationError([{ path: 'orgAccess', message: 'applies only to partner-level invitations (leave orgId out)' }]);
    }
    for (const [field, list] of [['siteIds', input.siteIds], ['deviceGroupIds', input.deviceGroupIds]] as const) {
      if (list && list.length === 0) throw validationError([{ path: field, message: 'must name at least one, or be left out for all' }]);
    }
    const orgId = access.orgId;
    if (input.siteIds?.length) {
      const found = await keel.db.select({ id: sites.id }).from(sites).where(and(eq(sites.orgId, orgId), inArray(sites.id, input.siteIds)));
      if (found.length !== new Set(input.siteIds).size) throw validationError([{ path: 'siteIds', message: 'names a site outside the organization' }]);
    }
    if (input.deviceGroupIds?.length) {
      const found = await keel.db
        .select({ id: deviceGroups.id })
        .from(deviceGroups)
        .where(and(eq(deviceGroups.orgId, orgId), inArray(deviceGroups.id, input.deviceGroupIds)));
      if (found.length !== new Set(input.deviceGroupIds).size) {
        throw validationError([{ path: 'deviceGroupIds', message: 'names a device group outside the organization' }]);
      }
    }
    return { kind: 'organization', orgId, roleId: input.roleId, siteIds: input.siteIds ?? null, deviceGroupIds: input.deviceGroupIds ?? null };
  }
  if (!access.partnerId) throw accessError('org_required');
  if (input.siteIds !== undefined || input.deviceGroupIds !== undefined) {
    throw validationError([{ path: 'siteIds', message: 'applies only to organization invitations (name orgId)' }]);
  }
  if (!input.orgAccess) throw validationError([{ path: 'orgAccess', message: 'is required for a partner-level invitation (all, selected or none)' }]);
  const orgIds = input.orgAccess === 'selected' ? [...new Set(input.orgIds ?? [])] : [];
  if (input.orgAccess === 'selected') {
    if (orgIds.length === 0) throw validationError([{ path: 'orgIds', message: 'must name at least one organization when orgAccess is selected' }]);
    const found = await keel.db
      .select({ id: organizations.id })
      .from(organizations)
      .where(and(eq(organizations.partnerId, access.partnerId), inArray(organizations.id, orgIds)));
    if (found.length !== orgIds.length) throw validationError([{ path: 'orgIds', message: 'names an organization outside the partner' }]);
  }
  return { kind: 'partner', partnerId: access.partnerId, roleId: input.roleId, orgAccess: input.orgAccess, orgIds };
}

/** The name of the partner or organisation an invitation is for (null when it is gone). */
async function invitedToName(db: Db, where: { orgId: string | null; partnerId: string | null }): Promise<string | null> {
  if (where.orgId) return (await db.select({ name: organizations.name }).from(organizations).where(eq(organizations.id, where.orgId)))[0]?.name ?? null;
  if (where.partnerId) return (await db.select({ name: partners.name }).from(partners).where(eq(partners.id, where.partnerId)))[0]?.name ?? null;
  return null;
}

async function sendInvite(keel: Keel, to: string, token: string, inviter: string | null | undefined, tenantName: string | null, request: RequestRef): Promise<void> {
  const log = requestLog(keel.log, request);
  const link = `${keel.config.publicUrl}/accept-invite?token=${encodeURIComponent(token)}`;
  const where = tenantName ? `${tenantName} on Keel` : 'Keel';
  try {
    await keel.mailer.send({
      to,
      subject: `You are invited to ${where}`,
      text: `${inviter ?? 'An administrator'} invited you to ${where}.\n\nTo accept, open this link within 7 days and choose your password:\n${link}\n\nIf you did not expect this, ignore this email.\n`,
    }, log);
  } catch (err) {
    log.error({ error: loggableError(err) }, 'invitation email could not be sent');
  }
}

/** The partner or organisation an invitation's grant is for; null when it has been deleted since. */
function tenantOfInvitation(inv: InvitationRow): Tenant | null {
  if (inv.scope === 'partner') return inv.partnerId ? { partnerId: inv.partnerId } : null;
  return inv.orgId ? { orgId: inv.orgId } : null;
}

function sameTenant(m: Membership, inv: InvitationRow): boolean {
  return m.kind === 'partner' ? inv.scope === 'partner' && inv.partnerId === m.partnerId : inv.scope === 'organization' && inv.orgId === m.orgId;
}

function grantColumns(grant: Grant) {
  return grant.kind === 'partner'
    ? { scope: 'partner' as const, partnerId: grant.partnerId, orgId: null, roleId: grant.roleId, orgAccess: grant.orgAccess, orgIds: grant.orgIds, siteIds: null, deviceGroupIds: null }
    : { scope: 'organization' as const, partnerId: null, orgId: grant.orgId, roleId: grant.roleId, orgAccess: null, orgIds: null, siteIds: grant.siteIds, deviceGroupIds: grant.deviceGroupIds };
}

function tenantCondition(grant: Grant): SQL | undefined {
  return grant.kind === 'partner' ? eq(invitations.partnerId, grant.partnerId) : eq(invitations.orgId, grant.orgId);
}

export interface InviteLimits {
  /** Invitation emails to one address (invite, re-invite, resend) per hour. */
  perInvitee: Limit;
  /** `resend-invite` calls by one inviter per hour. */
  resendsPerInviter: Limit;
}

const inviteLimits = (keel: Keel): InviteLimits => keel.modules.get('users').invitations;

/** The users module's per-process state: its limits. */
export interface Users {
  invitations: InviteLimits;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    users: Users;
  }
}

/** Installs the users module (its invitation limits, defined once per Keel). It runs no job. */
export function installUsers(keel: Keel): KeelModule<Users> {
  return {
    handle: {
      invitations: {
        perInvitee: keel.limits.define('invite-emails', keel.config.INVITE_EMAILS_PER_INVITEE_LIMIT, 3600),
        resendsPerInviter: keel.limits.define('invite-resends', keel.config.INVITE_RESENDS_PER_INVITER_LIMIT, 3600),
      },
    },
  };
}

const inviteeKey = (email: string) => email.trim().toLowerCase();


/** The grant of an invitation as the API shows it (one scope's fields set, the other's empty). */
function grantView(inv: InvitationRow) {
  const partner = inv.scope === 'partner';
  return {
    scope: partner ? ('partner' as const) : ('organization' as const),
    partnerId: partner ? inv.partnerId : null,
    orgId: partner ? null : inv.orgId,
    roleId: inv.roleId,
    orgAccess: partner ? inv.orgAccess : null,
    orgIds: partner ? (inv.orgIds ?? []) : [],
    siteIds: partner ? null : inv.siteIds,
    deviceGroupIds: partner ? null : inv.deviceGroupIds,
  };
}

/**
 * The answer about an account that existed before it was invited: the same fields a new invitee's
 * answer has, filled only from what the inviter gave and the invitation (D9). Its `id` is the
 * invitation's: the account's own id (a UUIDv7, which carries its creation time) is not revealed
 * before the account joins.
 */
function invitedView(inv: InvitationRow, name: string): UserView {
  return {
    id: inv.id,
    email: inv.email,
    name,
    status: 'invited',
    avatarUrl: null,
    isPlatformAdmin: false,
    ...grantView(inv),
    mfaEnabled: false,
    mfaMethod: null,
    lastLoginAt: null,
    createdAt: inv.createdAt.toISOString(),
  };
}

/** Serialises changes to one account's invitations and membership (invite, accept, revoke) on PostgreSQL. */
async function lockUser(db: Db, userId: string): Promise<void> {
  await db.execute(sql`select id from users where id = ${userId} for update`);
}

/**
 * `POST /users/invite`: a new account is created `invited` with its membership; an account that
 * already exists joins when it accepts. Either way the invitation is a record of its own (grant,
 * inviter, expiry, token hash); inviting the same account to the same partner or organisation again
 * replaces the earlier one. An account already in this scope, or associated elsewhere, is 409.
 */
export async function inviteUser(keel: Keel, access: AccessContext, input: InviteInput, info: AuditRequestInfo): Promise<UserView> {
  const grant = await grantFor(keel, access, input);
  const target = grant.kind === 'partner' ? { partnerId: grant.partnerId } : { orgId: grant.orgId };
  if (!(await assignableRole(keel.db, input.roleId, target))) {
    throw usersError('invalid_role', { details: { fields: [{ path: 'roleId', message: 'is not assignable here' }] } });
  }
  await assertRoleWithinCaller(keel.db, access, input.roleId);
  const email = input.email.trim();
  const name = input.name.trim();
  const associated = (m: Membership | null, u: { isPlatformAdmin: boolean }) => {
    const inScope = m && ((m.kind === 'partner' && grant.kind === 'partner' && m.partnerId === grant.partnerId) || (m.kind === 'organization' && grant.kind === 'organization' && m.orgId === grant.orgId));
    if (inScope) throw usersError('user_exists');
    if (m || u.isPlatformAdmin) throw usersError('user_associated_elsewhere');
  };
  const existing = await findUserByEmail(keel.db, email);
  if (existing) associated(await getMembership(keel, existing.id), existing);
  await inviteLimits(keel).perInvitee.consume(inviteeKey(email));
  const token = randomToken();
  const invitation = await transaction(keel.db, async (tx) => {
    let id: string | undefined;
    if (existing) {
      id = existing.id;
      // Under the account's lock: it may have joined somewhere since the check above.
      await lockUser(tx.db, id);
      associated(await getMembership(tx.db, id), existing);
    } else {
      id = (await createAccount(tx, { email, name, status: 'invited', passwordHash: null }))?.id;
      if (!id) throw usersError('user_exists');
      if (grant.kind === 'partner') await addPartnerMember(tx.db, { ...grant, userId: id });
      else await addOrganizationMember(tx.db, { ...grant, userId: id });
    }
    // A re-invite replaces this partner's or organisation's earlier invitation of the account.
    await tx.db.delete(invitations).where(and(eq(invitations.userId, id), tenantCondition(grant)));
    const now = clock.now();
    const [row] = await tx.db
      .insert(invitations)
      .values({
        userId: id,
        email,
        ...grantColumns(grant),
        invitedBy: access.principal.userId,
        tokenHash: tokenHash(token),
        expiresAt: new Date(now.getTime() + INVITE_TTL_MS),
        createdAt: now,
      })
      .returning();
    if (!row) throw new Error('invitation insert returned nothing');
    await writeAudit(tx.db, info, {
      action: 'user.invite',
      partnerId: grant.kind === 'partner' ? grant.partnerId : access.partnerId,
      orgId: grant.kind === 'organization' ? grant.orgId : null,
      // An account that existed is named by the invitation until it joins (its id is not revealed, D9).
      target: existing ? { type: 'invitation', id: row.id } : { type: 'user', id },
      details: { email, roleId: input.roleId, invitationId: row.id },
    });
    return row;
  });
  await sendInvite(keel, email, token, access.principal.email, await invitedToName(keel.db, invitation), info);
  if (existing) return invitedView(invitation, name);
  return getVisibleUser(keel.db, access, invitation.userId);
}

/**
 * The invitations a caller can see: those of the organisations the access module's `visibleOrgs`
 * gives (the one decision, D4), plus the partner-level ones of the partner whose own records it
 * shows; for a system caller naming nothing, all. (The same reach as the user list.)
 */
function invitationsVisibleTo(access: AccessContext): SQL | undefined {
  const orgs = visibleOrgCondition(access, invitations.orgId);
  const partnerId = visiblePartnerId(access);
  return partnerId ? or(eq(invitations.partnerId, partnerId), orgs) : orgs;
}

export interface InvitationView {
  id: string;
  /** The invitee's user id when the caller can already see that user (a member here); else null. */
  userId: string | null;
  email: string;
  scope: 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
  roleId: string | null;
  orgAccess: 'all' | 'selected' | 'none' | null;
  orgIds: string[];
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
  invitedBy: string | null;
  status: 'pending' | 'expired';
  createdAt: string;
  expiresAt: string;
}

function visibleInvitations(db: Db) {
  return db
    .select({ inv: invitations, puUser: partnerUsers.userId, ouUser: organizationUsers.userId })
    .from(invitations)
    .leftJoin(partnerUsers, and(eq(partnerUsers.userId, invitations.userId), eq(partnerUsers.partnerId, invitations.partnerId)))
    .leftJoin(organizationUsers, and(eq(organizationUsers.userId, invitations.userId), eq(organizationUsers.orgId, invitations.orgId)));
}

type VisibleRow = { inv: InvitationRow; puUser: string | null; ouUser: string | null };

function invitationView({ inv, puUser, ouUser }: VisibleRow): InvitationView {
  return {
    id: inv.id,
    userId: memberHere({ inv, puUser, ouUser }),
    email: inv.email,
    ...grantView(inv),
    invitedBy: inv.invitedBy,
    status: inv.expiresAt.getTime() > clock.nowMs() ? 'pending' : 'expired',
    createdAt: inv.createdAt.toISOString(),
    expiresAt: inv.expiresAt.toISOString(),
  };
}

/** `GET /users/invitations`: the pending (and expired, not yet replaced or revoked) invitations in the scope, newest first. */
export async function listInvitations(db: Db, access: AccessContext, q: { page: number; limit: number }): Promise<{ data: InvitationView[]; total: number }> {
  const where = invitationsVisibleTo(access);
  const [total] = await db.select({ n: count() }).from(invitations).where(where);
  const rows = await visibleInvitations(db)
    .where(where)
    .orderBy(desc(invitations.createdAt), desc(invitations.id))
    .limit(q.limit)
    .offset((q.page - 1) * q.limit);
  return { data: rows.map(invitationView), total: total?.n ?? 0 };
}

/** One invitation the caller can see, by its id or (`byUser`) its invitee's user id; else null. */
async function findVisibleInvitation(db: Db, access: AccessContext, id: string, byUser: boolean): Promise<VisibleRow | null> {
  const match = byUser ? or(eq(invitations.id, id), eq(invitations.userId, id)) : eq(invitations.id, id);
  const rows = await visibleInvitations(db)
    .where(and(match, invitationsVisibleTo(access)))
    .orderBy(desc(invitations.createdAt))
    .limit(1);
  return rows[0] ?? null;
}

/** Audit target of an invitation: its invitee when already visible here (a member), else the invitation (D9). */
function auditTarget(row: VisibleRow): { type: string; id: string } {
  const userId = memberHere(row);
  return userId ? { type: 'user', id: userId } : { type: 'invitation', id: row.inv.id };
}

/** The invitee's id when it is a member of the invitation's partner or organisation (visible in the user list). */
const memberHere = (row: VisibleRow): string | null => row.puUser ?? row.ouUser;

async function loadUser(db: Db, id: string) {
  const [user] = await db.select().from(users).where(eq(users.id, id));
  return user;
}

/** 409 `invitation_invalid`: the invitation can no longer be honoured; `reason` says why. */
const invitationInvalid = (reason: string, message: string) =>
  usersError('invitation_invalid', { message: `This invitation is no longer valid: ${message}. Ask for a new invitation.`, details: { reason } });

/**
 * Re-validates an invitation's grant against the tables as they are now (at accept, and at resend
 * with the resender as the new inviter): the partner or organisation still exists; when the account
 * joins by it, the role is still assignable there and the named sites, device groups and
 * organisations still exist; and the inviter (still active) could still make it: reaches that
 * partner or organisation with full access, holds `users:invite` and every permission of the role
 * given (`roleId`: the membership's when the account already has one there). Else 409.
 */
async function assertGrantValid(db: Db, inv: InvitationRow, opts: { joining: boolean; roleId: string | null; inviterId: string | null }): Promise<Tenant> {
  const tenant = tenantOfInvitation(inv);
  if (!tenant) {
    throw invitationInvalid(inv.scope === 'partner' ? 'partner_deleted' : 'organization_deleted', `the ${inv.scope === 'partner' ? 'partner' : 'organization'} no longer exists`);
  }
  let partnerOfTenant: string | null;
  if ('orgId' in tenant) {
    const [org] = await db.select({ partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, tenant.orgId));
    if (!org) throw invitationInvalid('organization_deleted', 'the organization no longer exists');
    partnerOfTenant = org.partnerId;
  } else {
    const [p] = await db.select({ id: partners.id }).from(partners).where(eq(partners.id, tenant.partnerId));
    if (!p) throw invitationInvalid('partner_deleted', 'the partner no longer exists');
    partnerOfTenant = p.id;
  }
  const roleId = opts.roleId;
  if (!roleId || !(await assignableRole(db, roleId, tenant))) throw invitationInvalid('role_unavailable', 'the role it gives no longer exists here');
  if (opts.joining) {
    const missing = async (table: typeof sites | typeof deviceGroups, ids: string[] | null) => {
      if (!ids || ids.length === 0 || !('orgId' in tenant)) return false;
      const found = await db.select({ id: table.id }).from(table).where(and(eq(table.orgId, tenant.orgId), inArray(table.id, ids)));
      return found.length !== new Set(ids).size;
    };
    if ((await missing(sites, inv.siteIds)) || (await missing(deviceGroups, inv.deviceGroupIds))) {
      throw invitationInvalid('restrictions_changed', 'a site or device group it names no longer exists');
    }
    if ('partnerId' in tenant && inv.orgAccess === 'selected' && inv.orgIds?.length) {
      const found = await db
        .select({ id: organizations.id })
        .from(organizations)
        .where(and(eq(organizations.partnerId, tenant.partnerId), inArray(organizations.id, inv.orgIds)));
      if (found.length !== new Set(inv.orgIds).size) throw invitationInvalid('restrictions_changed', 'an organization it names no longer exists');
    }
  }
  const inviter = opts.inviterId ? await loadUser(db, opts.inviterId) : undefined;
  const lost = () => invitationInvalid('inviter_lacks_access', 'the person who invited you no longer has the access to grant it');
  if (!inviter || inviter.status !== 'active') throw lost();
  const held = await getAccessSummary(db, inviter);
  const reaches =
    held.scope === 'system' ||
    (held.scope === 'partner' && held.orgAccess === 'all' && held.partnerId !== null && held.partnerId === partnerOfTenant) ||
    (held.scope === 'organization' && 'orgId' in tenant && held.orgId === tenant.orgId);
  const role = await resolveRole(db, roleId);
  const perms = new PermissionSet(held.permissions);
  if (!reaches || !role || !perms.has('users', 'invite') || perms.missing(role.permissions.pairs).length > 0) throw lost();
  return tenant;
}

/**
 * `POST /users/resend-invite {userId}`: a new link (valid 7 days) replaces the old one. `userId` is
 * the invitee's user id, or the id the invite answered for an account that already existed (the
 * invitation's). The resender must cover the invitee's current permissions and the role the
 * invitation gives, and becomes its inviter. Limited per invitee address and per resender.
 */
export async function resendInvite(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const found = await findVisibleInvitation(keel.db, access, id, true);
  if (!found) {
    await getVisibleUser(keel.db, access, id); // 404 for a user the caller cannot see
    throw usersError('not_invited');
  }
  const inv = found.inv;
  const user = await loadUser(keel.db, inv.userId);
  if (!user) throw notFound('User');
  // A member the caller sees may be told it is disabled; an account that existed is not told apart (D9).
  if (user.status === 'disabled' && memberHere(found)) throw usersError('user_disabled');
  const membership = await getMembership(keel, user.id);
  const roleId = membership && sameTenant(membership, inv) ? membership.roleId : inv.roleId;
  // The resender re-issues the grant: it must hold the invitee's permissions and the role's.
  const role = roleId ? await resolveRole(keel, roleId) : null;
  await assertCoversUser(keel.db, access, user, role?.permissions.pairs ?? []);
  await assertGrantValid(keel.db, inv, { joining: !membership, roleId, inviterId: access.principal.userId });
  const limits = inviteLimits(keel);
  await limits.resendsPerInviter.consume(access.principal.userId);
  await limits.perInvitee.consume(inviteeKey(inv.email));
  const token = randomToken();
  await transaction(keel.db, async (tx) => {
    const now = clock.now();
    const updated = await tx.db
      .update(invitations)
      .set({ tokenHash: tokenHash(token), expiresAt: new Date(now.getTime() + INVITE_TTL_MS), invitedBy: access.principal.userId })
      .where(eq(invitations.id, inv.id))
      .returning({ id: invitations.id });
    if (updated.length === 0) throw notFound('Invitation');
    await writeAudit(tx.db, info, {
      action: 'user.invite.resend',
      partnerId: inv.partnerId ?? access.partnerId,
      orgId: inv.orgId,
      target: auditTarget(found),
      details: { invitationId: inv.id },
    });
  });
  await sendInvite(keel, inv.email, token, access.principal.email, await invitedToName(keel.db, inv), info);
}

/**
 * `DELETE /users/invitations/:id`: the link stops working. An account the invitation created, and
 * that never accepted, leaves the scope with it (the account stays, as after DELETE /users/:id).
 * The caller must cover the invitee's current permissions.
 */
export async function revokeInvitation(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const found = await findVisibleInvitation(keel.db, access, id, false);
  if (!found) throw notFound('Invitation');
  const inv = found.inv;
  const user = await loadUser(keel.db, inv.userId);
  if (!user) throw notFound('Invitation');
  await transaction(keel.db, async (tx) => {
    await lockUser(tx.db, user.id);
    await assertCoversUser(tx.db, access, user);
    const deleted = await tx.db.delete(invitations).where(eq(invitations.id, inv.id)).returning({ id: invitations.id });
    if (deleted.length === 0) throw notFound('Invitation');
    const membership = await getMembership(tx.db, user.id);
    const leaves = user.status === 'invited' && membership !== null && sameTenant(membership, inv);
    if (membership && leaves) {
      const tenant: Tenant = membership.kind === 'partner' ? { partnerId: membership.partnerId } : { orgId: membership.orgId };
      await assertNotLastFullAdmin(tx.db, tenant, user.id, null);
      if (membership.kind === 'partner') await tx.db.delete(partnerUsers).where(eq(partnerUsers.userId, user.id));
      else await tx.db.delete(organizationUsers).where(eq(organizationUsers.userId, user.id));
      tx.afterCommit(() => identityOf(keel).sessions.userChanged(user.id));
    }
    await writeAudit(tx.db, info, {
      action: 'user.invite.revoke',
      partnerId: inv.partnerId ?? access.partnerId,
      orgId: inv.orgId,
      target: auditTarget(found),
      details: { invitationId: inv.id, email: inv.email, removedFromScope: leaves },
    });
  });
}

const invalidInvite = () => platformError('invalid_token', { status: 400, message: 'The invitation is invalid or has expired' });

/** What an invitation link shows before it is accepted: who is invited, and to which partner or organisation. */
export interface InvitationPreview {
  email: string;
  invitedTo: { kind: 'partner' | 'organization'; name: string | null };
  expiresAt: string;
}

/**
 * `POST /auth/invitation {token}`: the invited address and the partner or organisation of a valid,
 * unexpired invitation. Any other token (unknown, expired, accepted, revoked, of a disabled account)
 * gets the very answer `accept-invite` gives it (400 `invalid_token`), so nothing is learnt without
 * the link. The token travels in the body, never in a URL (docs/decisions.md "Console details").
 */
export async function previewInvitation(keel: Keel, token: string): Promise<InvitationPreview> {
  const [found] = await keel.db
    .select({ inv: invitations, status: users.status })
    .from(invitations)
    .innerJoin(users, eq(users.id, invitations.userId))
    .where(and(eq(invitations.tokenHash, tokenHash(token)), gt(invitations.expiresAt, clock.now())));
  if (!found || found.status === 'disabled') throw invalidInvite();
  const { inv } = found;
  return {
    email: inv.email,
    invitedTo: { kind: inv.scope === 'partner' ? 'partner' : 'organization', name: await invitedToName(keel.db, { orgId: inv.scope === 'organization' ? inv.orgId : null, partnerId: inv.scope === 'partner' ? inv.partnerId : null }) },
    expiresAt: inv.expiresAt.toISOString(),
  };
}

/**
 * The answer when a signed-in account accepts (no new session: its own session now carries the
 * membership), or when the organisation joined enforces SSO (`ssoRequired`: accepted, no session;
 * the account signs in through its identity provider).
 */
export interface InviteAccepted {
  message: string;
  user: SelfProfile;
  ssoRequired?: true;
}

/**
 * `POST /auth/accept-invite {token, password?, name?}`.
 * - A new account sets its password, becomes `active`, joins and is signed in.
 * - An existing account proves itself with its current password (limited per user, counted by the
 *   lockout). Without a second factor it joins and is signed in. With one, it is NOT joined yet: the
 *   answer is the login MFA challenge; after `/auth/mfa/verify` (or the passkey verify) the account
 *   accepts again with `Authorization: Bearer <its access token>` and `{token}`.
 * - With a Bearer access token (of the invited account; `mfa: true` when it has a second factor) the
 *   session proves the account: no password, no new session; the answer is `{message, user}`.
 * The invitation is re-validated inside the transaction that consumes it (409 `invitation_invalid`).
 */
export async function acceptInvite(
  keel: Keel,
  input: { token: string; password?: string | undefined; name?: string | undefined },
  info: RequestInfo,
  authorization?: string,
): Promise<TokenAnswer | MfaChallenge | InviteAccepted> {
  const principal = authorization ? await requireUserPrincipal(keel, authorization) : null;
  const hash = tokenHash(input.token);
  // The invitation and its account in one statement, so both come from one snapshot: a parallel
  // accept that commits in between cannot make this one see the invitation with the account
  // already active (it would then check the new password as the current one, a 401).
  const [found] = await keel.db
    .select({ pending: invitations, user: users })
    .from(invitations)
    .innerJoin(users, eq(users.id, invitations.userId))
    .where(and(eq(invitations.tokenHash, hash), gt(invitations.expiresAt, clock.now())));
  if (!found) throw invalidInvite();
  const { pending, user } = found;
  if (user.status === 'disabled') throw invalidInvite();
  const newAccount = user.status === 'invited';
  let passwordHash: string | null = null;
  if (principal) {
    if (principal.userId !== user.id) throw usersError('invitation_other_account');
    if (newAccount) throw invalidInvite(); // an account that never accepted has no session; never clear a password here
    if (keel.config.ENABLE_2FA && !principal.mfa && (await enrolledMethods(keel, user)).length > 0) {
      throw mfaError('mfa_required', { message: 'Sign in with your second factor before joining' });
    }
  } else if (newAccount && (await signInRefusal(keel, user))) {
    // The invitation's organisation enforces SSO (the invited account is a member already): the
    // account is accepted without a password (it could never sign in with one) and gets no session.
  } else {
    if (!input.password) throw validationError([{ path: 'password', message: 'is required' }]);
    if (newAccount) {
      await assertStrongPassword(input.password, [user.email, input.name ?? user.name]);
      passwordHash = await hashPassword(input.password);
    } else {
      // Limited per user and counted by the account lockout, like every password re-entry.
      await verifyReenteredPassword(keel, user.id, input.password, invalidCredentials);
      // An account with a second factor joins only once that is proven too (then with its session).
      const challenge = await loginSecondFactor(keel, user);
      if (challenge) return challenge;
    }
  }
  const actor = { ...info, actor: { type: 'user' as const, id: user.id, email: user.email } };
  await transaction(keel.db, async (tx) => {
    await lockUser(tx.db, user.id);
    const [inv] = await tx.db
      .delete(invitations)
      .where(and(eq(invitations.id, pending.id), eq(invitations.tokenHash, hash), gt(invitations.expiresAt, clock.now())))
      .returning();
    if (!inv) throw invalidInvite();
    const membership = await getMembership(tx.db, user.id);
    if (membership && !sameTenant(membership, inv)) {
      throw usersError('user_associated_elsewhere', { message: 'This account already belongs to a partner or organization' });
    }
    await assertGrantValid(tx.db, inv, { joining: !membership, roleId: membership?.roleId ?? inv.roleId, inviterId: inv.invitedBy });
    if (!membership) {
      // Also an invitee removed before accepting and invited again: the grant is the membership.
      if (inv.scope === 'partner' && inv.partnerId && inv.roleId) {
        await addPartnerMember(tx.db, { partnerId: inv.partnerId, userId: user.id, roleId: inv.roleId, orgAccess: inv.orgAccess ?? 'none', orgIds: inv.orgIds ?? [] });
      } else if (inv.orgId && inv.roleId) {
        await addOrganizationMember(tx.db, { orgId: inv.orgId, userId: user.id, roleId: inv.roleId, siteIds: inv.siteIds, deviceGroupIds: inv.deviceGroupIds });
      }
    }
    if (newAccount) {
      const now = clock.now();
      await updateAccount(
        keel,
        tx,
        user.id,
        { passwordHash, status: 'active', ...(passwordHash ? { passwordChangedAt: now } : {}), updatedAt: now, ...(input.name ? { name: input.name.trim() } : {}) },
        sql`${users.status} = 'invited'`,
      );
    }
    // One association per account: its other invitations can no longer be accepted.
    await tx.db.delete(invitations).where(eq(invitations.userId, user.id));
    // The membership made above (the account's own change is published by updateAccount).
    tx.afterCommit(() => identityOf(keel).sessions.userChanged(user.id));
    await writeAudit(tx.db, actor, {
      action: 'user.invite.accept',
      partnerId: inv.scope === 'partner' ? inv.partnerId : null,
      orgId: inv.scope === 'organization' ? inv.orgId : null,
      target: { type: 'user', id: user.id },
      details: { invitationId: inv.id },
    });
  });
  if (principal) return { message: 'Invitation accepted', user: await selfProfile(keel, user.id) };
  const fresh = await loadUser(keel.db, user.id);
  if (!fresh) throw invalidInvite();
  // Every session passes the sign-in policy: under enforced SSO the invitation is accepted, and the
  // account signs in through the organisation's identity provider (no tokens here).
  if (await signInRefusal(keel, fresh)) {
    return { message: 'Invitation accepted. Your organization requires single sign-on: sign in through your identity provider', user: await selfProfile(keel, user.id), ssoRequired: true };
  }
  return signIn(keel, fresh, actor, { mfa: false, method: 'password' });
}
