import { loggableError } from '../../platform/safe-error.js';
import { randomInt } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { requestLog, type RequestRef } from '../../platform/request-scope.js';
import { clock } from '../../platform/clock.js';
import { sha256Hex } from '../../platform/crypto.js';
import { transaction } from '../../platform/db/transaction.js';
import { validationError } from '../../platform/http/errors.js';
import { SmsSendError } from '../../platform/sms.js';
import { writeAudit } from '../audit/service.js';
import { getAccessSummary } from '../access/service.js';
import { updateAccount } from '../identity/accounts.js';
import { maskPhone } from '../identity/profile.js';
import { users } from '../identity/schema.js';
import { upgradeSession, type RequestInfo, type TokenAnswer, type User } from '../identity/service.js';
import { invalidTempToken, loadUser, mfaDisabled, mfaLimits } from './common.js';
import { MFA_LOGIN_PURPOSE } from './login.js';
import { assertMethodAllowed, securityPolicy } from './policy.js';
import { hashRecoveryCode, newRecoveryCodes } from './recovery.js';
import { notifyAuthChange } from '../identity/notices.js';
import { mfaError } from './errors.js';

/** A phone verification code (POST /auth/phone/verify → /auth/phone/confirm). */
export const PHONE_VERIFY_PURPOSE = 'phone_verify';
/** A login (or re-authentication) code sent to the verified phone of an SMS user. */
export const SMS_CODE_PURPOSE = 'sms_code';
export const SMS_CODE_TTL_MS = 10 * 60_000;
/** Guesses allowed per code; the code is gone after the last one, right or wrong. */
export const SMS_CODE_MAX_ATTEMPTS = 5;
export const SMS_CODE_PATTERN = /^\d{6}$/;

export const smsUnavailable = () =>
  mfaError('sms_unavailable');
const smsSendFailed = () => mfaError('sms_send_failed');
const smsNotEnabled = () => mfaError('sms_not_enabled');

/** True when SMS is the user's active second factor (how SMS enrolment is represented: mfa_method sms on a verified phone). */
export function smsEnrolled(user: User): boolean {
  return user.mfaEnabled && user.mfaMethod === 'sms' && user.phoneVerified && !!user.phoneNumber;
}

/** Parses a phone number given in international form (`+` and country code) into E.164; null when not a valid number. */
export async function normalizePhone(input: string): Promise<string | null> {
  const text = input.trim();
  if (!text.startsWith('+')) return null;
  // Loaded on first use: the metadata costs ~150 ms of start-up otherwise.
  const { parsePhoneNumberFromString } = await import('libphonenumber-js');
  const parsed = parsePhoneNumberFromString(text);
  return parsed?.isValid() ? parsed.number : null;
}

function newCode(): string {
  return String(randomInt(0, 1_000_000)).padStart(6, '0');
}

/** Codes are kept as a keyed hash bound to purpose and user: a copy of the database cannot be brute-forced. */
const codeMessage = (purpose: string, userId: string, code: string): string => `sms:${purpose}:${userId}:${code}`;

async function assertSmsAllowed(keel: Keel, user: User): Promise<void> {
  assertMethodAllowed(await securityPolicy(keel, await getAccessSummary(keel, user)), 'sms');
}

function assertGateway(keel: Keel): void {
  if (!keel.sms.available) throw smsUnavailable();
}

export interface CodeSent {
  message: string;
  phoneNumberMasked: string | null;
  expiresAt: string;
}

/**
 * Stores a fresh code (replacing the subject's previous one of that purpose) and texts it. If the
 * gateway refuses, the code is withdrawn and the caller gets 502.
 */
async function issueCode(keel: Keel, purpose: string, user: User, phone: string, text: (code: string) => string, request: RequestRef): Promise<CodeSent> {
  const log = requestLog(keel.log, request);
  const code = newCode();
  const { id, expiresAt } = await keel.singleUse.create(keel.db, {
    purpose,
    subjectId: user.id,
    ttlMs: SMS_CODE_TTL_MS,
    data: { phoneNumber: phone, codeHash: keel.secrets.keyed.make(codeMessage(purpose, user.id, code)) },
    replaceForSubject: true,
  });
  try {
    await keel.sms.send({ to: phone, body: text(code) }, log);
  } catch (err) {
    await keel.singleUse.consumeById(keel.db, id);
    const e = err instanceof SmsSendError ? err : null;
    log.warn(
      { smsProvider: keel.sms.provider, status: e?.status ?? null, providerCode: e?.providerCode ?? null, error: loggableError(err) },
      'SMS could not be sent',
    );
    throw smsSendFailed();
  }
  return { message: 'Code sent', phoneNumberMasked: maskPhone(phone), expiresAt: expiresAt.toISOString() };
}

