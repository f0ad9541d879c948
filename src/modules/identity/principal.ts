import { identityError } from './errors.js';

/** Who is calling: a signed-in user (access token) or an API key acting for its creator. */
export interface Principal {
  kind: 'user' | 'api_key';
  userId: string;
  email: string;
  /** Access tokens: the session (refresh family) id; null for API keys. */
  sessionId: string | null;
  /** True when the session was established with a second factor (step-up). API keys never. */
  mfa: boolean;
  isPlatformAdmin: boolean;
  /** API keys: the key's id. */
  apiKeyId: string | null;
}

/** A signed-in person acting through one of their sessions. */
export type UserPrincipal = Principal & { kind: 'user'; sessionId: string };

/**
 * Which kind of principal a route accepts. `user`: the account routes (`/auth/*` self-service,
 * `/users/me`): sessions, password, factors, profile; an API key there is 403 `user_required`.
 * `any`: resource routes, where an API key acts within its permissions.
 */
export type PrincipalKind = 'user' | 'any';

export const userRequired = () => identityError('user_required');

/**
 * The one decision "may this principal act on an account route": a user with a session. Every
 * account route reaches it through `authenticate(keel, { principal: 'user' })`, `userPrincipal(c)` or
 * `requireUserPrincipal` (routes public or authenticated depending on the body).
 */
export function asUserPrincipal(principal: Principal): UserPrincipal {
  if (principal.kind !== 'user' || principal.sessionId === null) throw userRequired();
  return principal as UserPrincipal;
}
