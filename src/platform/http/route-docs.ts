/**
 * What a route enforces, written into its OpenAPI operation by the same objects that enforce it, so the
 * document cannot disagree with the route (docs/decisions.md "API descriptions"). Each access middleware (authenticate, the scope
 * and permission guard, step-up, factor proof) carries an `AccessDoc`; `createRouter` reads the route's
 * middleware list when it registers the path and derives `security`, `operationId` and an "Access"
 * paragraph of the description. A new middleware that restricts access tags itself with `documentAccess`.
 */
import type { RouteConfig, z } from '@hono/zod-openapi';
import { errors, type ErrorStatus } from './schemas.js';

export interface AccessDoc {
  /** A bearer token is needed: `user` (access tokens only; API keys are refused) or `any` (API keys too). */
  auth?: 'user' | 'any';
  /** `resource:action` the caller needs. */
  permission?: string;
  /** Only these caller scopes. */
  scopes?: readonly string[];
  /** Partner users need `orgAccess: all`. */
  fullOrgAccess?: boolean;
  /** Callers restricted to some sites or device groups are refused (the route acts on the whole organisation). */
  wholeOrg?: boolean;
  /** A session established with a second factor (`mfa: true`). */
  mfa?: boolean;
  /** Once the user has a second factor, a session established with it. */
  factorProof?: boolean;
  /** A device token (an enrolled agent), not a user's token. */
  device?: boolean;
  /** The release channel's rule (agents/release-writer.ts): a platform administrator's session verified with a second factor. */
  releaseWriter?: boolean;
  /** The Force MFA gate (428 `mfa_enrollment_required` for a user whose role forces MFA and who has no factor). */
  mfaEnrolmentGate?: boolean;
  /** The caller's scope is resolved (403 `context_required` for a user with no association). */
  scoped?: boolean;
  /** A rate limit is taken before the handler (429 `rate_limited` with Retry-After). */
  limited?: boolean;
  /** Requests are shed under load before any work (503 `overloaded` with Retry-After). */
  overloadGate?: boolean;
  /**
   * Query parameters the middleware itself reads (the scope guard's `orgId` / `partnerId`): the route
   * accepts and documents them as if it had declared them (`withMiddlewareQuery`).
   */
  query?: z.ZodObject;
}

const ACCESS_DOC = Symbol.for('keel.accessDoc');

/** Tags an access middleware with what it enforces (returns the same function). */
export function documentAccess<T extends object>(middleware: T, doc: AccessDoc): T {
  (middleware as Record<symbol, AccessDoc>)[ACCESS_DOC] = doc;
  return middleware;
}

/** What a route's middleware list enforces, merged. */
export function accessOf(middleware: unknown): AccessDoc {
  const list: unknown[] = Array.isArray(middleware) ? middleware : middleware ? [middleware] : [];
  const merged: AccessDoc = {};
  for (const m of list) {
    const doc = (m as Record<symbol, AccessDoc | undefined> | null)?.[ACCESS_DOC];
    if (doc) Object.assign(merged, doc);
  }
  return merged;
}

export const SECURITY_SCHEMES = {
  bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Access token from /auth/login (15 minutes)' },
  apiKey: { type: 'http', scheme: 'bearer', description: 'API key (`kk_…`, from POST /api-keys), sent as a bearer token' },
  deviceToken: { type: 'http', scheme: 'bearer', description: 'Device token (`kd_…`, from POST /agents/enroll), sent as a bearer token by agents' },
} as const;

/** `get /users/{id}/role` → `getUsersByIdRole`: unique per method and path. */
export function operationIdOf(method: string, path: string): string {
  const words = path
    .split('/')
    .filter(Boolean)
    .map((seg) => (seg.startsWith('{') ? `by-${seg.slice(1, -1)}` : seg))
    .join('-')
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean);
  return method.toLowerCase() + words.map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join('');
}

