import type { MiddlewareHandler } from 'hono';
import { documentAccess } from '../../platform/http/route-docs.js';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { AppError } from '../../platform/http/errors.js';
import type { AccessSummary } from '../access/service.js';
import { effectiveSecurity, type SecurityPolicy } from '../tenancy/service.js';
import { mfaError } from './errors.js';

export type MfaMethod = 'totp' | 'sms' | 'passkey';

const OPEN_POLICY: SecurityPolicy = { requireMfa: false, allowedMfaMethods: { totp: true, sms: true, passkey: true } };

/** The MFA policy binding a user (organisation and partner settings, stricter wins); open without an association. */
export async function securityPolicy(keel: Keel, access: Pick<AccessSummary, 'orgId' | 'partnerId'>): Promise<SecurityPolicy> {
  if (access.orgId) return effectiveSecurity(keel.db, { orgId: access.orgId });
  if (access.partnerId) return effectiveSecurity(keel.db, { partnerId: access.partnerId });
  return OPEN_POLICY;
}

const NOT_ALLOWED: Record<MfaMethod, () => AppError> = {
  totp: () => mfaError('totp_not_allowed'),
  sms: () => mfaError('sms_not_allowed'),
  passkey: () => mfaError('passkey_not_allowed'),
};

/** 403 `<method>_not_allowed` with the organisation's reason (the message for SMS of docs/specification.md "Errors"). */
export const methodNotAllowed = (method: MfaMethod): AppError => NOT_ALLOWED[method]();

/**
 * THE decision whether a second-factor method may be used under a policy (`allowedMfaMethods`), for
 * every method alike: at enrolment and at sign-in (offered, texted, checked), and for SMS and passkeys
 * under Force MFA. Nothing else reads `allowedMfaMethods`.
 */
export function methodAllowed(policy: SecurityPolicy, method: MfaMethod): boolean {
  return policy.allowedMfaMethods[method];
}

/** The enrolled methods the policy lets the user sign in with, in the given order (primary first). */
export function usableMethods<M extends MfaMethod>(policy: SecurityPolicy, enrolled: readonly M[]): M[] {
  return enrolled.filter((m) => methodAllowed(policy, m));
}

/** Throws 403 `<method>_not_allowed` unless the policy allows the method. */
export function assertMethodAllowed(policy: SecurityPolicy, method: MfaMethod): void {
  if (!methodAllowed(policy, method)) throw methodNotAllowed(method);
}

export const mfaEnrollmentRequired = () =>
  mfaError('mfa_enrollment_required');

/**
 * Force MFA (428): a user whose role (or an ancestor) has `forceMfa` must have a factor enrolled. An
 * authenticator app (TOTP) satisfies it (docs/specification.md "MFA"); SMS and passkeys only while the effective policy
 * allows them (`usableMethods`). Decided from the user's current enrolment, so a token issued before
 * enrolment works once a factor is enrolled, and an SMS-only user is gated again once SMS is turned off.
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
  return usableMethods(policy, enrolled).length > 0;
}

export const mfaRequired = () => mfaError('mfa_required');

/**
 * Step-up: the route needs a session established with a second factor (`mfa: true`). API keys never
 * qualify. With ENABLE_2FA=false the check is off.
 */
export function requireMfa(keel: Keel): MiddlewareHandler<AppEnv> {
  return documentAccess<MiddlewareHandler<AppEnv>>(async (c, next) => {
    if (keel.config.ENABLE_2FA && !c.get('principal').mfa) throw mfaRequired();
    await next();
  }, { mfa: true });
}
