import { and, desc, count, eq, gt, isNull } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction, transactionIf, type Tx } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery, tableReader } from '../../platform/db/raw.js';
import { AppError, notFound, unauthorized, platformError } from '../../platform/http/errors.js';
import { passwordPolicyVerdicts, signInRefusal } from './password-policy.js';
import { auditInsert, writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { Logger } from '../../platform/logger.js';
import { identityOf } from './context.js';
import { csrfMatchesSession } from './csrf.js';
import { identityPorts, type SecondFactorChallenge, type TenantOf } from './ports.js';
import { assertStrongPassword, hashPassword } from './passwords.js';
import { assertHashCapacity, HashQueueFull } from '../../platform/argon2-pool.js';
import { countAuthOutcome } from '../../platform/metrics.js';
import { checkPasswordUnderLockout, releaseReservation, verifyReenteredPassword } from './lockout.js';
import { lastLoginStamped, profileOf, selfProfile, type SelfProfile } from './profile.js';
import { auditSignInRefusal, passwordFailureReason } from './sign-in-audit.js';
import { sessions, users } from './schema.js';
import { ACCESS_TOKEN_SECONDS } from './tokens.js';
import { notifyAuthChange } from './notices.js';
import { identityError } from './errors.js';
import { assertAccountChangeable } from './managed.js';

export const PASSWORD_RESET_PURPOSE = 'password_reset';
export const PASSWORD_RESET_TTL_MS = 3600_000;

export type User = typeof users.$inferSelect;

/** Who is asking, from where: the request facts services need for sessions and audit entries. */
export interface RequestInfo extends AuditRequestInfo {
  ip: string | null;
  userAgent: string | null;
}

export interface TokenAnswer {
  accessToken: string;
  refreshToken: string;
  tokenType: 'Bearer';
  expiresIn: number;
  user: SelfProfile;
}

export const invalidCredentials = () => identityError('invalid_credentials');

const userReader = tableReader(users);
const USER_BY_EMAIL = prepared('user_by_email', `select ${userReader.columns} from users where lower(email) = lower($1)`);

const USER_BY_ID = prepared('user_by_id', `select ${userReader.columns} from users where id = $1`);

/** The account by id; on every refresh: prepared. */
async function findUserById(db: Db, id: string): Promise<User | undefined> {
  const [row] = await rawQuery(db, USER_BY_ID, [id]);
  return row ? userReader.read(row) : undefined;
}

/** The account for an email, case-insensitively (the unique index is on lower(email)). On every login: raw SQL. */
export async function findUserByEmail(db: Db, email: string): Promise<User | undefined> {
  const [row] = await rawQuery(db, USER_BY_EMAIL, [email.trim()]);
  return row ? userReader.read(row) : undefined;
}

/**
 * The flat token answer for a session: an access token whose informational claims carry the user's
 * current scope, the refresh token, and the self-profile (one access summary serves both). A caller
 * holding the access summary or the profile already passes them; one that has just read the user's
 * row passes `row`, and the profile is built from it instead of reading it again.
 */
async function tokenAnswer(
  keel: Keel,
  user: Pick<User, 'id' | 'isPlatformAdmin'>,
  session: { id: string; refreshToken: string; mfa: boolean },
  known: { access?: TenantOf; profile?: SelfProfile; row?: User } = {},
): Promise<TokenAnswer> {
  const access = known.access ?? (await identityPorts(keel).tenantOf(keel, user));
  const accessToken = identityOf(keel).tokens.sign({
    sub: user.id,
    sid: session.id,
    scope: access.scope,
    mfa: session.mfa,
    ...(access.partnerId ? { partnerId: access.partnerId } : {}),
    ...(access.orgId ? { orgId: access.orgId } : {}),
  });
  return {
    accessToken,
    refreshToken: session.refreshToken,
    tokenType: 'Bearer',
    expiresIn: ACCESS_TOKEN_SECONDS,
    user: known.profile ?? (await selfProfile(keel, user.id, { tenant: access, ...(known.row ? { user: known.row } : {}) })),
  };
}

/**
 * Upgrades the caller's session to `mfa: true` after a second factor was just proven (enrolling TOTP
 * or SMS) and answers a fresh pair for it. Only an existing live session of the user is upgraded: a
 * session is created by a sign-in and nothing else, so a caller without one (an API key, a session
 * revoked meanwhile) gets 401 and no tokens.
 */
export async function upgradeSession(keel: Keel, user: User, currentSessionId: string): Promise<TokenAnswer> {
  const identity = identityOf(keel);
  const refreshToken = await identity.sessions.upgradeToMfa(currentSessionId, user.id);
  if (!refreshToken) throw platformError('invalid_token', { message: 'The session has ended: sign in again' });
  await identity.sessions.userChanged(user.id);
  return tokenAnswer(keel, user, { id: currentSessionId, refreshToken, mfa: true });
}

/**
 * Starts a session for a user who has proven who they are (password, second factor, SSO, invitation)
 * and answers with the flat token shape. Records the login and publishes `user.login`. The session,
 * the last-login stamp and the audit entry are one statement; the profile in the answer is built
 * from the row the caller has just read.
 */
export async function signIn(
  keel: Keel,
  user: User,
  info: RequestInfo,
  opts: { mfa: boolean; method: 'password' | 'mfa' | 'sso' | 'passkey' | 'registration'; details?: Record<string, unknown>; policyChecked?: boolean },
): Promise<TokenAnswer> {
  // Every session but an SSO one passes the sign-in policy (enforced SSO: 403 `sso_required`), whatever
  // proved the user (second factor, invitation, registration); password login has asked it already.
  if (opts.method !== 'sso' && !opts.policyChecked) {
    const refusal = await signInRefusal(keel, user);
    if (refusal) throw refusal;
  }
  const identity = identityOf(keel);
  const ports = identityPorts(keel);
  const [access, passkeys] = await Promise.all([ports.tenantOf(keel, user), ports.passkeyCount(keel.db, user)]);
  const sessionId = newId();
  const loggedInAt = clock.now();
  // One statement; a transaction only when a subscriber adds its own writes (webhook deliveries of the
  // user's organisation: a user without one, such as a partner's technician, has none).
  const started = await transactionIf(keel.events.hasSubscribers('user.login', access.orgId), keel.db, async (tx) => {
    const s = await identity.sessions.create(
      tx.db,
      { userId: user.id, ip: info.ip, userAgent: info.userAgent, mfa: opts.mfa },
      {
        id: sessionId,
        at: loggedInAt,
        loginAudit: (first) =>
          auditInsert(
            { ...info, actor: { type: 'user', id: user.id, email: user.email } },
            {
              action: 'user.login',
              partnerId: access.partnerId,
              orgId: access.orgId,
              target: { type: 'user', id: user.id },
              details: { ...opts.details, method: opts.method, mfa: opts.mfa, sessionId },
            },
            first,
          ),
      },
    );
    // lastLoginAt changed: only the cached profile is stale (sessions and membership stay cached).
    tx.afterCommit(() => lastLoginStamped(keel, user.id, loggedInAt));
    await keel.events.publish(tx, 'user.login', access.orgId, {
      userId: user.id,
      email: user.email,
      sessionId,
      method: opts.method === 'registration' ? 'password' : opts.method,
    });
    return s;
  });
  return tokenAnswer(keel, user, { id: sessionId, refreshToken: started.refreshToken, mfa: opts.mfa }, {
    access,
    profile: profileOf({ ...user, lastLoginAt: loggedInAt, failedLoginCount: 0, lockedUntil: null }, passkeys, access),
  });
}

/**
 * Checks email and password under the IP+email limit, the per-IP limit across emails and the account
 * lockout (lockout.ts: a failure is reserved before the verify). Every failure (unknown email, wrong
 * password, locked, invited or disabled account) answers the same 401 after the same Argon2 work, so
 * nothing tells accounts apart. A right password gives its per-IP point back; its lockout reservation
 * stays until the caller signs in (which clears the count) or releases it.
 */
export async function checkPassword(keel: Keel, email: string, password: string, info: RequestInfo): Promise<User> {
  // A full hash queue refuses at once (503 overloaded), before the limits and the lockout count anything.
  assertHashCapacity();
  const { limits } = identityOf(keel);
  const ip = info.ip ?? 'unknown';
  const key = `${ip}|${email.trim().toLowerCase()}`;
  try {
    await Promise.all([limits.login.consume(key), limits.loginIp.consume(ip)]);
  } catch (err) {
    if (err instanceof AppError && err.status === 429) auditSignInRefusal(keel, info, { action: 'auth.rate_limited', reason: 'rate_limited', email, details: { route: 'login' } });
    throw err;
  }
  const seen = { locked: false };
  let user: User | null;
  try {
    user = await checkPasswordUnderLockout(keel, { email }, password, { release: false, onLocked: () => (seen.locked = true) });
  } catch (err) {
    // The queue filled between the check above and the verify: nothing was tried, nothing is spent.
    if (err instanceof HashQueueFull) await Promise.all([limits.login.refund(key), limits.loginIp.refund(ip)]);
    throw err;
  }
  if (!user) {
    countAuthOutcome(keel.metrics, 'login', seen.locked ? 'locked' : 'failure');
    const lockedNow = seen.locked;
    auditSignInRefusal(keel, info, async () => {
      const failure = await passwordFailureReason(keel, email);
      // This failure set the lock: a wrong password, and the lockout it caused.
      const failed = { action: 'user.login.failed', reason: lockedNow ? 'wrong_password' : failure.reason, user: failure.user, email };
      return lockedNow ? [failed, { action: 'user.lockout', reason: 'failed_logins', user: failure.user, email, details: { lockedForSeconds: keel.config.LOCKOUT_SECONDS } }] : [failed];
    });
    throw invalidCredentials();
  }
  await limits.loginIp.refund(ip);
  return user;
}

/**
 * `POST /auth/login`: the password, then the second-factor challenge or the session. Signing in clears
 * the failure count; a challenge (or any failure after the right password) releases the reservation,
 * so earlier failures stay counted until a sign-in completes.
 */
export async function passwordLogin(keel: Keel, email: string, password: string, info: RequestInfo): Promise<TokenAnswer | SecondFactorChallenge> {
  const user = await checkPassword(keel, email, password, info);
  let signedIn = false;
  try {
    await applyPasswordPolicies(keel, user, info);
    const challenge = await identityPorts(keel).secondFactor(keel, user);
    if (challenge) {
      countAuthOutcome(keel.metrics, 'login', 'challenge');
      return challenge;
    }
    const answer = await signIn(keel, user, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, { mfa: false, method: 'password', policyChecked: true });
    signedIn = true;
    countAuthOutcome(keel.metrics, 'login', 'success');
    return answer;
  } finally {
    if (!signedIn) await releaseReservation(keel, user.id);
  }
}

/**
 * The registered password policies (password-policy.ts: the SSO module's enforced SSO) after the right
 * password, or a sign-in passkey (which enforced SSO refuses alike, docs/decisions.md "Sign-in
 * options"): a refusal is answered (403 `sso_required`), an allowed use they flag (break-glass) is audited.
 */
export async function applyPasswordPolicies(keel: Keel, user: User, info: RequestInfo): Promise<void> {
  for (const v of await passwordPolicyVerdicts(keel, user, 'login')) {
    if (v.refuse) throw v.error ?? identityError('password_login_refused');
    if (v.audit) {
      await writeAudit(keel.db, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, {
        action: v.audit.action,
        orgId: v.audit.orgId,
        ...(v.audit.partnerId ? { partnerId: v.audit.partnerId } : {}),
        target: { type: 'user', id: user.id },
        details: v.audit.details,
      });
    }
  }
}

/** Creates a standalone user (no association: scope null). */
export async function register(keel: Keel, input: { email: string; password: string; name: string }, info: RequestInfo): Promise<TokenAnswer> {
  await identityOf(keel).limits.register.consume(info.ip ?? 'unknown');
  await assertStrongPassword(input.password, [input.email, input.name]);
  const passwordHash = await hashPassword(input.password);
  const user = await transaction(keel.db, async (tx) => {
    const created = await insertUser(tx, { email: input.email, name: input.name, passwordHash });
    await writeAudit(tx.db, { ...info, actor: { type: 'user', id: created.id, email: created.email } }, {
      action: 'user.register',
      target: { type: 'user', id: created.id },
    });
    return created;
  });
  return signIn(keel, user, info, { mfa: false, method: 'registration' });
}

/** A new active account with a password; 409 `email_taken` when the address is in use (any case). */
export async function insertUser(tx: Tx, input: { email: string; name: string; passwordHash: string }): Promise<User> {
  const email = input.email.trim();
  const existing = await findUserByEmail(tx.db, email);
  if (existing) throw identityError('email_taken');
  const now = clock.now();
  const rows = await tx.db
    .insert(users)
    .values({ email, name: input.name.trim(), passwordHash: input.passwordHash, status: 'active', passwordChangedAt: now })
    .onConflictDoNothing()
    .returning();
  const user = rows[0];
  if (!user) throw identityError('email_taken');
  return user;
}

export type RefreshOutcome = { kind: 'ok'; answer: TokenAnswer } | { kind: 'raced' } | { kind: 'invalid' } | { kind: 'csrf_failed' };

/**
 * Rotates a refresh token into a new pair; the session keeps its `mfa` flag. A cookie refresh passes
 * its CSRF value, which must be the one bound to the token's session (request.ts) before anything changes.
 */
export async function refresh(keel: Keel, refreshToken: string, csrf?: string): Promise<RefreshOutcome> {
  const accept = csrf === undefined ? undefined : (sessionId: string) => csrfMatchesSession(keel, sessionId, csrf);
  const result = await identityOf(keel).sessions.rotate(refreshToken, accept);
  if (result.kind === 'refused') return { kind: 'csrf_failed' };
  if (result.kind === 'raced') return { kind: 'raced' };
  if (result.kind !== 'ok') return { kind: 'invalid' };
  const user = await findUserById(keel.db, result.userId);
  if (!user || user.status !== 'active') {
    await identityOf(keel).sessions.revoke(keel.db, result.sessionId, 'user_inactive');
    return { kind: 'invalid' };
  }
  return { kind: 'ok', answer: await tokenAnswer(keel, user, { id: result.sessionId, refreshToken: result.refreshToken, mfa: result.mfa }, { row: user }) };
}

/** Revokes every session of the user (docs/specification.md "Sessions and tokens": logout revokes all active tokens) and records it. */
export async function logout(keel: Keel, userId: string, sessionId: string | null, info: RequestInfo): Promise<void> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) return;
  const access = await identityPorts(keel).tenantOf(keel, user);
  await transaction(keel.db, async (tx) => {
    await identityOf(keel).sessions.revokeAllForUser(tx.db, userId, 'logout', tx.afterCommit);
    await writeAudit(tx.db, info, { action: 'user.logout', partnerId: access.partnerId, orgId: access.orgId, target: { type: 'user', id: userId } });
    await keel.events.publish(tx, 'user.logout', access.orgId, { userId, email: user.email, sessionId });
  });
}

