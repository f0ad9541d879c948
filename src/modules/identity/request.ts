import type { Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { z } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { asUserPrincipal, type Principal, type UserPrincipal } from './principal.js';
import type { RequestInfo, TokenAnswer } from './service.js';
import { SelfProfileSchema } from './profile.js';
import { REFRESH_IDLE_MS } from './sessions.js';
import { constantTimeEqual } from '../../platform/crypto.js';
import { sessionIdOf } from './tokens.js';
import { csrfValueFor } from './csrf.js';

export const REFRESH_COOKIE = 'service_refresh_token';
export const CSRF_COOKIE = 'service_csrf';
export const CSRF_HEADER = 'x-service-csrf';
const REFRESH_COOKIE_PATH = '/api/v1/auth';

/** The principal of an authenticated route, or undefined on public routes. */
export function principalOf(c: Context<AppEnv>): Principal | undefined {
  // Typed as always present for authenticated routes; public routes never set it.
  const principal: Principal | undefined = c.get('principal');
  return principal;
}

/** The caller of an account route (`authenticate(keel, { principal: 'user' })`): a user with a session. */
export function userPrincipal(c: Context<AppEnv>): UserPrincipal {
  return asUserPrincipal(c.get('principal'));
}

/** Request facts for sessions and audit entries. */
export function requestInfo(c: Context<AppEnv>): RequestInfo {
  const p = principalOf(c);
  return {
    actor: p ? { type: p.kind, id: p.kind === 'api_key' ? p.apiKeyId : p.userId, email: p.email } : { type: 'anonymous' },
    ip: c.get('ip') || null,
    userAgent: c.req.header('user-agent') ?? null,
    requestId: c.get('requestId'),
    traceparent: c.get('traceparent'),
  };
}

/**
 * Sets the refresh token as an HttpOnly cookie scoped to the auth routes, and a readable CSRF cookie
 * beside it (bound to the session) whose value the client echoes in `x-service-csrf` when refreshing by cookie.
 */
export function setSessionCookies(c: Context<AppEnv>, keel: Keel, refreshToken: string, sessionId: string): void {
  const secure = keel.config.production;
  const maxAge = Math.floor(REFRESH_IDLE_MS / 1000);
  setCookie(c, REFRESH_COOKIE, refreshToken, { httpOnly: true, secure, sameSite: 'Lax', path: REFRESH_COOKIE_PATH, maxAge });
  setCookie(c, CSRF_COOKIE, csrfValueFor(keel, sessionId), { httpOnly: false, secure, sameSite: 'Lax', path: '/', maxAge });
}

export function clearSessionCookies(c: Context<AppEnv>, keel: Keel): void {
  const secure = keel.config.production;
  deleteCookie(c, REFRESH_COOKIE, { path: REFRESH_COOKIE_PATH, secure, httpOnly: true, sameSite: 'Lax' });
  deleteCookie(c, CSRF_COOKIE, { path: '/', secure, sameSite: 'Lax' });
}

/**
 * The refresh token of a cookie request and its CSRF value: `csrf` is the `service_csrf` cookie when
 * present and equal to the `x-service-csrf` header (double submit, constant-time), else null. That
 * the value belongs to the token's session is checked when the token is rotated (csrfMatchesSession).
 * Undefined without a refresh cookie.
 */
export function refreshTokenFromCookie(c: Context<AppEnv>): { token: string; csrf: string | null } | undefined {
  const token = getCookie(c, REFRESH_COOKIE);
  if (!token) return undefined;
  const cookie = getCookie(c, CSRF_COOKIE) ?? '';
  const header = c.req.header(CSRF_HEADER) ?? '';
  return { token, csrf: cookie.length > 0 && constantTimeEqual(cookie, header) ? cookie : null };
}

/** Answers a token-issuing request: the flat body plus the session cookies. */
export function tokenResponse(c: Context<AppEnv>, keel: Keel, answer: TokenAnswer): TokenAnswer {
  setSessionCookies(c, keel, answer.refreshToken, sessionIdOf(answer.accessToken));
  return answer;
}

export const TokenAnswerSchema = z
  .object({
    accessToken: z.string().openapi({ description: 'JWT access token, sent as `Authorization: Bearer <accessToken>`; valid `expiresIn` seconds' }),
    refreshToken: z.string().openapi({
      description: 'Opaque refresh token for POST /auth/refresh (single use: each refresh rotates it). Also set as the HttpOnly cookie `service_refresh_token`; valid 7 days idle, 30 days at most',
    }),
    tokenType: z.literal('Bearer').openapi({ description: 'Always `Bearer`' }),
    expiresIn: z.number().int().openapi({ description: 'Lifetime of the access token in seconds (900)', example: 900 }),
    user: SelfProfileSchema,
  })
  .openapi('TokenAnswer');

