import { loggableError } from '../../platform/safe-error.js';
import { and, asc, count, eq, lt } from 'drizzle-orm';
import type {
  AuthenticationResponseJSON,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
} from '@simplewebauthn/server';

import type { Keel } from '../../keel.js';
import { requestLog } from '../../platform/request-scope.js';
import { countAuthOutcome } from '../../platform/metrics.js';
import { clock } from '../../platform/clock.js';
import { sha256Hex } from '../../platform/crypto.js';
import { transaction } from '../../platform/db/transaction.js';
import { AppError, notFound, unauthorized } from '../../platform/http/errors.js';
import { writeAudit } from '../audit/service.js';
import { getAccessSummary } from '../access/service.js';
import { identityOf } from '../identity/context.js';
import { updateAccount } from '../identity/accounts.js';
import { users } from '../identity/schema.js';
import { signIn, type RequestInfo, type TokenAnswer, type User } from '../identity/service.js';
import { invalidTempToken, loadUser, mfaDisabled, mfaLimits } from './common.js';
import { verifyReenteredPassword } from '../identity/lockout.js';
import { MFA_LOGIN_PURPOSE } from './login.js';
import { auditSignInRefusal } from '../identity/sign-in-audit.js';
import { assertMethodAllowed, forceMfaSatisfiedUnder, securityPolicy, type MfaMethod } from './policy.js';
import { hashRecoveryCode, newRecoveryCodes } from './recovery.js';
import { passkeys } from './schema.js';
import { smsEnrolled } from './sms.js';
import { requireRelyingParty } from './webauthn.js';
import { lazy } from '../../platform/lazy.js';
import { notifyAuthChange } from '../identity/notices.js';
import { mfaError } from './errors.js';

/** Loaded on the first passkey request: the library costs ~300 ms of start-up otherwise. */
export const webauthn = lazy(() => import('@simplewebauthn/server'));

export const WEBAUTHN_REGISTER_PURPOSE = 'webauthn_register';
export const WEBAUTHN_LOGIN_PURPOSE = 'webauthn_login';
/** WebAuthn challenges are held 5 minutes and consumed atomically on use (docs/specification.md "MFA"). */
export const WEBAUTHN_CHALLENGE_TTL_MS = 5 * 60_000;

type PasskeyRow = typeof passkeys.$inferSelect;

export interface PasskeyView {
  id: string;
  name: string;
  credentialId: string;
  transports: string[];
  aaguid: string | null;
  backupEligible: boolean;
  backupState: boolean;
  signIn: boolean;
  createdAt: string;
  lastUsedAt: string | null;
}

export function passkeyView(p: PasskeyRow): PasskeyView {
  return {
    id: p.id,
    name: p.name,
    credentialId: p.credentialId,
    transports: p.transports,
    aaguid: p.aaguid,
    backupEligible: p.backupEligible,
    backupState: p.backupState,
    signIn: p.signIn,
    createdAt: p.createdAt.toISOString(),
    lastUsedAt: p.lastUsedAt?.toISOString() ?? null,
  };
}

export const challengeExpired = (status: 400 | 401) =>
  mfaError('challenge_expired', { status });
export const invalidPasskey = (status: 400 | 401) => mfaError('invalid_passkey', { status });

/** The challenge a browser signed, read from the credential's clientDataJSON (null when malformed). */
export function challengeOf(credential: { response: { clientDataJSON: string } }): string | null {
  try {
    const parsed = JSON.parse(Buffer.from(credential.response.clientDataJSON, 'base64url').toString('utf8')) as { challenge?: unknown };
    return typeof parsed.challenge === 'string' && parsed.challenge.length > 0 && parsed.challenge.length <= 512 ? parsed.challenge : null;
  } catch {
    return null;
  }
}

export function userHandle(userId: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(Buffer.from(userId.replaceAll('-', ''), 'hex'));
}

export function decodeKey(publicKey: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(Buffer.from(publicKey, 'base64url'));
}

function hasTotp(user: User): boolean {
  return user.mfaEnabled && !!user.mfaSecret;
}

async function assertPasskeysAllowed(keel: Keel, user: User): Promise<void> {
  assertMethodAllowed(await securityPolicy(keel, await getAccessSummary(keel, user)), 'passkey');
}

function userPasskeys(keel: Keel, userId: string): Promise<PasskeyRow[]> {
  return keel.db.select().from(passkeys).where(eq(passkeys.userId, userId)).orderBy(asc(passkeys.createdAt));
}

