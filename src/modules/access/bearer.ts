/*
 * Who a bearer token is: an access token (a valid signature, a live session, an active user) or an API
 * key. The access module owns this because it holds both halves' last step (API keys live here); the
 * middleware that puts it on the request path is `src/http/authenticate.ts`.
 */
import type { Keel } from '../../keel.js';
import { unauthorized, invalidToken } from '../../platform/http/errors.js';
import { bearerToken } from '../../platform/http/bearer-token.js';
import { authenticateApiKey, API_KEY_PREFIX } from './api-keys.js';
import { identityOf } from '../identity/context.js';
import type { LiveSession } from '../identity/sessions.js';
import { asUserPrincipal, type Principal, type UserPrincipal } from '../identity/principal.js';

export type Resolved = { principal: Principal; session: LiveSession } | null;

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
export function knownSession(keel: Keel, token: string): Resolved | undefined {
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

/**
 * For account routes that are public or authenticated depending on the body (`/auth/mfa/verify`
 * without tempToken, `/auth/mfa/sms/send`): the bearer's user principal; 401 without a valid bearer,
 * 403 `user_required` for a valid API key, as `authenticate(keel, { principal: 'user' })` answers.
 */
export async function requireUserPrincipal(keel: Keel, authorization: string | undefined): Promise<UserPrincipal> {
  const token = bearerToken(authorization ?? '');
  if (!token) throw unauthorized();
  if (token.startsWith(API_KEY_PREFIX)) {
    const key = await authenticateApiKey(keel, token);
    if (!key) throw invalidToken();
    return asUserPrincipal(key);
  }
  const found = await sessionFromAccessToken(keel, token);
  if (!found) throw invalidToken();
  return asUserPrincipal(found.principal);
}