/** The access sentence of a route's description. */
export function accessText(doc: AccessDoc): string {
  if (doc.device) return 'Access: a device token (Bearer, from POST /agents/enroll); user tokens and API keys are refused.';
  if (!doc.auth) return 'Access: public (no token).';
  if (doc.releaseWriter) {
    return 'Access: the release rule: a platform administrator\'s own session verified with a second factor (403 `mfa_required`, also with ENABLE_2FA=false); API keys are refused with 403 `user_required` whatever their permissions; refusals are audited (`agent.release.refused`).';
  }
  const parts = [doc.auth === 'user' ? 'a signed-in user (access token; API keys are refused with 403 `user_required`)' : 'an access token or an API key'];
  if (doc.scopes) parts.push(`caller scope ${doc.scopes.join(' or ')}`);
  if (doc.permission) parts.push(`permission \`${doc.permission}\``);
  if (doc.fullOrgAccess) parts.push('partner users need `orgAccess: all` (403 `full_org_access_required`)');
  if (doc.wholeOrg) parts.push('callers restricted to some sites or device groups are refused (403 `whole_org_access_required`)');
  if (doc.mfa) parts.push('a session established with a second factor (403 `mfa_required`)');
  if (doc.factorProof) parts.push('once the user has a second factor, a session established with it (403 `mfa_required`)');
  return `Access: ${parts.join('; ')}.`;
}

/**
 * The route with the query parameters its middleware reads added to the ones it declares (a route's
 * own declaration of a name wins). Both the document and the validator use the result, so a query
 * parameter is accepted exactly when the document describes it (docs/decisions.md "Query parameters").
 */
export function withMiddlewareQuery<R extends RouteConfig & { middleware?: unknown }>(config: R): R {
  const extra = accessOf(config.middleware).query;
  if (!extra) return config;
  const declared = config.request?.query as z.ZodObject | undefined;
  const add = Object.fromEntries(Object.entries(extra.shape).filter(([k]) => !declared?.shape[k]));
  if (Object.keys(add).length === 0) return config;
  const query = (declared ?? extra.pick({})).extend(add);
  return { ...config, request: { ...config.request, query } };
}

/** The statuses that can answer (401, 403, 404, 428, 429, 503); what a route's handler answers it declares itself. */
export type MiddlewareStatus = 401 | 403 | 404 | 428 | 429 | 503;

/**
 * The statuses a route's middleware can answer, from what it enforces: a token (401, and 503 when the
 * database behind the token is unavailable), a guard that can refuse (403), an id read from the query
 * that names nothing the caller reaches (404), the Force MFA gate (428), a
 * limiter (429), the overload gate (503).
 */
export function middlewareStatuses(doc: AccessDoc): MiddlewareStatus[] {
  const out = new Set<MiddlewareStatus>();
  if (doc.auth || doc.device) out.add(401).add(503);
  if (doc.auth === 'user' || doc.scoped || doc.permission || doc.scopes || doc.fullOrgAccess || doc.wholeOrg || doc.mfa || doc.factorProof || doc.releaseWriter) out.add(403);
  // A middleware that reads an id from the query (the scope guard's orgId / partnerId) answers 404 for one the caller cannot reach.
  if (doc.query) out.add(404);
  if (doc.mfaEnrolmentGate) out.add(428);
  if (doc.limited) out.add(429);
  if (doc.overloadGate) out.add(503);
  return [...out].sort((a, b) => a - b);
}

/**
 * The route as documented: security, operationId, the access paragraph and the statuses its middleware
 * can answer, derived from that middleware; `before` are the statuses of what every request of the
 * router passes first (the API gate).
 */
export function documentedRoute(config: RouteConfig & { middleware?: unknown }, before: readonly ErrorStatus[] = []): RouteConfig {
  const { middleware, hide: _hide, ...route } = config;
  const doc = accessOf(middleware);
  const description = [route.description, accessText(doc)].filter(Boolean).join('\n\n');
  return {
    ...route,
    // A status the handler answers too (a 403 of the service, a 503 of a dependency) keeps the route's own wording.
    responses: { ...errors(...new Set([...before, ...middlewareStatuses(doc)])), ...route.responses },
    operationId: route.operationId ?? operationIdOf(route.method, route.path),
    description,
    // A route that authenticates inside its handler depending on the body (a temp token or a bearer
    // token) declares its own `security` (with `{}` for "optional"); that declaration is kept.
    security: route.security ?? (doc.releaseWriter ? [{ bearerAuth: [] }] : doc.device ? [{ deviceToken: [] }] : doc.auth ? (doc.auth === 'user' ? [{ bearerAuth: [] }] : [{ bearerAuth: [] }, { apiKey: [] }]) : []),
  };
}