// ---------------------------------------------------------------------------------------------
// Registration

/**
 * `POST /auth/passkeys/register/options {currentPassword | reauth, name, signIn?}`: after password
 * re-entry or a passkey re-authentication (`verifyReentry`), the
 * WebAuthn creation options. The challenge is held 5 minutes (it is the single-use record's token)
 * together with the chosen name. `signIn: true` asks for a sign-in credential (docs/decisions.md
 * "Sign-in options"): a discoverable credential with user verification required, which the
 * verification step then demands.
 */
export async function passkeyRegistrationOptions(
  keel: Keel,
  principal: ReentryPrincipal,
  proof: Reentry,
  name: string,
  signIn: boolean,
  info: RequestInfo,
): Promise<PublicKeyCredentialCreationOptionsJSON> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const rp = requireRelyingParty(keel);
  const user = await loadUser(keel, principal.userId);
  await assertPasskeysAllowed(keel, user);
  await verifyReentry(keel, principal, proof, info);
  await mfaLimits(keel).passkeyChallengesUser.consume(user.id);
  const existing = await userPasskeys(keel, user.id);
  const options = await (await webauthn()).generateRegistrationOptions({
    rpName: rp.rpName,
    rpID: rp.rpId,
    userName: user.email,
    userID: userHandle(user.id),
    userDisplayName: user.name,
    timeout: WEBAUTHN_CHALLENGE_TTL_MS,
    attestationType: 'none',
    excludeCredentials: existing.map((p) => ({ id: p.credentialId, transports: p.transports })),
    authenticatorSelection: signIn ? { residentKey: 'required', userVerification: 'required' } : { residentKey: 'preferred', userVerification: 'preferred' },
  });
  await keel.singleUse.create(keel.db, {
    purpose: WEBAUTHN_REGISTER_PURPOSE,
    subjectId: user.id,
    ttlMs: WEBAUTHN_CHALLENGE_TTL_MS,
    token: options.challenge,
    data: { name: name.trim(), signIn },
  });
  return options;
}

/**
 * `POST /auth/passkeys/register/verify {credential}`: consumes the challenge (once), verifies the
 * attestation against RP ID and origin, and stores the passkey. MFA becomes active; the first
 * passkey becomes the primary method only when no TOTP or SMS factor exists. A user with no
 * recovery codes gets fresh ones (shown once) so a lost passkey does not lock the account.
 */
export async function registerPasskey(
  keel: Keel,
  userId: string,
  credential: RegistrationResponseJSON,
  info: RequestInfo,
): Promise<PasskeyView & { recoveryCodes?: string[] }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const rp = requireRelyingParty(keel);
  const challenge = challengeOf(credential);
  if (!challenge) throw invalidPasskey(400);
  const record = await keel.singleUse.consume(keel.db, WEBAUTHN_REGISTER_PURPOSE, challenge);
  if (record?.subjectId !== userId) throw challengeExpired(400);
  const signIn = record.data.signIn === true;
  let verification: Awaited<ReturnType<typeof verifyRegistrationResponse>>;
  try {
    verification = await (await webauthn()).verifyRegistrationResponse({
      response: credential,
      expectedChallenge: challenge,
      expectedOrigin: rp.origin,
      expectedRPID: rp.rpId,
      // A sign-in credential is the whole sign-in: the authenticator must have verified the user.
      requireUserVerification: signIn,
    });
  } catch (err) {
    requestLog(keel.log, info).info({ error: loggableError(err) }, 'passkey registration refused');
    throw invalidPasskey(400);
  }
  if (!verification.verified) throw invalidPasskey(400);
  const reg = verification.registrationInfo;
  const name = typeof record.data.name === 'string' && record.data.name ? record.data.name : 'Passkey';
  const user = await loadUser(keel, userId);
  const access = await getAccessSummary(keel, user);
  const recoveryCodes = user.mfaRecoveryCodes && user.mfaRecoveryCodes.length > 0 ? null : newRecoveryCodes();
  const row = await transaction(keel.db, async (tx) => {
    const [locked] = await tx.db.select().from(users).where(eq(users.id, userId)).for('update');
    if (!locked) throw unauthorized();
    const [inserted] = await tx.db
      .insert(passkeys)
      .values({
        userId,
        credentialId: reg.credential.id,
        publicKey: Buffer.from(reg.credential.publicKey).toString('base64url'),
        counter: reg.credential.counter,
        transports: reg.credential.transports ?? credential.response.transports ?? [],
        aaguid: reg.aaguid,
        backupEligible: reg.credentialDeviceType === 'multiDevice',
        backupState: reg.credentialBackedUp,
        name,
        signIn,
        createdAt: clock.now(),
      })
      .onConflictDoNothing()
      .returning();
    if (!inserted) throw mfaError('passkey_exists');
    const primaryElsewhere = hasTotp(locked) || smsEnrolled(locked);
    await updateAccount(keel, tx, userId, {
      mfaEnabled: true,
      ...(primaryElsewhere || locked.mfaMethod === 'passkey' ? {} : { mfaMethod: 'passkey' as const }),
      ...(recoveryCodes ? { mfaRecoveryCodes: recoveryCodes.map((c) => hashRecoveryCode(keel.secrets.keyed, c)) } : {}),
      updatedAt: clock.now(),
    });
    await writeAudit(tx.db, info, {
      action: 'auth.mfa.passkey.register',
      partnerId: access.partnerId,
      orgId: access.orgId,
      target: { type: 'user', id: userId },
      details: { credential: { id: inserted.id, name: inserted.name, aaguid: inserted.aaguid, signIn }, primary: !primaryElsewhere },
    });
    tx.afterCommit(() => notifyAuthChange(keel, locked, 'passkey_added', info));
    return inserted;
  });
  return { ...passkeyView(row), ...(recoveryCodes ? { recoveryCodes } : {}) };
}

