import type { Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { z } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { constantTimeEqual, randomToken } from '../../platform/crypto.js';
import type { Principal } from './principal.js';
import type { RequestInfo, TokenAnswer } from './service.js';
import { SelfProfileSchema } from './profile.js';
import { REFRESH_IDLE_MS } from './sessions.js';

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

/** Request facts for sessions and audit entries. */
export function requestInfo(c: Context<AppEnv>): RequestInfo {
  const p = principalOf(c);
  return {
    actor: p ? { type: p.kind, id: p.kind === 'api_key' ? p.apiKeyId : p.userId, email: p.email } : { type: 'anonymous' },
    ip: c.get('ip') || null,
    userAgent: c.req.header('user-agent') ?? null,
    requestId: c.get('requestId'),
  };
}

/**
 * Sets the refresh token as an HttpOnly cookie scoped to the auth routes, and a readable CSRF cookie
 * beside it whose value the client echoes in `x-service-csrf` when refreshing by cookie.
 */
export function setSessionCookies(c: Context<AppEnv>, keel: Keel, refreshToken: string): void {
  const secure = keel.config.production;
  const maxAge = Math.floor(REFRESH_IDLE_MS / 1000);
  setCookie(c, REFRESH_COOKIE, refreshToken, { httpOnly: true, secure, sameSite: 'Lax', path: REFRESH_COOKIE_PATH, maxAge });
  setCookie(c, CSRF_COOKIE, randomToken(24), { httpOnly: false, secure, sameSite: 'Lax', path: '/', maxAge });
}

export function clearSessionCookies(c: Context<AppEnv>, keel: Keel): void {
  const secure = keel.config.production;
  deleteCookie(c, REFRESH_COOKIE, { path: REFRESH_COOKIE_PATH, secure, httpOnly: true, sameSite: 'Lax' });
  deleteCookie(c, CSRF_COOKIE, { path: '/', secure, sameSite: 'Lax' });
}

/** The refresh token of a cookie request, after the CSRF double-submit check; undefined without a cookie. */
export function refreshTokenFromCookie(c: Context<AppEnv>): { token: string; csrfOk: boolean } | undefined {
  const token = getCookie(c, REFRESH_COOKIE);
  if (!token) return undefined;
  const cookie = getCookie(c, CSRF_COOKIE) ?? '';
  const header = c.req.header(CSRF_HEADER) ?? '';
  return { token, csrfOk: cookie.length > 0 && constantTimeEqual(cookie, header) };
}

/** Answers a token-issuing request: the flat body plus the session cookies. */
export function tokenResponse(c: Context<AppEnv>, keel: Keel, answer: TokenAnswer): TokenAnswer {
  setSessionCookies(c, keel, answer.refreshToken);
  return answer;
}

export const TokenAnswerSchema = z
  .object({
    accessToken: z.string(),
    refreshToken: z.string(),
    tokenType: z.literal('Bearer'),
    expiresIn: z.number().int(),
    user: SelfProfileSchema,
  })
  .openapi('TokenAnswer');