/**
 * `POST /auth/forgot-password`: spends the per-IP limit and queues the rest, so the answer comes
 * before, and independently of, the account lookup, the token and the email: the same work on every
 * path up to the answer. The queued work sends a reset link only to an active account with a
 * password; its failures are logged, never answered.
 */
export async function forgotPassword(keel: Keel, email: string, info: RequestInfo): Promise<void> {
  const identity = identityOf(keel);
  await identity.limits.forgotPassword.consume(info.ip ?? 'unknown');
  identity.deferred.run('password_reset_email', info, (log) => sendResetLink(keel, email, log));
}

async function sendResetLink(keel: Keel, email: string, log: Logger): Promise<void> {
  const user = await findUserByEmail(keel.db, email);
  if (user?.status !== 'active') return;
  // A member of an organisation that enforces SSO gets no link (the answer was the same 200 already).
  if ((await passwordPolicyVerdicts(keel, user, 'reset')).some((v) => v.refuse)) return;
  const { token } = await keel.singleUse.create(keel.db, {
    purpose: PASSWORD_RESET_PURPOSE,
    subjectId: user.id,
    ttlMs: PASSWORD_RESET_TTL_MS,
    replaceForSubject: true,
  });
  const link = `${keel.config.publicUrl}/reset-password?token=${encodeURIComponent(token)}`;
  await keel.mailer.send({
    to: user.email,
    subject: 'Reset your Keel password',
    text: `Someone asked to reset the password of your Keel account.\n\nTo choose a new password, open this link within one hour:\n${link}\n\nIf it was not you, ignore this email; your password stays as it is.\n`,
  }, log);
}