// ---------------------------------------------------------------------------------------------
// Re-authentication: a password re-entered, or a fresh passkey assertion (docs/decisions.md "Passwordless accounts")

export const PASSKEY_REAUTH_PURPOSE = 'passkey_reauth';
/** A re-authentication challenge is answered within this long of being issued, once. */
export const PASSKEY_REAUTH_WINDOW_MS = 2 * 60_000;
/** Sign-in passkeys an account without a password keeps (the number it needed to remove it). */
export const SIGN_IN_PASSKEYS_FOR_NO_PASSWORD = 2;

export interface ReentryPrincipal {
  userId: string;
  sessionId: string;
}

/** What proves the person is at the keyboard: the password, or a passkey assertion to a re-authentication challenge. */
export type Reentry = { currentPassword: string } | { reauth: { challengeId: string; response: AuthenticationResponseJSON } };

/**
 * `POST /auth/passkeys/reauth/options`: a challenge for one of the user's passkeys, user verification
 * required, bound to this session and held PASSKEY_REAUTH_WINDOW_MS (single use). For the accounts
 * that have no password to re-enter, and any other that prefers it. 409 `passkey_not_enrolled`
 * without a passkey.
 */
export async function passkeyReauthOptions(keel: Keel, principal: ReentryPrincipal): Promise<{ options: PublicKeyCredentialRequestOptionsJSON; challengeId: string }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const rp = requireRelyingParty(keel);
  const user = await loadUser(keel, principal.userId);
  await mfaLimits(keel).passkeyChallengesUser.consume(user.id);
  const keys = await userPasskeys(keel, user.id);
  if (keys.length === 0) throw mfaError('passkey_not_enrolled');
  const options = await (await webauthn()).generateAuthenticationOptions({
    rpID: rp.rpId,
    userVerification: 'required',
    timeout: PASSKEY_REAUTH_WINDOW_MS,
    allowCredentials: keys.map((p) => ({ id: p.credentialId, transports: p.transports as never })),
  });
  const { token } = await keel.singleUse.create(keel.db, {
    purpose: PASSKEY_REAUTH_PURPOSE,
    subjectId: user.id,
    ttlMs: PASSKEY_REAUTH_WINDOW_MS,
    data: { challenge: options.challenge, sessionId: principal.sessionId },
  });
  return { options, challengeId: token };
}

/**
 * Checks a re-entry: the password (`verifyReenteredPassword`, its limit and lockout), or a passkey
 * re-authentication: the challenge consumed atomically (a replay, or a second use in parallel, finds
 * it gone), issued to this user in this same session within the window, answered by one of the
 * user's passkeys with user verification, its counter moved forward. 400 `challenge_expired` /
 * `invalid_passkey` otherwise.
 */
