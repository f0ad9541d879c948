import { and, count, eq } from 'drizzle-orm';
import type { AuthenticationResponseJSON, PublicKeyCredentialRequestOptionsJSON } from '@simplewebauthn/server';

import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { transaction } from '../../platform/db/transaction.js';
import { AppError, unauthorized } from '../../platform/http/errors.js';
import { countAuthOutcome } from '../../platform/metrics.js';
import { writeAudit } from '../audit/service.js';
import { getAccessSummary } from '../access/service.js';
import { updateAccount } from '../identity/accounts.js';
import { identityOf } from '../identity/context.js';
import { verifyReenteredPassword } from '../identity/lockout.js';
import { notifyAuthChange } from '../identity/notices.js';
import { sessions, users } from '../identity/schema.js';
import { auditSignInRefusal } from '../identity/sign-in-audit.js';
import { applyPasswordPolicies, findUserByEmail, invalidCredentials, signIn, type RequestInfo, type TokenAnswer } from '../identity/service.js';
import { loadUser, mfaDisabled, mfaLimits } from './common.js';
import { mfaError } from './errors.js';
import { SIGN_IN_PASSKEYS_FOR_NO_PASSWORD, advanceCounter, challengeExpired, challengeOf, invalidPasskey, userHandle, verifyAssertion, webauthn, WEBAUTHN_CHALLENGE_TTL_MS } from './passkeys.js';
import { assertMethodAllowed, securityPolicy } from './policy.js';
import { passkeys } from './schema.js';
import { requireRelyingParty } from './webauthn.js';

/** Passkey sign-in challenges (docs/decisions.md "Sign-in options"): held 5 minutes, consumed once by `challengeId`. */
export const PASSKEY_SIGN_IN_PURPOSE = 'passkey_sign_in';
/** Removing the password needs a session signed in with a second factor within this long. */
export const FRESH_SIGN_IN_MS = 10 * 60_000;

/**
 * `POST /auth/passkey/options [{email}]`: WebAuthn request options for a sign-in passkey, user
 * verification required. Without an email the browser offers every discoverable credential of this
 * relying party (usernameless, and the autofill of conditional mediation); with one, `allowCredentials`
 * lists the account's sign-in passkeys, or, for an address with none (or no account), one stable
 * decoy id derived from the address under the server's key, so the answer's shape tells nothing about
 * accounts. Limited per source address and per email.
 */
export async function passkeySignInOptions(
  keel: Keel,
  email: string | undefined,
  info: RequestInfo,
): Promise<{ options: PublicKeyCredentialRequestOptionsJSON; challengeId: string }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const rp = requireRelyingParty(keel);
  const limit = mfaLimits(keel).passkeySignIn;
  await limit.consume(`ip|${info.ip ?? 'unknown'}`);
  let allowCredentials: { id: string; transports?: string[] }[] | undefined;
  if (email !== undefined) {
    const address = email.trim().toLowerCase();
    await limit.consume(`email|${address}`);
    const user = await findUserByEmail(keel.db, address);
    const keys = user
      ? await keel.db.select({ id: passkeys.credentialId, transports: passkeys.transports }).from(passkeys).where(and(eq(passkeys.userId, user.id), eq(passkeys.signIn, true)))
      : [];
    allowCredentials = keys.length > 0 ? keys : [{ id: Buffer.from(keel.secrets.keyed.make(`passkey-decoy:${address}`)).subarray(0, 32).toString('base64url') }];
  }
  const options = await (await webauthn()).generateAuthenticationOptions({
    rpID: rp.rpId,
    userVerification: 'required',
    timeout: WEBAUTHN_CHALLENGE_TTL_MS,
    ...(allowCredentials ? { allowCredentials: allowCredentials.map((c) => ({ id: c.id, ...(c.transports?.length ? { transports: c.transports as never } : {}) })) } : {}),
  });
  const { token } = await keel.singleUse.create(keel.db, {
    purpose: PASSKEY_SIGN_IN_PURPOSE,
    ttlMs: WEBAUTHN_CHALLENGE_TTL_MS,
    data: { challenge: options.challenge },
  });
  return { options, challengeId: token };
}

/**
 * `POST /auth/passkey/verify {challengeId, response}`: consumes the challenge (once: a replayed
 * assertion finds it gone), finds the sign-in passkey the assertion names, verifies it against RP ID
 * and origin with user verification required, moves the signature counter forward (a clone's
 * counter going backwards is refused and audited), then signs in with `mfa: true`, audited
 * `user.login` method `passkey`. A disabled or locked account answers 401 `invalid_credentials` like
 * the password path; enforced SSO refuses it with 403 `sso_required` (a platform administrator's
 * break-glass sign-in is audited `user.login.break_glass`).
 */
