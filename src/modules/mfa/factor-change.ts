import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { documentAccess } from '../../platform/http/route-docs.js';
import { identityOf } from '../identity/context.js';
import type { User } from '../identity/service.js';
import { loadUser } from './common.js';
import { enrolledMethods } from './login.js';
import { mfaRequired } from './policy.js';

/**
 * THE rule for changing second factors (docs/security.md "Findings", 2): once a user has any factor enrolled, enrolling,
 * replacing or removing a factor (TOTP setup and confirmation, phone verification, SMS enable, passkey
 * registration and deletion, turning MFA off) and regenerating recovery codes need a session that was
 * established with a second factor (`mfa: true`): 403 `mfa_required` otherwise. A user with no factor
 * has none to prove, so the first enrolment works from a password session. Off with ENABLE_2FA=false.
 */
export async function assertFactorChangeAllowed(keel: Keel, user: User, sessionMfa: boolean): Promise<void> {
  if (!keel.config.ENABLE_2FA || sessionMfa) return;
  if ((await enrolledMethods(keel, user)).length > 0) throw mfaRequired();
}

/** The route form of `assertFactorChangeAllowed`, after `authenticate(keel, { principal: 'user' })`. */
export function requireFactorProof(keel: Keel): MiddlewareHandler<AppEnv> {
  return documentAccess<MiddlewareHandler<AppEnv>>(async (c, next) => {
    const p = c.get('principal');
    await assertFactorChangeAllowed(keel, await loadUser(keel, p.userId), p.mfa);
    await next();
  }, { factorProof: true });
}

/**
 * After a factor was enrolled: every other session of the user that was not established with a second
 * factor ends (the caller's own was upgraded by the enrolment, or is kept when nothing upgrades it), so
 * an older password-only session cannot outlive the factor that now guards the account.
 */
export async function endSessionsWithoutMfa(keel: Keel, userId: string, keepSessionId: string | null): Promise<void> {
  await identityOf(keel).sessions.revokeWithoutMfa(userId, keepSessionId, 'mfa_enabled');
}