export async function verifyReentry(keel: Keel, principal: ReentryPrincipal, proof: Reentry, info: RequestInfo): Promise<void> {
  if ('currentPassword' in proof) {
    await verifyReenteredPassword(keel, principal.userId, proof.currentPassword);
    return;
  }
  requireRelyingParty(keel);
  const { challengeId, response } = proof.reauth;
  const challenge = challengeOf(response);
  if (!challenge) throw invalidPasskey(400);
  const record = await keel.singleUse.consume(keel.db, PASSKEY_REAUTH_PURPOSE, challengeId);
  if (!record || record.subjectId !== principal.userId || record.data.sessionId !== principal.sessionId || record.data.challenge !== challenge) throw challengeExpired(400);
  const [key] = await keel.db.select().from(passkeys).where(and(eq(passkeys.userId, principal.userId), eq(passkeys.credentialId, response.id)));
  if (!key) throw invalidPasskey(400);
  const authenticated = await verifyAssertion(keel, info, key, response, { challenge, userVerification: true, status: 400, refused: 'passkey re-authentication refused' });
  const user = await loadUser(keel, principal.userId);
  await advanceCounter(keel, key, user, authenticated, info);
}

// ---------------------------------------------------------------------------------------------
// Management

export async function listPasskeys(keel: Keel, userId: string, page: number, limit: number): Promise<{ data: PasskeyView[]; total: number }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const [total] = await keel.db.select({ n: count() }).from(passkeys).where(eq(passkeys.userId, userId));
  const rows = await keel.db
    .select()
    .from(passkeys)
    .where(eq(passkeys.userId, userId))
    .orderBy(asc(passkeys.createdAt), asc(passkeys.id))
    .limit(limit)
    .offset((page - 1) * limit);
  return { data: rows.map(passkeyView), total: total?.n ?? 0 };
}

/** Renames one of the user's own passkeys; another user's passkey is 404. */
export async function renamePasskey(keel: Keel, userId: string, passkeyId: string, name: string): Promise<PasskeyView> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const [row] = await keel.db
    .update(passkeys)
    .set({ name: name.trim() })
    .where(and(eq(passkeys.id, passkeyId), eq(passkeys.userId, userId)))
    .returning();
  if (!row) throw notFound('Passkey');
  return passkeyView(row);
}

/**
 * Deletes one of the user's passkeys after password re-entry or a passkey re-authentication. Refused
 * with 409 `sign_in_passkeys_required` when an account without a password would keep fewer than two
 * sign-in passkeys, with 409 when it would leave
 * a Force-MFA user without an acceptable factor, and with 403 when it would leave no factor while
 * the organisation requires MFA. Decided under a lock on the user row, so two parallel deletions
 * cannot both remove "the other" last passkey.
 */
export async function deletePasskey(keel: Keel, principal: ReentryPrincipal, passkeyId: string, proof: Reentry, info: RequestInfo): Promise<void> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const userId = principal.userId;
  const user = await loadUser(keel, userId);
  await verifyReentry(keel, principal, proof, info);
  const access = await getAccessSummary(keel, user);
  const policy = await securityPolicy(keel, access);
  await transaction(keel.db, async (tx) => {
    const [locked] = await tx.db.select().from(users).where(eq(users.id, userId)).for('update');
    if (!locked) throw unauthorized();
    const keys = await tx.db.select({ id: passkeys.id, name: passkeys.name, signIn: passkeys.signIn }).from(passkeys).where(eq(passkeys.userId, userId));
    const target = keys.find((k) => k.id === passkeyId);
    if (!target) throw notFound('Passkey');
    // An account without a password signs in with its sign-in passkeys alone: it keeps the number it needed to drop the password.
    const signInLeft = keys.filter((k) => k.signIn && k.id !== passkeyId).length;
    if (locked.passwordHash === null && target.signIn && signInLeft < SIGN_IN_PASSKEYS_FOR_NO_PASSWORD) {
      throw mfaError('sign_in_passkeys_required', { message: 'This account has no password: it keeps at least two sign-in passkeys (add another, or set a password through a reset link, first)' });
    }
    const others = keys.length - 1;
    const remaining: MfaMethod[] = [];
    if (hasTotp(locked)) remaining.push('totp');
    if (smsEnrolled(locked)) remaining.push('sms');
    if (others > 0) remaining.push('passkey');
    if (!forceMfaSatisfiedUnder(keel, access, policy, remaining)) {
      throw mfaError('last_mfa_factor');
    }
    if (remaining.length === 0 && keel.config.ENABLE_2FA && policy.requireMfa) {
      throw mfaError('mfa_required_by_organization', { message: 'Your organization requires MFA; your last second factor cannot be removed' });
    }
    await tx.db.delete(passkeys).where(and(eq(passkeys.id, passkeyId), eq(passkeys.userId, userId)));
    if (others === 0) {
      const fallback = hasTotp(locked) ? 'totp' : smsEnrolled(locked) ? 'sms' : null;
      await updateAccount(keel, tx, userId, {
        mfaEnabled: fallback !== null,
        mfaMethod: locked.mfaMethod === 'passkey' ? fallback : locked.mfaMethod,
        ...(fallback === null ? { mfaRecoveryCodes: null } : {}),
        updatedAt: clock.now(),
      });
    } else {
      // The passkey count of the self-profile and the live session's enrolled factors (the account row is unchanged).
      tx.afterCommit(() => identityOf(keel).sessions.userChanged(userId));
    }
    await writeAudit(tx.db, info, {
      action: 'auth.mfa.passkey.delete',
      partnerId: access.partnerId,
      orgId: access.orgId,
      target: { type: 'user', id: userId },
      details: { credential: { id: target.id, name: target.name }, remaining: others },
    });
    tx.afterCommit(() => notifyAuthChange(keel, locked, 'passkey_removed', info));
  });
}