/** Sets a new password with a reset token (single use, 1 hour) and revokes every session of the user. */
export async function resetPassword(keel: Keel, token: string, password: string, info: RequestInfo): Promise<void> {
  const invalid = () => platformError('invalid_token', { status: 400, message: 'The reset link is invalid or has expired' });
  const pending = await keel.singleUse.peek(keel.db, PASSWORD_RESET_PURPOSE, token);
  if (!pending?.subjectId) throw invalid();
  const [user] = await keel.db.select().from(users).where(eq(users.id, pending.subjectId));
  if (!user) throw invalid();
  // Check strength before consuming, so a weak choice does not burn the link.
  await assertStrongPassword(password, [user.email, user.name]);
  const passwordHash = await hashPassword(password);
  await transaction(keel.db, async (tx) => {
    const record = await keel.singleUse.consume(tx.db, PASSWORD_RESET_PURPOSE, token);
    if (record?.subjectId !== user.id) throw invalid();
    // Any other outstanding link of the account dies with the old password.
    await keel.singleUse.deleteForSubject(tx.db, PASSWORD_RESET_PURPOSE, user.id);
    await tx.db
      .update(users)
      .set({ passwordHash, passwordChangedAt: clock.now(), failedLoginCount: 0, lockedUntil: null, updatedAt: clock.now() })
      .where(eq(users.id, user.id));
    await identityOf(keel).sessions.revokeAllForUser(tx.db, user.id, 'password_reset', tx.afterCommit);
    await writeAudit(tx.db, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, {
      action: 'user.password.reset',
      target: { type: 'user', id: user.id },
    });
    tx.afterCommit(() => notifyAuthChange(keel, user, 'password_reset', info));
  });
}