type CodeOutcome = { ok: true; data: Record<string, unknown> } | { ok: false; reason: 'wrong' | 'expired' };

/**
 * Checks a code against the subject's live code of a purpose. The attempt is counted before the
 * comparison, so parallel guesses cannot exceed SMS_CODE_MAX_ATTEMPTS; a right code is consumed
 * atomically (one winner). No wrong guess deletes the code, the last one included: a request that
 * counted within the limit may be about to consume it. A request over the limit only answers
 * `expired`, and the sweep removes the code once it expires.
 */
async function checkCode(keel: Keel, purpose: string, userId: string, code: string): Promise<CodeOutcome> {
  const record = await keel.singleUse.findForSubject(keel.db, purpose, userId);
  if (!record) return { ok: false, reason: 'expired' };
  const attempts = await keel.singleUse.recordAttempt(keel.db, record.id);
  if (attempts === null || attempts > SMS_CODE_MAX_ATTEMPTS) return { ok: false, reason: 'expired' };
  const expected = typeof record.data.codeHash === 'string' ? record.data.codeHash : '';
  // Under any configured key: a code texted just before a key rotation still works after it.
  if (!SMS_CODE_PATTERN.test(code) || !keel.secrets.keyed.matches(codeMessage(purpose, userId, code), expected)) return { ok: false, reason: 'wrong' };
  const won = await keel.singleUse.consumeById(keel.db, record.id);
  return won ? { ok: true, data: won.data } : { ok: false, reason: 'expired' };
}

/**
 * `POST /auth/phone/verify`: texts a 6-digit code to the number (E.164). Limited per user and per
 * number, and hard-capped for accounts without a tenant. Changing a factor once one is enrolled needs
 * a session verified with a second factor (`requireFactorProof` on the route).
 */
export async function startPhoneVerification(
  keel: Keel,
  userId: string,
  phoneNumber: string,
  request: RequestRef,
): Promise<CodeSent> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const user = await loadUser(keel, userId);
  await assertSmsAllowed(keel, user);
  assertGateway(keel);
  const phone = await normalizePhone(phoneNumber);
  if (!phone) throw validationError([{ path: 'phoneNumber', message: 'must be a valid phone number in international (E.164) form, e.g. +14155550123' }]);
  const limits = mfaLimits(keel);
  await limits.phoneVerifyUser.consume(user.id);
  // An account with no partner or organisation (self-registered) can text arbitrary numbers only a
  // few times a day.
  const access = await getAccessSummary(keel, user);
  if (!access.partnerId && !access.orgId && !user.isPlatformAdmin) await limits.phoneVerifyTenantless.consume(user.id);
  // Verification texts have a per-number bucket of their own: they never spend the number's sign-in budget.
  await limits.phoneVerifyPhone.consume(sha256Hex(phone));
  return issueCode(keel, PHONE_VERIFY_PURPOSE, user, phone, (code) => `Your Keel verification code is ${code}. It expires in 10 minutes. Do not share it.`, request);
}

/** `POST /auth/phone/confirm {code}`: the number the code was sent to becomes the user's verified phone. */
export async function confirmPhone(keel: Keel, userId: string, code: string, info: RequestInfo): Promise<{ phoneNumberMasked: string | null; phoneVerified: true }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const user = await loadUser(keel, userId);
  const outcome = await checkCode(keel, PHONE_VERIFY_PURPOSE, user.id, code.trim());
  if (!outcome.ok) {
    if (outcome.reason === 'wrong') throw mfaError('invalid_code');
    throw mfaError('code_expired');
  }
  const phone = typeof outcome.data.phoneNumber === 'string' ? outcome.data.phoneNumber : null;
  if (!phone) throw mfaError('code_expired', { message: 'The code has expired: request a new one with /auth/phone/verify' });
  const access = await getAccessSummary(keel, user);
  await transaction(keel.db, async (tx) => {
    await updateAccount(keel, tx, user.id, { phoneNumber: phone, phoneVerified: true, updatedAt: clock.now() });
    await writeAudit(tx.db, info, {
      action: 'auth.phone.verify',
      partnerId: access.partnerId,
      orgId: access.orgId,
      target: { type: 'user', id: user.id },
      details: { phoneNumberMasked: maskPhone(phone), changed: phone !== user.phoneNumber },
    });
    tx.afterCommit(() => notifyAuthChange(keel, user, 'phone_verified', info));
  });
  return { phoneNumberMasked: maskPhone(phone), phoneVerified: true };
}