// ---------------------------------------------------------------------------------------------
// Login

/**
 * `POST /auth/mfa/passkey/options {tempToken}`: WebAuthn request options for the user's passkeys.
 * The challenge is held 5 minutes, bound to this user and this temp token.
 */
export async function passkeyLoginOptions(keel: Keel, tempToken: string): Promise<PublicKeyCredentialRequestOptionsJSON> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const rp = requireRelyingParty(keel);
  const pending = await keel.singleUse.peek(keel.db, MFA_LOGIN_PURPOSE, tempToken);
  if (!pending?.subjectId) throw invalidTempToken();
  const user = await loadUser(keel, pending.subjectId);
  if (user.status !== 'active') throw invalidTempToken();
  await assertPasskeysAllowed(keel, user);
  const limits = mfaLimits(keel);
  await limits.passkeyChallengesLogin.consume(sha256Hex(tempToken));
  await limits.passkeyChallengesUser.consume(user.id);
  const keys = await userPasskeys(keel, user.id);
  if (keys.length === 0) throw mfaError('passkey_not_enrolled');
  const options = await (await webauthn()).generateAuthenticationOptions({
    rpID: rp.rpId,
    allowCredentials: keys.map((p) => ({ id: p.credentialId, transports: p.transports })),
    userVerification: 'preferred',
    timeout: WEBAUTHN_CHALLENGE_TTL_MS,
  });
  await keel.singleUse.create(keel.db, {
    purpose: WEBAUTHN_LOGIN_PURPOSE,
    subjectId: user.id,
    ttlMs: WEBAUTHN_CHALLENGE_TTL_MS,
    token: options.challenge,
    data: { tempTokenHash: sha256Hex(tempToken) },
  });
  return options;
}

/**
 * `POST /auth/mfa/passkey/verify {tempToken, credential}`: consumes the challenge (a replayed
 * assertion finds it gone), verifies the assertion, checks the signature counter, and issues full
 * tokens with `mfa: true`. A counter that does not move forward (when either side is non-zero) is
 * refused and audited as a possibly cloned authenticator.
 */
export async function verifyPasskeyLogin(keel: Keel, tempToken: string, credential: AuthenticationResponseJSON, info: RequestInfo): Promise<TokenAnswer> {
  try {
    const answer = await checkPasskeyLogin(keel, tempToken, credential, info);
    countAuthOutcome(keel.metrics, 'mfa', 'success');
    return answer;
  } catch (err) {
    // A refused assertion (401) is the second factor's failure; an expired attempt or a 4xx of the request is not counted.
    if (err instanceof AppError && err.status === 401 && err.code !== 'invalid_temp_token') {
      countAuthOutcome(keel.metrics, 'mfa', 'failure');
      const pending = await keel.singleUse.peek(keel.db, MFA_LOGIN_PURPOSE, tempToken);
      auditSignInRefusal(keel, info, { action: 'auth.mfa.failed', reason: err.code, userId: pending?.subjectId ?? null });
    }
    throw err;
  }
}

/**
 * One passkey assertion checked against its stored key: signature, challenge, origin, RP ID and (when
 * asked) user verification. The counter is not checked here but by `advanceCounter` after it, so a
 * regression is reported only for a genuine signature of this key (a real clone), never for garbage.
 * A refusal is logged as `refused` and answered 400/401 `invalid_passkey`.
 */