/**
 * Changes the password after the current one is re-entered (limited per user, counted by the lockout);
 * every session of the user ends and outstanding reset links are voided.
 */
export async function changePassword(keel: Keel, userId: string, current: string, next: string, info: RequestInfo): Promise<void> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw unauthorized();
  await verifyReenteredPassword(keel, userId, current);
  await assertStrongPassword(next, [user.email, user.name], 'newPassword');
  const passwordHash = await hashPassword(next);
  await transaction(keel.db, async (tx) => {
    await tx.db.update(users).set({ passwordHash, passwordChangedAt: clock.now(), updatedAt: clock.now() }).where(eq(users.id, userId));
    await keel.singleUse.deleteForSubject(tx.db, PASSWORD_RESET_PURPOSE, userId);
    await identityOf(keel).sessions.revokeAllForUser(tx.db, userId, 'password_change', tx.afterCommit);
    await writeAudit(tx.db, info, { action: 'user.password.change', target: { type: 'user', id: userId } });
    tx.afterCommit(() => notifyAuthChange(keel, user, 'password_changed', info));
  });
}

/** `PATCH /users/me`: name and avatarUrl; audited with the changed field names. */
export async function updateProfile(
  keel: Keel,
  userId: string,
  patch: { name?: string | undefined; avatarUrl?: string | null | undefined },
  info: RequestInfo,
): Promise<SelfProfile> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw notFound('User');
  const set: Partial<Pick<User, 'name' | 'avatarUrl'>> = {};
  if (patch.name !== undefined && patch.name.trim() !== user.name) set.name = patch.name.trim();
  if (patch.avatarUrl !== undefined && patch.avatarUrl !== user.avatarUrl) set.avatarUrl = patch.avatarUrl;
  const changes = Object.keys(set);
  if (changes.length > 0) {
    await assertAccountChangeable(keel, keel.db, userId, changes, user.isPlatformAdmin);
    const access = await identityPorts(keel).tenantOf(keel, user);
    await transaction(keel.db, async (tx) => {
      await tx.db.update(users).set({ ...set, updatedAt: clock.now() }).where(eq(users.id, userId));
      await writeAudit(tx.db, info, {
        action: 'user.profile.update',
        partnerId: access.partnerId,
        orgId: access.orgId,
        target: { type: 'user', id: userId },
        changes,
      });
      tx.afterCommit(() => identityOf(keel).sessions.profileChanged(userId));
    });
  }
  return selfProfile(keel, userId);
}