export async function verifyPasskeySignIn(keel: Keel, challengeId: string, response: AuthenticationResponseJSON, info: RequestInfo): Promise<TokenAnswer> {
  const seen: { userId: string | null } = { userId: null };
  try {
    const answer = await checkPasskeySignIn(keel, challengeId, response, info, seen);
    countAuthOutcome(keel.metrics, 'login', 'success');
    return answer;
  } catch (err) {
    if (err instanceof AppError && err.status === 401) {
      countAuthOutcome(keel.metrics, 'login', 'failure');
      auditSignInRefusal(keel, info, { action: 'user.login.failed', reason: err.code, userId: seen.userId, details: { method: 'passkey' } });
    }
    throw err;
  }
}

async function checkPasskeySignIn(
  keel: Keel,
  challengeId: string,
  response: AuthenticationResponseJSON,
  info: RequestInfo,
  seen: { userId: string | null },
): Promise<TokenAnswer> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  requireRelyingParty(keel);
  const challenge = challengeOf(response);
  if (!challenge) throw invalidPasskey(401);
  const record = await keel.singleUse.consume(keel.db, PASSKEY_SIGN_IN_PURPOSE, challengeId);
  if (record?.data.challenge !== challenge) throw challengeExpired(401);

  const [row] = await keel.db
    .select({ key: passkeys, user: users })
    .from(passkeys)
    .innerJoin(users, eq(users.id, passkeys.userId))
    .where(and(eq(passkeys.credentialId, response.id), eq(passkeys.signIn, true)));
  if (!row) throw invalidPasskey(401);
  const { key, user } = row;
  seen.userId = user.id;
  // A discoverable credential names its account: it must be the one the passkey was registered for.
  if (response.response.userHandle !== undefined && response.response.userHandle !== Buffer.from(userHandle(user.id)).toString('base64url')) {
    throw invalidPasskey(401);
  }

  const authenticated = await verifyAssertion(keel, info, key, response, { challenge, userVerification: true, status: 401, refused: 'passkey sign-in assertion refused' });

  // The password path's refusals, with its codes: an inactive or locked account is 401 invalid_credentials.
  if (user.status !== 'active' || (user.lockedUntil && user.lockedUntil.getTime() > clock.nowMs())) throw invalidCredentials();
  const actorInfo: RequestInfo = { ...info, actor: { type: 'user', id: user.id, email: user.email } };
  // The organisation's allowed methods bind a passkey alone as they bind it as a second factor.
  assertMethodAllowed(await securityPolicy(keel, await getAccessSummary(keel, user)), 'passkey');
  await advanceCounter(keel, key, user, authenticated, actorInfo);
  await applyPasswordPolicies(keel, user, info);
  return signIn(keel, user, actorInfo, { mfa: true, method: 'passkey', policyChecked: true, details: { passkeyId: key.id } });
}

/** The account's sign-in passkeys. */
export async function signInPasskeyCount(keel: Keel, userId: string): Promise<number> {
  const [n] = await keel.db.select({ n: count() }).from(passkeys).where(and(eq(passkeys.userId, userId), eq(passkeys.signIn, true)));
  return n?.n ?? 0;
}

/**
 * `DELETE /auth/password {currentPassword}`: removes the password of an account that holds at least
 * two sign-in passkeys, from a session signed in with a second factor in the last 10 minutes; after
 * the password is re-entered. Every password path then refuses the account (no hash to match) until
 * a reset link puts one back. Decided under a lock on the user row; outstanding reset links stay
 * valid (they are the way back). Audited `user.password.remove`.
 */
export async function removePassword(
  keel: Keel,
  principal: { userId: string; sessionId: string; mfa: boolean },
  currentPassword: string,
  info: RequestInfo,
): Promise<void> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const [session] = await keel.db.select({ createdAt: sessions.createdAt }).from(sessions).where(eq(sessions.id, principal.sessionId));
  if (!principal.mfa || !session || clock.nowMs() - session.createdAt.getTime() > FRESH_SIGN_IN_MS) throw mfaError('recent_sign_in_required');
  const user = await loadUser(keel, principal.userId);
  await verifyReenteredPassword(keel, user.id, currentPassword);
  const access = await getAccessSummary(keel, user);
  await transaction(keel.db, async (tx) => {
    const [locked] = await tx.db.select().from(users).where(eq(users.id, user.id)).for('update');
    if (!locked) throw unauthorized();
    const [n] = await tx.db.select({ n: count() }).from(passkeys).where(and(eq(passkeys.userId, user.id), eq(passkeys.signIn, true)));
    const signInKeys = n?.n ?? 0;
    if (signInKeys < SIGN_IN_PASSKEYS_FOR_NO_PASSWORD) throw mfaError('sign_in_passkeys_required');
    await updateAccount(keel, tx, user.id, { passwordHash: null, passwordChangedAt: clock.now(), updatedAt: clock.now() });
    await writeAudit(tx.db, info, {
      action: 'user.password.remove',
      partnerId: access.partnerId,
      orgId: access.orgId,
      target: { type: 'user', id: user.id },
      details: { signInPasskeys: signInKeys },
    });
    tx.afterCommit(() => identityOf(keel).sessions.profileChanged(user.id));
    tx.afterCommit(() => notifyAuthChange(keel, locked, 'password_changed', info));
  });
}
