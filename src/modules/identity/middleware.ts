import type { MiddlewareHandler } from 'hono';
import { documentAccess } from '../../platform/http/route-docs.js';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { unauthorized } from '../../platform/http/errors.js';
import { authenticateApiKey, API_KEY_PREFIX } from '../access/api-keys.js';
import { identityOf } from './context.js';
import type { LiveSession } from './sessions.js';
import { asUserPrincipal, type Principal, type PrincipalKind, type UserPrincipal } from './principal.js';
import { getAccessSummary } from '../access/service.js';
import { forceMfaSatisfied, mfaEnrollmentRequired } from '../mfa/policy.js';

type Resolved = { principal: Principal; session: LiveSession } | null;

/** Resolves an access token to its principal and live session: a valid signature, a live session, an active user. */
export async function sessionFromAccessToken(keel: Keel, token: string): Promise<Resolved> {
  const identity = identityOf(keel);
  const claims = await identity.tokens.verify(token);
  if (!claims) return null;
  return resolved(claims.sub, await identity.sessions.lookup(claims.sid));
}

/**
 * `sessionFromAccessToken` answered from the caches alone, without waiting (a token and session seen
 * before: nearly every request); undefined when something must be read or verified first.
 */
function knownSession(keel: Keel, token: string): Resolved | undefined {
  const identity = identityOf(keel);
  const claims = identity.tokens.known(token);
  if (claims === undefined) return undefined;
  if (claims === null) return null;
  const session = identity.sessions.cached(claims.sid);
  return session === undefined ? undefined : resolved(claims.sub, session);
}

function resolved(subject: string, session: LiveSession | null): Resolved {
  if (!session || session.userId !== subject) return null;
  return {
    session,
    principal: {
      kind: 'user',
      userId: session.userId,
      email: session.email,
      sessionId: session.id,
      mfa: session.mfa,
      isPlatformAdmin: session.isPlatformAdmin,
      apiKeyId: null,
    },
  };
}

export interface AuthenticateOptions {
  /**
   * Skip the Force MFA gate (428): only for the routes a user needs to enrol a factor (DECISIONS:
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
    const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
    const token = match?.[1];
    if (!token) throw unauthorized();
    if (token.startsWith(API_KEY_PREFIX)) {
      const principal = await authenticateApiKey(keel, token);
      if (!principal) throw unauthorized('The access token is invalid or expired', 'invalid_token');
      c.set('principal', opts.principal === 'user' ? asUserPrincipal(principal) : principal);
      return next();
    }
    const known = knownSession(keel, token);
    const found = known === undefined ? await sessionFromAccessToken(keel, token) : known;
    if (!found) throw unauthorized('The access token is invalid or expired', 'invalid_token');
    c.set('principal', found.principal);
    if (!opts.allowUnenrolled && keel.config.ENABLE_2FA && !found.session.enrolled.includes('totp')) {
      const summary = await getAccessSummary(keel.db, { id: found.principal.userId, isPlatformAdmin: found.principal.isPlatformAdmin });
      if (!(await forceMfaSatisfied(keel, summary, found.session.enrolled))) throw mfaEnrollmentRequired();
      // requireScope reuses it instead of reading the membership again.
      c.set('accessSummary', summary);
    }
    return next();
  };
  return documentAccess(mw, { auth: opts.principal ?? 'any' });
}

/**
 * For account routes that are public or authenticated depending on the body (`/auth/mfa/verify`
 * without tempToken, `/auth/mfa/sms/send`): the bearer's user principal; 401 without a valid bearer,
 * 403 `user_required` for a valid API key, as `authenticate(keel, { principal: 'user' })` answers.
 */
export async function requireUserPrincipal(keel: Keel, authorization: string | undefined): Promise<UserPrincipal> {
  const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
  if (!token) throw unauthorized();
  if (token.startsWith(API_KEY_PREFIX)) {
    const key = await authenticateApiKey(keel, token);
    if (!key) throw unauthorized('The access token is invalid or expired', 'invalid_token');
    return asUserPrincipal(key);
  }
  const found = await sessionFromAccessToken(keel, token);
  if (!found) throw unauthorized('The access token is invalid or expired', 'invalid_token');
  return asUserPrincipal(found.principal);
}