/**
 * `POST /auth/mfa/sms/enable`: SMS on the verified phone becomes the primary second factor. New
 * recovery codes replace any old ones; the caller's session is upgraded to `mfa: true`.
 */
export async function enableSms(
  keel: Keel,
  userId: string,
  sessionId: string,
  info: RequestInfo,
): Promise<TokenAnswer & { recoveryCodes: string[] }> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const user = await loadUser(keel, userId);
  await assertSmsAllowed(keel, user);
  assertGateway(keel);
  if (!user.phoneVerified || !user.phoneNumber) {
    throw mfaError('phone_not_verified');
  }
  if (smsEnrolled(user)) throw mfaError('sms_already_enabled');
  const recoveryCodes = newRecoveryCodes();
  const access = await getAccessSummary(keel, user);
  await transaction(keel.db, async (tx) => {
    const enabled = await updateAccount(
      keel,
      tx,
      userId,
      {
        mfaEnabled: true,
        mfaMethod: 'sms',
        mfaRecoveryCodes: recoveryCodes.map((c) => hashRecoveryCode(keel.secrets.keyed, c)),
        updatedAt: clock.now(),
      },
      eq(users.phoneVerified, true),
    );
    if (!enabled) throw mfaError('phone_not_verified');
    await writeAudit(tx.db, info, {
      action: 'auth.mfa.setup',
      partnerId: access.partnerId,
      orgId: access.orgId,
      target: { type: 'user', id: userId },
      details: { method: 'sms' },
    });
    tx.afterCommit(() => notifyAuthChange(keel, user, 'sms_enabled', info));
  });
  const tokens = await upgradeSession(keel, await loadUser(keel, userId), sessionId);
  return { ...tokens, recoveryCodes };
}

async function sendCodeTo(keel: Keel, user: User, limitKey: string, request: RequestRef): Promise<CodeSent> {
  if (!smsEnrolled(user) || !user.phoneNumber) throw smsNotEnabled();
  await assertSmsAllowed(keel, user);
  assertGateway(keel);
  const limits = mfaLimits(keel);
  await limits.smsPerLogin.consume(limitKey);
  await limits.smsPerPhone.consume(sha256Hex(user.phoneNumber));
  return issueCode(keel, SMS_CODE_PURPOSE, user, user.phoneNumber, (code) => `Your Keel sign-in code is ${code}. It expires in 10 minutes. Do not share it.`, request);
}

/** `POST /auth/mfa/sms/send {tempToken}`: texts the login code of a pending sign-in (limited per temp token and per number). */
export async function sendLoginSms(keel: Keel, tempToken: string, request: RequestRef): Promise<CodeSent> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  const pending = await keel.singleUse.peek(keel.db, MFA_LOGIN_PURPOSE, tempToken);
  if (!pending?.subjectId) throw invalidTempToken();
  const user = await loadUser(keel, pending.subjectId);
  if (user.status !== 'active') throw invalidTempToken();
  return sendCodeTo(keel, user, `t:${sha256Hex(tempToken)}`, request);
}

/** `POST /auth/mfa/sms/send` by a signed-in SMS user: a code for disable or recovery-code rotation. */
export async function sendSmsToSelf(keel: Keel, userId: string, request: RequestRef): Promise<CodeSent> {
  if (!keel.config.ENABLE_2FA) throw mfaDisabled();
  return sendCodeTo(keel, await loadUser(keel, userId), `u:${userId}`, request);
}

/**
 * The SMS half of checkSecondFactor: the user's pending SMS code. Refused with 403 when the
 * organisation does not allow SMS MFA.
 */
export async function checkSmsCode(keel: Keel, user: User, code: string): Promise<boolean> {
  if (!smsEnrolled(user)) return false;
  await assertSmsAllowed(keel, user);
  const outcome = await checkCode(keel, SMS_CODE_PURPOSE, user.id, code);
  return outcome.ok;
}
