import type { Context, MiddlewareHandler } from 'hono';
import { and, eq, inArray, isNull, or, sql, type SQL, type AnyColumn } from 'drizzle-orm';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { AppError, badRequest, forbidden, notFound, unauthorized, validationError } from '../../platform/http/errors.js';
import type { Principal } from '../identity/principal.js';
import { organizations, partners } from '../tenancy/schema.js';
import { PermissionSet } from './permissions.js';
import { getAccessSummary, type AccessSummary, type OrgAccess, type Scope } from './service.js';
import { apiKeyAccessSummary } from './api-keys.js';

/**
 * What a request may do, resolved once per request by `requireScope` and read with `c.get('access')`.
 *
 * - `scope` is the caller's own scope: `organization` (an organisation user), `partner` (a partner
 *   user), `system` (a platform administrator).
 * - `orgId` is the organisation the request acts in: an organisation user's own; for partner and
 *   system callers the one they named with `orgId` (query, body or path), checked reachable; else null.
 * - `partnerId` is a partner user's partner, or the partner a system caller named (or that owns the
 *   organisation it named); null for organisation users and unnamed system calls.
 */
export interface AccessContext {
  principal: Principal;
  scope: Scope;
  isPlatformAdmin: boolean;
  partnerId: string | null;
  orgId: string | null;
  /** The organisation user's own organisation (null for other scopes). */
  homeOrgId: string | null;
  roleId: string | null;
  orgAccess: OrgAccess | null;
  orgIds: string[];
  /** null: every site / device group of the organisation. */
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
  forceMfa: boolean;
  permissions: PermissionSet;
  can(resource: string, action: string): boolean;
}

export interface ScopeOptions {
  /** Only these caller scopes may use the route (others: 403). */
  scopes?: Scope[];
  /** The request must act in one organisation: partner and system callers must name it (400 `org_required`). */
  requireOrg?: boolean;
  /** Partner users need `orgAccess: all` (403 `full_org_access_required`): user and role administration. */
  fullOrgAccess?: boolean;
  /** Name of a path parameter that names the organisation (e.g. `orgId` in /orgs/:orgId/sites). */
  orgIdParam?: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const contextRequired = () => new AppError(403, 'context_required', 'Partner or organization context is required');
export const fullOrgAccessRequired = () => new AppError(403, 'full_org_access_required', 'Full partner organization access is required');
export const orgRequired = () => badRequest('org_required', 'Organization context is required: name the organization with orgId');

async function bodyField(c: Context, field: string): Promise<unknown> {
  if (!['POST', 'PUT', 'PATCH', 'DELETE'].includes(c.req.method)) return undefined;
  if (!/json/i.test(c.req.header('content-type') ?? '')) return undefined;
  try {
    // Hono caches the parsed body, so the route's validator reads the same object again.
    const body: unknown = await c.req.json();
    return body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>)[field] : undefined;
  } catch {
    return undefined; // the route's validator answers the malformed body
  }
}

/** An id named by the query, the JSON body or a path parameter; they must agree when several are given. */
async function namedId(c: Context, field: string, param?: string): Promise<string | null> {
  const values = new Set<string>();
  const fromQuery = c.req.query(field);
  if (fromQuery !== undefined && fromQuery !== '') values.add(fromQuery.toLowerCase());
  const fromBody = await bodyField(c, field);
  if (fromBody !== undefined && fromBody !== null) {
    if (typeof fromBody !== 'string') throw validationError([{ path: field, message: 'must be a UUID' }]);
    values.add(fromBody.toLowerCase());
  }
  const fromParam = param ? c.req.param(param) : undefined;
  if (fromParam) values.add(fromParam.toLowerCase());
  if (values.size === 0) return null;
  if (values.size > 1) throw badRequest(`${field}_mismatch`, `The ${field} given in the query, body and path must agree`);
  const value = [...values][0] ?? '';
  if (!UUID.test(value)) {
    // A malformed path id reads as "not found", like any id that names nothing.
    if (fromParam) throw notFound('Organization');
    throw validationError([{ path: field, message: 'must be a UUID' }]);
  }
  return value;
}

