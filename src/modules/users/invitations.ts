import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { AppError, badRequest, conflict, validationError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { AccessContext } from '../access/scope.js';
import { addOrganizationMember, addPartnerMember, getMembership } from '../access/service.js';
import { assignableRole } from '../access/roles.js';
import { users } from '../identity/schema.js';
import { identityOf } from '../identity/context.js';
import { findUserByEmail, invalidCredentials, signIn, type RequestInfo, type TokenAnswer } from '../identity/service.js';
import { assertStrongPassword, hashPassword } from '../identity/passwords.js';
import { verifyReenteredPassword } from '../identity/lockout.js';
import { deviceGroups, organizations, sites } from '../tenancy/schema.js';
import { loginSecondFactor, type MfaChallenge } from '../mfa/login.js';
import { assertRoleWithinCaller, getVisibleUser, type UserView } from './service.js';

export const INVITE_PURPOSE = 'invite';
export const INVITE_TTL_MS = 7 * 24 * 3600_000;

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
  if (!access.partnerId) throw badRequest('org_required', 'Organization context is required: name the organization with orgId');
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

async function sendInvite(keel: Keel, to: string, token: string, inviter: string | null | undefined): Promise<void> {
  const link = `${keel.config.publicUrl}/accept-invite?token=${encodeURIComponent(token)}`;
  try {
    await keel.mailer.send({
      to,
      subject: 'You are invited to Keel',
      text: `${inviter ?? 'An administrator'} invited you to Keel.\n\nTo accept, open this link within 7 days and choose your password:\n${link}\n\nIf you did not expect this, ignore this email.\n`,
    });
  } catch (err) {
    keel.log.error({ err: err instanceof Error ? err.message : String(err) }, 'invitation email could not be sent');
  }
}

/**
 * `POST /users/invite`: a new account is created `invited` with its membership; an existing account
 * with no association joins when it accepts. One already in this scope, or associated elsewhere, is 409.
 */
export async function inviteUser(keel: Keel, access: AccessContext, input: InviteInput, info: AuditRequestInfo): Promise<UserView> {
  const grant = await grantFor(keel, access, input);
  const target = grant.kind === 'partner' ? { partnerId: grant.partnerId } : { orgId: grant.orgId };
  if (!(await assignableRole(keel.db, input.roleId, target))) {
    throw new AppError(400, 'invalid_role', 'That role cannot be given to a member of this scope', { fields: [{ path: 'roleId', message: 'is not assignable here' }] });
  }
  await assertRoleWithinCaller(keel.db, access, input.roleId);
  const existing = await findUserByEmail(keel.db, input.email);
  if (existing) {
    const m = await getMembership(keel.db, existing.id);
    const inScope = m && ((m.kind === 'partner' && grant.kind === 'partner' && m.partnerId === grant.partnerId) || (m.kind === 'organization' && grant.kind === 'organization' && m.orgId === grant.orgId));
    if (inScope) throw conflict('user_exists', 'User already exists in this scope');
    if (m || existing.isPlatformAdmin) throw conflict('user_associated_elsewhere', 'This email belongs to an account of another partner or organization');
    if (existing.status === 'disabled') throw conflict('user_disabled', 'This account is disabled');
  }
  const { userId, token } = await transaction(keel.db, async (tx) => {
    let id = existing?.id;
    if (!id) {
      const rows = await tx.db
        .insert(users)
        .values({ email: input.email.trim(), name: input.name.trim(), status: 'invited', passwordHash: null })
        .onConflictDoNothing()
        .returning({ id: users.id });
      id = rows[0]?.id;
      if (!id) throw conflict('user_exists', 'User already exists in this scope');
      if (grant.kind === 'partner') await addPartnerMember(tx.db, { ...grant, userId: id });
      else await addOrganizationMember(tx.db, { ...grant, userId: id });
    }
    const created = await keel.singleUse.create(tx.db, {
      purpose: INVITE_PURPOSE,
      subjectId: id,
      ttlMs: INVITE_TTL_MS,
      data: { grant, invitedBy: access.principal.userId },
      replaceForSubject: true,
    });
    await writeAudit(tx.db, info, {
      action: 'user.invite',
      partnerId: grant.kind === 'partner' ? grant.partnerId : access.partnerId,
      orgId: grant.kind === 'organization' ? grant.orgId : null,
      target: { type: 'user', id },
      details: { email: input.email.trim(), roleId: input.roleId, existingAccount: Boolean(existing) },
    });
    return { userId: id, token: created.token };
  });
  await sendInvite(keel, input.email.trim(), token, access.principal.email);
  if (existing) {
    return { ...(await getVisibleUser(keel.db, { ...access, scope: 'system', partnerId: null, orgId: null }, userId)), status: 'invited' };
  }
  return getVisibleUser(keel.db, access, userId);
}

/** `POST /users/resend-invite`: a new link replaces the old one; only for users still `invited`. */
export async function resendInvite(keel: Keel, access: AccessContext, userId: string, info: AuditRequestInfo): Promise<void> {
  const user = await getVisibleUser(keel.db, access, userId);
  if (user.status !== 'invited') throw conflict('not_invited', 'Only users with a pending invitation can be sent a new one');
  const pending = await keel.singleUse.findForSubject(keel.db, INVITE_PURPOSE, userId);
  const token = await transaction(keel.db, async (tx) => {
    const created = await keel.singleUse.create(tx.db, {
      purpose: INVITE_PURPOSE,
      subjectId: userId,
      ttlMs: INVITE_TTL_MS,
      data: pending?.data ?? {},
      replaceForSubject: true,
    });
    await writeAudit(tx.db, info, {
      action: 'user.invite.resend',
      partnerId: user.partnerId ?? access.partnerId,
      orgId: user.orgId,
      target: { type: 'user', id: userId },
    });
    return created.token;
  });
  await sendInvite(keel, user.email, token, access.principal.email);
}

const invalidInvite = () => new AppError(400, 'invalid_token', 'The invitation is invalid or has expired');

/**
 * `POST /auth/accept-invite`: a new account sets its password and becomes `active`; an existing
 * account proves itself with its current password, keeps it, and joins. Signs the user in.
 */
export async function acceptInvite(
  keel: Keel,
  input: { token: string; password: string; name?: string | undefined },
  info: RequestInfo,
): Promise<TokenAnswer | MfaChallenge> {
  const pending = await keel.singleUse.peek(keel.db, INVITE_PURPOSE, input.token);
  if (!pending?.subjectId) throw invalidInvite();
  const [user] = await keel.db.select().from(users).where(eq(users.id, pending.subjectId));
  if (!user || user.status === 'disabled') throw invalidInvite();
  const joining = user.status === 'active';
  let passwordHash: string | null = null;
  if (joining) {
    // Limited per user and counted by the account lockout, like every password re-entry.
    await verifyReenteredPassword(keel, user.id, input.password, invalidCredentials);
  } else {
    await assertStrongPassword(input.password, [user.email, input.name ?? user.name]);
    passwordHash = await hashPassword(input.password);
  }
  const grant = (pending.data as { grant?: Grant }).grant;
  await transaction(keel.db, async (tx) => {
    const consumed = await keel.singleUse.consume(tx.db, INVITE_PURPOSE, input.token);
    if (consumed?.subjectId !== user.id) throw invalidInvite();
    if (joining) {
      if (!grant) throw invalidInvite();
      if (await getMembership(tx.db, user.id)) throw conflict('user_associated_elsewhere', 'This account already belongs to a partner or organization');
      if (grant.kind === 'partner') await addPartnerMember(tx.db, { ...grant, userId: user.id });
      else await addOrganizationMember(tx.db, { ...grant, userId: user.id });
    } else {
      const now = clock.now();
      await tx.db
        .update(users)
        .set({ passwordHash, status: 'active', passwordChangedAt: now, updatedAt: now, ...(input.name ? { name: input.name.trim() } : {}) })
        .where(and(eq(users.id, user.id), sql`${users.status} = 'invited'`));
    }
    tx.afterCommit(() => identityOf(keel).sessions.userChanged(user.id));
    await writeAudit(tx.db, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, {
      action: 'user.invite.accept',
      partnerId: grant?.kind === 'partner' ? grant.partnerId : null,
      orgId: grant?.kind === 'organization' ? grant.orgId : null,
      target: { type: 'user', id: user.id },
    });
  });
  const [fresh] = await keel.db.select().from(users).where(eq(users.id, user.id));
  if (!fresh) throw invalidInvite();
  // An existing account keeps its second factor: it finishes signing in like a login does.
  const challenge = await loginSecondFactor(keel, fresh);
  if (challenge) return challenge;
  return signIn(keel, fresh, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, { mfa: false, method: 'password' });
}
