import type { Context, MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { z } from '@hono/zod-openapi';
import { documentAccess, type AccessDoc } from '../../platform/http/route-docs.js';
import { and, eq, inArray, isNull, or, sql, type SQL, type AnyColumn } from 'drizzle-orm';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { notFound, unauthorized, validationError, invalidToken, type AppError } from '../../platform/http/errors.js';
import { loggableError } from '../../platform/safe-error.js';
import { recordSecurityEvent } from '../audit/security-events.js';
import type { Principal } from '../identity/principal.js';
import { organizations, partners } from '../tenancy/schema.js';
import { PermissionSet } from './permissions.js';
import { getAccessSummary, type AccessSummary, type OrgAccess, type Scope } from './service.js';
import { apiKeyAccessSummary } from './api-keys.js';
import { cachedOrgTenant, type OrgTenant } from './org-cache.js';
import { accessError } from './errors.js';

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
  /**
   * Partner users need `orgAccess: all` (403 `full_org_access_required`), decided here and nowhere
   * else: every users and roles route, reads included (docs/specification.md "Tenant hierarchy and scopes"), and every partner-wide
   * write (partner settings, creating and deleting organisations). Checked before the permission,
   * any named organisation and the body, so such a user learns nothing more from these routes.
   */
  fullOrgAccess?: boolean;
  /** Name of a path parameter that names the organisation (e.g. `orgId` in /orgs/:orgId/sites). */
  orgIdParam?: string;
  /** Name of a path parameter that names the partner (e.g. `partnerId` in /partners/:partnerId/domains). */
  partnerIdParam?: string;
  /**
   * The route acts on the whole organisation (its settings, its webhooks, its SSO providers, its
   * enrolment keys): a caller restricted to some sites or device groups gets 403
   * `whole_org_access_required`, decided here and nowhere else (`restricted`). Reads that span sites
   * filter with `placementFilter` / `canSeePlacement` instead.
   */
  wholeOrg?: boolean;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const contextRequired = () => accessError('context_required');
export const fullOrgAccessRequired = () => accessError('full_org_access_required');
export const wholeOrgAccessRequired = () => accessError('whole_org_access_required');

/** Whether a caller is restricted to some sites or device groups (THE reading of the restriction). */
export const restricted = (r: Restriction): boolean => r.siteIds !== null || r.deviceGroupIds !== null;
export const orgRequired = () => accessError('org_required');

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
async function namedId(c: Context, field: 'orgId' | 'partnerId', param?: string): Promise<string | null> {
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
  if (values.size > 1) throw accessError(field === 'orgId' ? 'org_id_mismatch' : 'partner_id_mismatch');
  const value = [...values][0] ?? '';
  if (!UUID.test(value)) {
    // A malformed path id reads as "not found", like any id that names nothing.
    if (fromParam) throw notFound(field === 'orgId' ? 'Organization' : 'Partner');
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

/**
 * Which organisations a principal may see: THE one decision (docs/security.md "Findings", 4). Every read that spans
 * organisations (audit entries, role holders and counts, the user list, organisation lists; later
 * webhooks, devices, SSO providers) filters through it, never through its own reading of `orgAccess`.
 *
 * - `all`: every organisation (a platform administrator naming no partner or organisation).
 * - `partner`: organisations of `partnerId`. `orgIds` null: all of them, past and present (`orgAccess:
 *   all`, or a platform administrator naming the partner); else only these, and only while they belong
 *   to the partner (`selected`; `none` gives `[]`). Records of the partner itself (not of any
 *   organisation) are visible too: see `visiblePartnerId`.
 * - `org`: one organisation (an organisation user's own; any caller acting in a named organisation,
 *   which `requireScope` has checked it may enter).
 * - `nothing`: no partner or organisation context.
 *
 * How to use it in a new module: for a SQL list, `and(visibleOrgCondition(access, table.orgId), ...)`
 * (plus `visiblePartnerId(access)` for partner-level rows that carry no organisation); for one row in
 * hand, `canSeeOrg(access, org)`; to enter an organisation named by id, `reachOrg`/`mustReachOrg`.
 */
export type OrgVisibility =
  | { kind: 'all' }
  | { kind: 'partner'; partnerId: string; orgIds: readonly string[] | null }
  | { kind: 'org'; orgId: string }
  | { kind: 'nothing' };

export type VisibilityInput = Pick<AccessContext, 'scope' | 'partnerId' | 'orgId' | 'homeOrgId' | 'orgAccess' | 'orgIds'>;

export function visibleOrgs(access: VisibilityInput): OrgVisibility {
  if (access.orgId) return { kind: 'org', orgId: access.orgId };
  if (access.scope === 'organization') return access.homeOrgId ? { kind: 'org', orgId: access.homeOrgId } : { kind: 'nothing' };
  if (access.scope === 'partner') {
    if (!access.partnerId) return { kind: 'nothing' };
    const orgIds = access.orgAccess === 'all' ? null : access.orgAccess === 'selected' ? access.orgIds : [];
    return { kind: 'partner', partnerId: access.partnerId, orgIds };
  }
  // system
  return access.partnerId ? { kind: 'partner', partnerId: access.partnerId, orgIds: null } : { kind: 'all' };
}

/** The organisations a principal may enter by id: its visibility before the request named one organisation. */
function reachableOrgs(access: VisibilityInput): OrgVisibility {
  return visibleOrgs({ ...access, orgId: null });
}

/** Whether an organisation (a row in hand) is among those the caller may see. */
export function canSeeOrg(access: VisibilityInput | OrgVisibility, org: { id: string; partnerId: string | null }): boolean {
  const v = 'kind' in access ? access : visibleOrgs(access);
  switch (v.kind) {
    case 'all':
      return true;
    case 'org':
      return org.id === v.orgId;
    case 'partner':
      return org.partnerId === v.partnerId && (v.orgIds === null || v.orgIds.includes(org.id));
    case 'nothing':
      return false;
  }
}

/**
 * A SQL condition on a column holding an organisation id: true only for organisations the caller may
 * see (null ids never match). Undefined when everything is visible. Use inside `and(...)`.
 */
export function visibleOrgCondition(access: VisibilityInput | OrgVisibility, orgIdColumn: AnyColumn | SQL): SQL | undefined {
  const v = 'kind' in access ? access : visibleOrgs(access);
  switch (v.kind) {
    case 'all':
      return undefined;
    case 'org':
      return sql`${orgIdColumn} = ${v.orgId}`;
    case 'partner': {
      const ofPartner = sql`${orgIdColumn} in (select ${organizations.id} from ${organizations} where ${organizations.partnerId} = ${v.partnerId})`;
      if (v.orgIds === null) return ofPartner;
      if (v.orgIds.length === 0) return sql`false`;
      return sql`(${orgIdColumn} in (${sql.join(v.orgIds.map((id) => sql`${id}`), sql`, `)}) and ${ofPartner})`;
    }
    case 'nothing':
      return sql`false`;
  }
}

/**
 * The partner whose own records (partner members, partner-level audit entries; not an organisation's)
 * the caller sees beside its organisations: the partner of a `partner` visibility, else null.
 */
export function visiblePartnerId(access: VisibilityInput | OrgVisibility): string | null {
  const v = 'kind' in access ? access : visibleOrgs(access);
  return v.kind === 'partner' ? v.partnerId : null;
}

export type OrgRow = typeof organizations.$inferSelect;

/**
 * The one decision of entering an organisation by id: the organisation `load` finds, if the caller
 * may act in it, else null (answer 404: never reveal that it exists). Decided by `canSeeOrg` on the
 * caller's reach (its visibility before a request names an organisation): system: any (or the named
 * partner's); partner users: their partner's, by `orgAccess`; organisation users: their own. An id
 * that is no UUID or out of reach is refused without a load.
 */
async function reachWith<T extends { id: string; partnerId: string | null }>(access: AccessContext, orgId: string, load: () => Promise<T | null | undefined>): Promise<T | null> {
  if (!UUID.test(orgId)) return null;
  const reach = reachableOrgs(access);
  if (reach.kind === 'nothing' || (reach.kind === 'org' && reach.orgId !== orgId)) return null;
  const org = await load();
  return org && canSeeOrg(reach, org) ? org : null;
}

/** The organisation's row if the caller may act in it (`reachWith`), else null. */
export function reachOrg(db: Db, access: AccessContext, orgId: string): Promise<OrgRow | null> {
  return reachWith(access, orgId, async () => (await db.select().from(organizations).where(eq(organizations.id, orgId)))[0]);
}

/**
 * For the scope middleware: the same decision on the cached id and partner of the organisation
 * (org-cache.ts), not its row; 404 when it cannot be reached.
 */
async function mustReachOrgTenant(keel: Keel, access: AccessContext, orgId: string): Promise<OrgTenant> {
  const org = await reachWith(access, orgId, () => cachedOrgTenant(keel, orgId));
  if (!org) throw notFound('Organization');
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
    if (!s) throw invalidToken();
    return s;
  }
  return getAccessSummary(keel, { id: principal.userId, isPlatformAdmin: principal.isPlatformAdmin });
}

/**
 * The access context of a principal acting in its own scope (no organisation named), as `requireScope`
 * builds it before any route option applies: for work outside a request (a worker acting for its
 * creator) and for tests that call a service directly. 403 `context_required` without an association.
 */
export async function accessContextFor(keel: Keel, principal: Principal): Promise<AccessContext> {
  const summary = await summaryFor(keel, principal);
  if (summary.scope === null) throw contextRequired();
  return buildContext(principal, { ...summary, scope: summary.scope });
}

/**
 * Resolves the request's scope (docs/specification.md "Tenant hierarchy and scopes"; docs/decisions.md "Naming the organisation") and sets
 * `c.get('access')`. Runs after `authenticate`. Users with no association: 403 `context_required`.
 * An `orgId` or `partnerId` the caller cannot reach: 404.
 */
/**
 * The query parameters `requireScope` reads: every route behind the guard accepts and documents them
 * (platform/http/route-docs.ts `withMiddlewareQuery`), those named by a path parameter excepted.
 */
export const ScopeQuery = z.object({
  orgId: z.uuid().optional().openapi({
    description:
      'Organisation to act in: partner and system callers name it here (it narrows lists to it); organisation users may omit it or give their own. One the caller cannot reach answers 404',
  }),
  partnerId: z.uuid().optional().openapi({ description: 'Partner to act in: system callers name the partner here where a partner is meant' }),
});

export function requireScope(keel: Keel, opts: ScopeOptions = {}): MiddlewareHandler<AppEnv> {
  return documentAccess(scopeMiddleware(keel, opts), scopeDoc(opts));
}

function scopeMiddleware(keel: Keel, opts: ScopeOptions): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const principal = c.get('principal') as Principal | undefined;
    if (!principal) throw unauthorized();
    const early = principal.kind === 'user' ? c.get('accessSummary') : undefined;
    const summary = early ?? (await summaryFor(keel, principal));
    if (summary.scope === null) throw contextRequired();
    const access = buildContext(principal, { ...summary, scope: summary.scope });
    if (opts.scopes && !opts.scopes.includes(access.scope)) throw accessError('scope_forbidden');
    if (opts.fullOrgAccess && access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();

    const namedOrg = await namedId(c, 'orgId', opts.orgIdParam);
    const namedPartner = await namedId(c, 'partnerId', opts.partnerIdParam);
    if (access.scope === 'organization') {
      if (namedOrg && namedOrg !== access.homeOrgId) throw await refusedOtherTenant(keel, c, access, 'organization', namedOrg);
      if (namedPartner) throw namedPartner === access.partnerId ? notFound('Partner') : await refusedOtherTenant(keel, c, access, 'partner', namedPartner);
    } else if (access.scope === 'partner') {
      if (namedPartner && namedPartner !== access.partnerId) throw await refusedOtherTenant(keel, c, access, 'partner', namedPartner);
      if (namedOrg) {
        const reached = await reachWith(access, namedOrg, () => cachedOrgTenant(keel, namedOrg));
        if (!reached) throw await refusedOtherTenant(keel, c, access, 'organization', namedOrg);
        access.orgId = reached.id;
      }
    } else {
      if (namedOrg) {
        const org = await mustReachOrgTenant(keel, access, namedOrg);
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
    if (opts.wholeOrg && restricted(access)) throw wholeOrgAccessRequired();
    c.set('access', access);
    await next();
  };
}

/**
 * The 404 for an organisation or partner the caller named and cannot reach. When it exists and
 * belongs to another tenant (not an organisation of the caller's own partner that its `orgAccess`
 * leaves out), the attempt is audited as `access.cross_tenant_refused` under the caller's own scope,
 * so its administrators read it; bounded per source address and minute (audit/security-events.ts).
 * The answer is the same 404 whether or not the object exists; a failed write is only logged.
 */
async function refusedOtherTenant(keel: Keel, c: Context, access: AccessContext, type: 'organization' | 'partner', id: string): Promise<AppError> {
  const refusal = notFound(type === 'organization' ? 'Organization' : 'Partner');
  try {
    if (type === 'organization') {
      const org = await cachedOrgTenant(keel, id);
      if (!org || (access.scope === 'partner' && org.partnerId === access.partnerId)) return refusal;
    } else {
      const [partner] = await keel.db.select({ id: partners.id }).from(partners).where(eq(partners.id, id));
      if (!partner) return refusal;
    }
    const p = access.principal;
    await recordSecurityEvent(
      keel.db,
      {
        actor: { type: p.kind, id: p.kind === 'api_key' ? p.apiKeyId : p.userId, email: p.email },
        ip: (c.get('ip') as string | undefined) || null,
        userAgent: c.req.header('user-agent')?.slice(0, 1000) ?? null,
        requestId: (c.get('requestId') as string | undefined) ?? null,
      },
      {
        action: 'access.cross_tenant_refused',
        orgId: access.homeOrgId,
        partnerId: access.partnerId,
        target: { type, id },
        details: { method: c.req.method, route: routePath(c) },
      },
    );
  } catch (err) {
    keel.log.warn({ error: loggableError(err) }, 'audit: a refused cross-tenant attempt could not be recorded');
  }
  return refusal;
}

export function accessOf(c: Context<AppEnv>): AccessContext {
  const access = c.get('access') as AccessContext | undefined;
  if (!access) throw new Error('requireScope must run before this handler');
  return access;
}

export const permissionDenied = (resource: string, action: string) =>
  accessError('permission_denied', { message: `You need the ${resource}:${action} permission for this`, details: { required: `${resource}:${action}` } });

/** Requires a permission of the caller's effective set (after requireScope). */
export function requirePermission(resource: string, action: string): MiddlewareHandler<AppEnv> {
  return documentAccess<MiddlewareHandler<AppEnv>>(async (c, next) => {
    if (!accessOf(c).can(resource, action)) throw permissionDenied(resource, action);
    await next();
  }, { permission: `${resource}:${action}` });
}

export interface GuardOptions extends ScopeOptions {
  /** `[resource, action]` the caller needs. */
  permission?: readonly [string, string];
}

/**
 * The usual middleware chain of a protected route after `authenticate`: scope, then permission.
 * Use as `middleware: [authenticate(keel), ...guard(keel, { permission: ['users', 'read'] })]`;
 * add `fullOrgAccess: true` on user and role administration and on partner-wide writes.
 */
export function guard(keel: Keel, opts: GuardOptions = {}): MiddlewareHandler<AppEnv>[] {
  const chain = [requireScope(keel, opts)];
  if (opts.permission) chain.push(requirePermission(opts.permission[0], opts.permission[1]));
  return chain;
}

/** What `requireScope` enforces, for the OpenAPI document (platform/http/route-docs.ts). */
function scopeDoc(opts: ScopeOptions): AccessDoc {
  const doc: AccessDoc = { scoped: true };
  const query = ScopeQuery.omit({ ...(opts.orgIdParam ? { orgId: true } : {}), ...(opts.partnerIdParam ? { partnerId: true } : {}) } as const);
  if (Object.keys(query.shape).length > 0) doc.query = query;
  if (opts.scopes) doc.scopes = opts.scopes;
  if (opts.fullOrgAccess) doc.fullOrgAccess = true;
  if (opts.wholeOrg) doc.wholeOrg = true;
  return doc;
}

/** Site and device-group restriction of an organisation user (docs/specification.md "Tenant hierarchy and scopes"); null lists mean "all". */
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
 * pass (docs/decisions.md "Naming the organisation"). Undefined when the caller is not restricted. Use inside `and(...)`.
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