function buildContext(principal: Principal, s: AccessSummary & { scope: Scope }): AccessContext {
  const permissions = new PermissionSet(s.permissions);
  return {
    principal,
    scope: s.scope,
    isPlatformAdmin: s.scope === 'system',
    partnerId: s.partnerId,
    orgId: s.orgId,
    homeOrgId: s.scope === 'organization' ? s.orgId : null,
    roleId: s.roleId,
    orgAccess: s.orgAccess,
    orgIds: s.orgIds,
    siteIds: s.siteIds,
    deviceGroupIds: s.deviceGroupIds,
    forceMfa: s.forceMfa,
    permissions,
    can: (resource, action) => permissions.has(resource, action),
  };
}

/** Whether a partner user's `orgAccess` lets them into an organisation of their partner. */
export function partnerOrgAllowed(access: Pick<AccessContext, 'orgAccess' | 'orgIds'>, orgId: string): boolean {
  if (access.orgAccess === 'all') return true;
  if (access.orgAccess === 'selected') return access.orgIds.includes(orgId);
  return false;
}

export type OrgRow = typeof organizations.$inferSelect;

/**
 * The organisation if the caller may act in it, else null (answer 404: never reveal that it exists).
 * System: any. Partner users: their partner's organisations, filtered by `orgAccess`. Organisation
 * users: their own.
 */
export async function reachOrg(db: Db, access: AccessContext, orgId: string): Promise<OrgRow | null> {
  if (!UUID.test(orgId)) return null;
  if (access.scope === 'organization' && orgId !== access.homeOrgId) return null;
  const [org] = await db.select().from(organizations).where(eq(organizations.id, orgId));
  if (!org) return null;
  if (access.scope === 'partner' && (org.partnerId !== access.partnerId || !partnerOrgAllowed(access, org.id))) return null;
  return org;
}

/** Like reachOrg, but throws 404 when the organisation cannot be reached. */
export async function mustReachOrg(db: Db, access: AccessContext, orgId: string): Promise<OrgRow> {
  const org = await reachOrg(db, access, orgId);
  if (!org) throw notFound('Organization');
  return org;
}

/** The principal's access summary: a user's, or for an API key its creator's narrowed to the key. */
export async function summaryFor(keel: Keel, principal: Principal): Promise<AccessSummary> {
  if (principal.kind === 'api_key') {
    const s = await apiKeyAccessSummary(keel, principal);
    if (!s) throw unauthorized('The access token is invalid or expired', 'invalid_token');
    return s;
  }
  return getAccessSummary(keel.db, { id: principal.userId, isPlatformAdmin: principal.isPlatformAdmin });
}

/**
 * Resolves the request's scope (SPEC 5.7, DECISIONS "Scopes" and "Naming the organisation") and sets
 * `c.get('access')`. Runs after `authenticate`. Users with no association: 403 `context_required`.
 * An `orgId` or `partnerId` the caller cannot reach: 404.
 */
export function requireScope(keel: Keel, opts: ScopeOptions = {}): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const principal = c.get('principal') as Principal | undefined;
    if (!principal) throw unauthorized();
    const early = principal.kind === 'user' ? c.get('accessSummary') : undefined;
    const summary = early ?? (await summaryFor(keel, principal));
    if (summary.scope === null) throw contextRequired();
    const access = buildContext(principal, { ...summary, scope: summary.scope });
    if (opts.scopes && !opts.scopes.includes(access.scope)) throw forbidden('This operation is not available in your scope', 'scope_forbidden');
    if (opts.fullOrgAccess && access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();

    const namedOrg = await namedId(c, 'orgId', opts.orgIdParam);
    const namedPartner = await namedId(c, 'partnerId');
    if (access.scope === 'organization') {
      if (namedOrg && namedOrg !== access.homeOrgId) throw notFound('Organization');
      if (namedPartner) throw notFound('Partner');
    } else if (access.scope === 'partner') {
      if (namedPartner && namedPartner !== access.partnerId) throw notFound('Partner');
      if (namedOrg) access.orgId = (await mustReachOrg(keel.db, access, namedOrg)).id;
    } else {
      if (namedOrg) {
        const org = await mustReachOrg(keel.db, access, namedOrg);
        if (namedPartner && org.partnerId !== namedPartner) throw notFound('Organization');
        access.orgId = org.id;
        access.partnerId = org.partnerId;
      } else if (namedPartner) {
        const [p] = await keel.db.select({ id: partners.id }).from(partners).where(eq(partners.id, namedPartner));
        if (!p) throw notFound('Partner');
        access.partnerId = p.id;
      }
    }
    if (opts.requireOrg && !access.orgId) throw orgRequired();
    c.set('access', access);
    await next();
  };
}