export async function verifyAssertion(
  keel: Keel,
  info: RequestInfo,
  key: PasskeyRow,
  response: AuthenticationResponseJSON,
  expected: { challenge: string; userVerification: boolean; status: 400 | 401; refused: string },
): Promise<{ newCounter: number; credentialBackedUp: boolean }> {
  const rp = requireRelyingParty(keel);
  let verification: Awaited<ReturnType<typeof verifyAuthenticationResponse>>;
  try {
    verification = await (await webauthn()).verifyAuthenticationResponse({
      response,
      expectedChallenge: expected.challenge,
      expectedOrigin: rp.origin,
      expectedRPID: rp.rpId,
      credential: { id: key.credentialId, publicKey: decodeKey(key.publicKey), counter: 0, transports: key.transports },
      requireUserVerification: expected.userVerification,
    });
  } catch (err) {
    requestLog(keel.log, info).info({ error: loggableError(err) }, expected.refused);
    throw invalidPasskey(expected.status);
  }
  if (!verification.verified) throw invalidPasskey(expected.status);
  return verification.authenticationInfo;
}

/**
 * Moves the passkey's signature counter forward to the one just verified, or refuses: a counter that
 * does not move forward (when either side is non-zero) is audited `auth.mfa.passkey.counter_regression`
 * as a possibly cloned authenticator and answered 401 `passkey_counter_regression`. One conditional
 * UPDATE, so two parallel assertions with the same counter cannot both pass.
 */
export async function advanceCounter(
  keel: Keel,
  key: PasskeyRow,
  user: User,
  authenticationInfo: { newCounter: number; credentialBackedUp: boolean },
  actorInfo: RequestInfo,
): Promise<void> {
  const received = authenticationInfo.newCounter;
  const moved = received === 0 ? key.counter === 0 : key.counter < received;
  const updated = moved
    ? await keel.db
        .update(passkeys)
        .set({ counter: received, lastUsedAt: clock.now(), backupState: authenticationInfo.credentialBackedUp })
        .where(and(eq(passkeys.id, key.id), received === 0 ? eq(passkeys.counter, 0) : lt(passkeys.counter, received)))
        .returning({ id: passkeys.id })
    : [];
  if (updated.length > 0) return;
  const access = await getAccessSummary(keel, user);
  await writeAudit(keel.db, actorInfo, {
    action: 'auth.mfa.passkey.counter_regression',
    partnerId: access.partnerId,
    orgId: access.orgId,
    target: { type: 'user', id: user.id },
    details: { credential: { id: key.id, name: key.name }, storedCounter: key.counter, receivedCounter: received },
    result: 'failure',
  });
  requestLog(keel.log, actorInfo).warn({ userId: user.id, passkey: key.id, storedCounter: key.counter, receivedCounter: received }, 'passkey signature counter went backwards: possible cloned authenticator');
  throw mfaError('passkey_counter_regression');
}

async function checkPasskeyLogin(keel: Keel, tempToken: string, credential: AuthenticationResponseJSON, info: RequestInfo): Promise<TokenAnswer> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  requireRelyingParty(keel);
  const pending = await keel.singleUse.peek(keel.db, MFA_LOGIN_PURPOSE, tempToken);
  if (!pending?.subjectId) throw invalidTempToken();
  await mfaLimits(keel).verify.consume(pending.subjectId);
  const user = await loadUser(keel, pending.subjectId);
  if (user.status !== 'active') throw invalidTempToken();
  const actorInfo: RequestInfo = { ...info, actor: { type: 'user', id: user.id, email: user.email } };

  const challenge = challengeOf(credential);
  if (!challenge) throw invalidPasskey(401);
  const record = await keel.singleUse.consume(keel.db, WEBAUTHN_LOGIN_PURPOSE, challenge);
  if (record?.subjectId !== user.id || record.data.tempTokenHash !== sha256Hex(tempToken)) throw challengeExpired(401);

  const [key] = await keel.db
    .select()
    .from(passkeys)
    .where(and(eq(passkeys.userId, user.id), eq(passkeys.credentialId, credential.id)));
  if (!key) throw invalidPasskey(401);

  const authenticated = await verifyAssertion(keel, info, key, credential, { challenge, userVerification: false, status: 401, refused: 'passkey assertion refused' });
  await advanceCounter(keel, key, user, authenticated, actorInfo);

  const consumed = await keel.singleUse.consume(keel.db, MFA_LOGIN_PURPOSE, tempToken);
  if (consumed?.subjectId !== user.id) throw invalidTempToken();
  return signIn(keel, user, actorInfo, { mfa: true, method: 'mfa' });
}
