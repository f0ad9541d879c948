import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../app-env.js';
import type { Keel } from '../keel.js';
import { documentAccess } from '../platform/http/route-docs.js';
import { unauthorized, invalidToken } from '../platform/http/errors.js';
import { asUserPrincipal, type PrincipalKind } from '../modules/identity/principal.js';
import { authenticateApiKey, API_KEY_PREFIX } from '../modules/access/api-keys.js';
import { knownSession, sessionFromAccessToken } from '../modules/access/bearer.js';
import { bearerToken } from '../platform/http/bearer-token.js';
import { getAccessSummary } from '../modules/access/service.js';
import { forceMfaSatisfied, mfaEnrollmentRequired } from '../modules/mfa/policy.js';

/*
 * The request path's first steps (docs/architecture.md "Request paths"): the bearer token, then the Force MFA
 * gate. It composes identity (sessions, tokens), access (API keys, the access summary) and mfa (the
 * policy), so it lives above all three, beside the routes that use it (docs/architecture.md). The
 * next step, scope and permission, is `guard` in modules/access/scope.ts.
 */

export interface AuthenticateOptions {
  /**
   * Skip the Force MFA gate (428): only for the routes a user needs to enrol a factor (docs/decisions.md "Tokens and sessions":
   * `/auth/me`, `/users/me`, logout, refresh, MFA, phone and passkey enrolment).
   */
  allowUnenrolled?: boolean;
  /**
   * Which principal may call the route (default `any`). Every account route (`/auth/*` self-service,
   * `/users/me`) says `user`: an API key there is 403 `user_required` (principal.ts decides).
   */
  principal?: PrincipalKind;
}

/**
 * Requires `Authorization: Bearer <access token | API key>` and sets `principal`. Anything else is 401
 * with one answer, whatever was wrong with the token. Then the Force MFA gate: a user whose role
 * forces MFA and who has no acceptable factor enrolled gets 428 (API keys are not gated).
 */
export function authenticate(keel: Keel, opts: AuthenticateOptions = {}): MiddlewareHandler<AppEnv> {
  const mw: MiddlewareHandler<AppEnv> = async (c, next) => {
    const token = bearerToken(c.req.header('authorization') ?? '');
    if (!token) throw unauthorized();
    if (token.startsWith(API_KEY_PREFIX)) {
      const principal = await authenticateApiKey(keel, token);
      if (!principal) throw invalidToken();
      c.set('principal', opts.principal === 'user' ? asUserPrincipal(principal) : principal);
      return next();
    }
    const known = knownSession(keel, token);
    const found = known === undefined ? await sessionFromAccessToken(keel, token) : known;
    if (!found) throw invalidToken();
    c.set('principal', found.principal);
    if (!opts.allowUnenrolled && keel.config.ENABLE_2FA && !found.session.enrolled.includes('totp')) {
      const summary = await getAccessSummary(keel, { id: found.principal.userId, isPlatformAdmin: found.principal.isPlatformAdmin });
      if (!(await forceMfaSatisfied(keel, summary, found.session.enrolled))) throw mfaEnrollmentRequired();
      // requireScope reuses it instead of reading the membership again.
      c.set('accessSummary', summary);
    }
    return next();
  };
  return documentAccess(mw, { auth: opts.principal ?? 'any', ...(opts.allowUnenrolled ? {} : { mfaEnrolmentGate: true }) });
}