export function accessOf(c: Context<AppEnv>): AccessContext {
  const access = c.get('access') as AccessContext | undefined;
  if (!access) throw new Error('requireScope must run before this handler');
  return access;
}

export const permissionDenied = (resource: string, action: string) =>
  new AppError(403, 'permission_denied', `You need the ${resource}:${action} permission for this`, { required: `${resource}:${action}` });

/** Requires a permission of the caller's effective set (after requireScope). */
export function requirePermission(resource: string, action: string): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (!accessOf(c).can(resource, action)) throw permissionDenied(resource, action);
    await next();
  };
}

/** Partner users need `orgAccess: all` (after requireScope). Other scopes pass. */
export const requireFullOrgAccess: MiddlewareHandler<AppEnv> = async (c, next) => {
  const access = accessOf(c);
  if (access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();
  await next();
};

export interface GuardOptions extends ScopeOptions {
  /** `[resource, action]` the caller needs. */
  permission?: readonly [string, string];
}

/**
 * The usual middleware chain of a protected route after `authenticate`: scope, then permission.
 * Use as `middleware: [authenticate(keel), ...guard(keel, { permission: ['users', 'read'] })]`.
 */
export function guard(keel: Keel, opts: GuardOptions = {}): MiddlewareHandler<AppEnv>[] {
  const chain = [requireScope(keel, opts)];
  if (opts.permission) chain.push(requirePermission(opts.permission[0], opts.permission[1]));
  return chain;
}

/** Site and device-group restriction of an organisation user (SPEC 2.3); null lists mean "all". */
export interface Restriction {
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
}

/** Whether a device (or anything placed by site and group) passes the caller's site and group filters. */
export function canSeePlacement(r: Restriction, item: { siteId: string | null; deviceGroupId: string | null }): boolean {
  if (r.siteIds !== null && (item.siteId === null || !r.siteIds.includes(item.siteId))) return false;
  if (r.deviceGroupIds !== null && (item.deviceGroupId === null || !r.deviceGroupIds.includes(item.deviceGroupId))) return false;
  return true;
}

/**
 * A SQL condition for lists of devices (or anything with site and group columns): both filters must
 * pass (DECISIONS). Undefined when the caller is not restricted. Use inside `and(...)`.
 */
export function placementFilter(r: Restriction, cols: { siteId: AnyColumn; deviceGroupId: AnyColumn }): SQL | undefined {
  const parts: SQL[] = [];
  if (r.siteIds !== null) parts.push(r.siteIds.length > 0 ? inArray(cols.siteId, r.siteIds) : sql`false`);
  if (r.deviceGroupIds !== null) parts.push(r.deviceGroupIds.length > 0 ? inArray(cols.deviceGroupId, r.deviceGroupIds) : sql`false`);
  return parts.length > 0 ? and(...parts) : undefined;
}

/** Filter for a list of sites by the caller's site restriction. */
export function siteListFilter(r: Restriction, idColumn: AnyColumn): SQL | undefined {
  return r.siteIds === null ? undefined : r.siteIds.length > 0 ? inArray(idColumn, r.siteIds) : sql`false`;
}

/** Filter for a list of device groups by the caller's group restriction (and site restriction, when the group has a site). */
export function groupListFilter(r: Restriction, cols: { id: AnyColumn; siteId: AnyColumn }): SQL | undefined {
  const parts: SQL[] = [];
  if (r.deviceGroupIds !== null) parts.push(r.deviceGroupIds.length > 0 ? inArray(cols.id, r.deviceGroupIds) : sql`false`);
  if (r.siteIds !== null) parts.push(r.siteIds.length > 0 ? (or(isNull(cols.siteId), inArray(cols.siteId, r.siteIds)) as SQL) : isNull(cols.siteId));
  return parts.length > 0 ? and(...parts) : undefined;
}
