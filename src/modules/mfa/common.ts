import { eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { unauthorized, platformError } from '../../platform/http/errors.js';
import type { Limit } from '../../platform/rate-limit.js';
import { users } from '../identity/schema.js';
import type { User } from '../identity/service.js';
import { mfaError } from './errors.js';

/** Pieces shared by the TOTP, SMS and passkey services of the MFA module. */

export const mfaDisabled = () => platformError('not_found', { message: 'Multi-factor authentication is not enabled on this server' });
export const invalidCode = (status: 400 | 401) => mfaError('invalid_code', { status });
export const invalidTempToken = () => mfaError('invalid_temp_token');

export async function loadUser(keel: Keel, userId: string): Promise<User> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw unauthorized();
  return user;
}

export interface MfaLimits {
  verify: Limit;
  phoneVerifyUser: Limit;
  phoneVerifyPhone: Limit;
  phoneVerifyTenantless: Limit;
  smsPerPhone: Limit;
  smsPerLogin: Limit;
  passkeyChallengesUser: Limit;
  passkeyChallengesLogin: Limit;
  passkeySignIn: Limit;
}

/** A browser asks once per ceremony; these leave room for retries and several tabs, not for flooding. */
export const PASSKEY_CHALLENGES_PER_USER = 20;
export const PASSKEY_CHALLENGES_PER_TEMP_TOKEN = 5;

/** The MFA module's named limits, in its handle (webauthn.ts `installMfa`). */
export function mfaLimits(keel: Keel): MfaLimits {
  return keel.modules.get('mfa').limits;
}

/** Defines the MFA module's limits, once per Keel (when the module is installed). */
export function defineMfaLimits(keel: Keel): MfaLimits {
  const c = keel.config;
  const limits = keel.limits;
  return {
    /** MFA verification attempts per user, separate from the login limit. */
    verify: limits.define('mfa-verify', c.MFA_VERIFY_LIMIT, c.MFA_VERIFY_WINDOW_SECONDS),
    /** Phone verification requests per user per hour. */
    phoneVerifyUser: limits.define('phone-verify-user', c.PHONE_VERIFY_HOURLY_LIMIT, 3600),
    /**
     * Verification texts to one number per hour, across all users. A bucket of its own: asking for
     * codes to someone else's number never spends that number's sign-in budget (smsPerPhone).
     */
    phoneVerifyPhone: limits.define('phone-verify-phone', c.PHONE_VERIFY_PER_PHONE_HOURLY_LIMIT, 3600),
    /** Verification texts per day from an account with no partner or organisation (self-registered). */
    phoneVerifyTenantless: limits.define('phone-verify-tenantless', c.PHONE_VERIFY_TENANTLESS_DAILY_LIMIT, 86_400),
    /** Sign-in texts to one number per hour, across all users. */
    smsPerPhone: limits.define('sms-phone', c.SMS_PER_PHONE_HOURLY_LIMIT, 3600),
    /** Login SMS sends per temp token (or per user when asked by a signed-in user). */
    smsPerLogin: limits.define('sms-login', c.SMS_PER_TEMP_TOKEN_LIMIT, 600),
    /** WebAuthn challenges (registration and sign-in options) per user per 5 minutes: each one is a stored row. */
    passkeyChallengesUser: limits.define('passkey-challenge-user', PASSKEY_CHALLENGES_PER_USER, 300),
    /** Sign-in challenges per temp token (its 5-minute life). */
    passkeyChallengesLogin: limits.define('passkey-challenge-login', PASSKEY_CHALLENGES_PER_TEMP_TOKEN, 300),
    /** Passkey sign-in challenges per source address (and per email when one is given) per minute: each is a stored row. */
    passkeySignIn: limits.define('passkey-signin', c.PASSKEY_SIGNIN_LIMIT, 60),
  };
}
