import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { AppError, forbidden } from '../../platform/http/errors.js';
import type { AccessSummary } from '../access/service.js';
import { effectiveSecurity, type SecurityPolicy } from '../tenancy/service.js';

export type MfaMethod = 'totp' | 'sms' | 'passkey';

const OPEN_POLICY: SecurityPolicy = { requireMfa: false, allowedMfaMethods: { totp: true, sms: true, passkey: true } };

/** The MFA policy binding a user (organisation and partner settings, stricter wins); open without an association. */
export async function securityPolicy(keel: Keel, access: Pick<AccessSummary, 'orgId' | 'partnerId'>): Promise<SecurityPolicy> {
  if (access.orgId) return effectiveSecurity(keel.db, { orgId: access.orgId });
  if (access.partnerId) return effectiveSecurity(keel.db, { partnerId: access.partnerId });
  return OPEN_POLICY;
}

export const mfaEnrollmentRequired = () =>
  new AppError(428, 'mfa_enrollment_required', 'Your role requires multi-factor authentication: enrol an authenticator app first');

/**
 * Force MFA (428): a user whose role (or an ancestor) has `forceMfa` must have a factor enrolled. TOTP
 * always satisfies it; SMS and passkeys when the effective policy allows them. Decided from the
 * user's current enrolment, so a token issued before enrolment works once a factor is enrolled.
 */
export async function forceMfaSatisfied(keel: Keel, access: AccessSummary, enrolled: readonly MfaMethod[]): Promise<boolean> {
  if (!keel.config.ENABLE_2FA || !access.forceMfa) return true;
  if (enrolled.includes('totp')) return true;
  if (enrolled.length === 0) return false;
  return forceMfaSatisfiedUnder(keel, access, await securityPolicy(keel, access), enrolled);
}

/** forceMfaSatisfied with the policy already read (for decisions taken inside a transaction). */
export function forceMfaSatisfiedUnder(keel: Keel, access: AccessSummary, policy: SecurityPolicy, enrolled: readonly MfaMethod[]): boolean {
  if (!keel.config.ENABLE_2FA || !access.forceMfa) return true;
  if (enrolled.includes('totp')) return true;
  return enrolled.some((m) => policy.allowedMfaMethods[m]);
}

/**
 * Step-up: the route needs a session established with a second factor (`mfa: true`). API keys never
 * qualify. With ENABLE_2FA=false the check is off.
 */
export function requireMfa(keel: Keel): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (keel.config.ENABLE_2FA && !c.get('principal').mfa) {
      throw forbidden('This action needs a session verified with a second factor: sign in again with MFA', 'mfa_required');
    }
    await next();
  };
}
