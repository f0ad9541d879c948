import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { unauthorized } from '../../platform/http/errors.js';
import { authenticateApiKey, API_KEY_PREFIX } from '../access/api-keys.js';
import { identityOf } from './context.js';
import type { Principal } from './principal.js';

/** Resolves an access token to its principal: a valid signature, a live session, an active user. */
export async function principalFromAccessToken(keel: Keel, token: string): Promise<Principal | null> {
  const identity = identityOf(keel);
  const claims = await identity.tokens.verify(token);
  if (!claims) return null;
  const session = await identity.sessions.lookup(claims.sid);
  if (!session || session.userId !== claims.sub) return null;
  return {
    kind: 'user',
    userId: session.userId,
    email: session.email,
    sessionId: session.id,
    mfa: session.mfa,
    isPlatformAdmin: session.isPlatformAdmin,
    apiKeyId: null,
  };
}

/**
 * Requires `Authorization: Bearer <access token | API key>` and sets `principal`. Anything else is 401
 * with one answer, whatever was wrong with the token.
 */
export function authenticate(keel: Keel): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
    const token = match?.[1];
    if (!token) throw unauthorized();
    const principal = token.startsWith(API_KEY_PREFIX) ? await authenticateApiKey(keel, token) : await principalFromAccessToken(keel, token);
    if (!principal) throw unauthorized('The access token is invalid or expired', 'invalid_token');
    c.set('principal', principal);
    await next();
  };
}
