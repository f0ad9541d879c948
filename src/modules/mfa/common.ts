import { eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { AppError, forbidden, unauthorized } from '../../platform/http/errors.js';
import type { Limit } from '../../platform/rate-limit.js';
import { users } from '../identity/schema.js';
import { verifyPassword } from '../identity/passwords.js';
import type { User } from '../identity/service.js';

/** Pieces shared by the TOTP, SMS and passkey services of the MFA module. */

export const mfaDisabled = () => new AppError(404, 'not_found', 'Multi-factor authentication is not enabled on this server');
export const invalidCode = (status: 400 | 401) => new AppError(status, 'invalid_code', 'The code is not valid');
export const invalidTempToken = () => unauthorized('The sign-in attempt expired: sign in again', 'invalid_temp_token');
export const smsNotAllowed = () => forbidden('Your organization does not allow SMS MFA', 'sms_not_allowed');
export const passkeyNotAllowed = () => forbidden('Your organization does not allow passkeys', 'passkey_not_allowed');
export const invalidCurrentPassword = () => new AppError(400, 'invalid_current_password', 'The current password is not correct');

export async function loadUser(keel: Keel, userId: string): Promise<User> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw unauthorized();
  return user;
}

interface MfaLimits {
  verify: Limit;
  passwordReentry: Limit;
  phoneVerifyUser: Limit;
  smsPerPhone: Limit;
  smsPerLogin: Limit;
}

const limitsByKeel = new WeakMap<Keel, MfaLimits>();

/** The MFA module's named limits (DECISIONS "Limits"), defined once per Keel. */
export function mfaLimits(keel: Keel): MfaLimits {
  let l = limitsByKeel.get(keel);
  if (!l) {
    const c = keel.config;
    l = {
      /** MFA verification attempts per user, separate from the login limit. */
      verify: keel.limits.define('mfa-verify', c.MFA_VERIFY_LIMIT, c.MFA_VERIFY_WINDOW_SECONDS),
      /** Password re-entry for passkey registration and deletion, per user per 15 minutes. */
      passwordReentry: keel.limits.define('password-reentry', c.PASSWORD_REENTRY_LIMIT, 900),
      /** Phone verification requests per user per hour. */
      phoneVerifyUser: keel.limits.define('phone-verify-user', c.PHONE_VERIFY_HOURLY_LIMIT, 3600),
      /** Every SMS Keel sends to one number (verification and login), per hour, across all users. */
      smsPerPhone: keel.limits.define('sms-phone', c.SMS_PER_PHONE_HOURLY_LIMIT, 3600),
      /** Login SMS sends per temp token (or per user when asked by a signed-in user). */
      smsPerLogin: keel.limits.define('sms-login', c.SMS_PER_TEMP_TOKEN_LIMIT, 600),
    };
    limitsByKeel.set(keel, l);
  }
  return l;
}

/** Password re-entry (passkey registration and deletion): its own limit, not the login limit or lockout. */
export async function reenterPassword(keel: Keel, user: User, password: string): Promise<void> {
  await mfaLimits(keel).passwordReentry.consume(user.id);
  if (!user.passwordHash || !(await verifyPassword(user.passwordHash, password))) throw invalidCurrentPassword();
}