export interface SessionView {
  id: string;
  ipAddress: string | null;
  userAgent: string | null;
  mfa: boolean;
  current: boolean;
  createdAt: string;
  lastUsedAt: string;
  expiresAt: string;
}

/** The user's live sessions, newest first. */
export async function listSessions(
  keel: Keel,
  userId: string,
  currentSessionId: string | null,
  page: number,
  limit: number,
): Promise<{ data: SessionView[]; total: number }> {
  const live = and(eq(sessions.userId, userId), isNull(sessions.revokedAt), gt(sessions.expiresAt, clock.now()));
  const [total] = await keel.db.select({ n: count() }).from(sessions).where(live);
  const rows = await keel.db
    .select()
    .from(sessions)
    .where(live)
    .orderBy(desc(sessions.createdAt))
    .limit(limit)
    .offset((page - 1) * limit);
  return {
    total: total?.n ?? 0,
    data: rows.map((s) => ({
      id: s.id,
      ipAddress: s.ipAddress,
      userAgent: s.userAgent,
      mfa: s.mfa,
      current: s.id === currentSessionId,
      createdAt: s.createdAt.toISOString(),
      lastUsedAt: s.lastUsedAt.toISOString(),
      expiresAt: s.expiresAt.toISOString(),
    })),
  };
}

/** Ends one of the user's own sessions; another user's session is 404. */
export async function revokeOwnSession(keel: Keel, userId: string, sessionId: string, info: RequestInfo): Promise<void> {
  const [row] = await keel.db
    .select({ id: sessions.id })
    .from(sessions)
    .where(and(eq(sessions.id, sessionId), eq(sessions.userId, userId), isNull(sessions.revokedAt)));
  if (!row) throw notFound('Session');
  await transaction(keel.db, async (tx) => {
    await identityOf(keel).sessions.revoke(tx.db, sessionId, 'user_revoked', tx.afterCommit);
    await writeAudit(tx.db, info, { action: 'user.session.revoke', target: { type: 'session', id: sessionId } });
  });
}
