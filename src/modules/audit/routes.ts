import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { stream } from 'hono/streaming';
import { and, count, desc, eq, gte, inArray, isNull, lt, lte, or, sql, type SQL } from 'drizzle-orm';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { errors, json, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { ScopeQuery } from '../access/api-schemas.js';
import { accessOf, groupListFilter, guard, placementFilter, restricted, siteListFilter, visibleOrgCondition, visibleOrgs, type AccessContext } from '../access/scope.js';
import { deviceGroups, organizations, partners, sites } from '../tenancy/schema.js';
import { devices, enrollmentKeys } from '../agents/schema.js';
import { users } from '../identity/schema.js';
import { apiKeys, organizationUsers, partnerUsers, roles } from '../access/schema.js';
import { ssoProviders } from '../sso/schema.js';
import { webhooks } from '../webhooks/schema.js';
import { scimTokens } from '../scim/schema.js';
import { verifiedDomains } from '../domains/schema.js';
import { auditLogs } from './schema.js';
import { PLATFORM_CHAIN, verifyChain } from './chain.js';
import { notFound } from '../../platform/http/errors.js';

const EntrySchema = z
  .object({
    id: z.uuid().openapi({ description: 'Entry id (UUIDv7: ids sort by time)' }),
    createdAt: z.string().openapi({ description: 'When it happened, ISO 8601 UTC' }),
    action: z.string().openapi({ description: 'What happened, e.g. `user.invite`, `role.update`, `auth.mfa.setup`, `user.login` (docs/specification.md "Audit events" lists them)', example: 'user.invite' }),
    actorType: z.string().openapi({ description: 'Who did it: `user`, `api_key`, `system`, `anonymous` or `scim_token` (a directory SCIM token, its id in actorId)', example: 'user' }),
    actorId: z.string().nullable().openapi({ description: 'Id of the acting user or API key; null for system and anonymous actors' }),
    actorEmail: z.string().nullable().openapi({ description: 'Email of the acting user (of the key\'s creator for an API key) at the time; null when none' }),
    partnerId: z.string().nullable().openapi({ description: 'Partner the entry belongs to; null when none' }),
    orgId: z.string().nullable().openapi({ description: 'Organisation the entry belongs to; null for partner-level and platform entries' }),
    targetType: z.string().nullable().openapi({ description: 'Kind of thing acted on, e.g. `user`, `role`, `organization`; null when none', example: 'user' }),
    targetId: z.string().nullable().openapi({ description: 'Id of the thing acted on; null when none' }),
    changes: z.array(z.string()).nullable().openapi({ description: 'Names of the changed fields (never their values); null when not a change', example: ['name', 'status'] }),
    details: z.record(z.string(), z.unknown()).nullable().openapi({ description: 'Non-secret context of the action (type, status, counts); keys that look like secrets are never stored' }),
    result: z.string().openapi({ description: '`success` or `failure`', example: 'success' }),
    ipAddress: z.string().nullable().openapi({ description: 'Client IP address of the request; null when none (background work)' }),
    userAgent: z.string().nullable().openapi({ description: 'User-Agent of the request (first 1000 characters); null when none' }),
    requestId: z.string().nullable().openapi({ description: 'Id of the request (the `x-request-id` of its answer), to match log lines; null when none' }),
    actorName: z.string().nullable().openapi({ description: 'Name of the acting user, API key or SCIM token as it is now; null when gone or none (list answers only, not in exports)' }),
    orgName: z.string().nullable().openapi({ description: 'Name of the entry\'s organisation as it is now; null when none or gone (list answers only)' }),
    partnerName: z.string().nullable().openapi({ description: 'Name of the entry\'s partner as it is now; null when none or gone (list answers only)' }),
    targetName: z.string().nullable().openapi({ description: 'Name of the thing acted on as it is now (a user\'s email, a device\'s hostname, a domain, else its name), when it still exists within the entry\'s own organisation or partner; else null (list answers only)' }),
    chainSeq: z.number().int().openapi({ description: 'Position of the entry in its scope\'s hash chain (organisation, else partner, else platform), from 1' }),
    prevHash: z.string().openapi({ description: 'Hash of the entry before it in its chain (hex SHA-256; 64 zeros for the first)' }),
    hash: z.string().openapi({ description: 'Hex SHA-256 over the canonical encoding of the entry and `prevHash` (docs/decisions.md "Audit: hash chain, checkpoints, security events")' }),
  })
  .openapi('AuditEntry', { description: 'One recorded action' });

const Filters = z.object({
  action: z.string().max(100).optional().openapi({ description: 'Only entries with exactly this action', example: 'user.login' }),
  actorId: z.uuid().optional().openapi({ description: 'Only entries made by this user or API key' }),
  targetType: z.string().max(50).optional().openapi({ description: 'Only entries about this kind of thing, e.g. `user`', example: 'user' }),
  targetId: z.string().max(100).optional().openapi({ description: 'Only entries about the thing with this id' }),
  from: z.iso.datetime({ offset: true }).optional().openapi({ description: 'Only entries at or after this time (ISO 8601 date-time with offset)', example: '2026-01-01T00:00:00Z' }),
  to: z.iso.datetime({ offset: true }).optional().openapi({ description: 'Only entries at or before this time (ISO 8601 date-time with offset)', example: '2026-02-01T00:00:00Z' }),
});

type Row = typeof auditLogs.$inferSelect;
type Entry = Omit<z.infer<typeof EntrySchema>, 'actorName' | 'orgName' | 'partnerName' | 'targetName'>;
type Named = z.infer<typeof EntrySchema>;

const entry = (r: Row): Entry => ({ ...r, createdAt: r.createdAt.toISOString() });

/** One kind of named object: its name and the organisation or partner it belongs to. */
interface NameRow {
  id: string;
  name: string | null;
  orgId: string | null;
  partnerId: string | null;
  /** A user's display name (its `name` is the email, which tells users apart). */
  displayName?: string;
}
type Lookup = (db: Db, ids: string[]) => Promise<NameRow[]>;

const NAMED: Record<string, Lookup> = {
  organization: (db, ids) => db.select({ id: organizations.id, name: organizations.name, orgId: organizations.id, partnerId: organizations.partnerId }).from(organizations).where(inArray(organizations.id, ids)),
  partner: (db, ids) => db.select({ id: partners.id, name: partners.name, orgId: sql<null>`null`, partnerId: partners.id }).from(partners).where(inArray(partners.id, ids)),
  site: (db, ids) => db.select({ id: sites.id, name: sites.name, orgId: sites.orgId, partnerId: sql<null>`null` }).from(sites).where(inArray(sites.id, ids)),
  device_group: (db, ids) => db.select({ id: deviceGroups.id, name: deviceGroups.name, orgId: deviceGroups.orgId, partnerId: sql<null>`null` }).from(deviceGroups).where(inArray(deviceGroups.id, ids)),
  device: (db, ids) => db.select({ id: devices.id, name: devices.hostname, orgId: devices.orgId, partnerId: sql<null>`null` }).from(devices).where(inArray(devices.id, ids)),
  enrollment_key: (db, ids) => db.select({ id: enrollmentKeys.id, name: enrollmentKeys.name, orgId: enrollmentKeys.orgId, partnerId: sql<null>`null` }).from(enrollmentKeys).where(inArray(enrollmentKeys.id, ids)),
  role: (db, ids) => db.select({ id: roles.id, name: roles.name, orgId: roles.orgId, partnerId: roles.partnerId }).from(roles).where(inArray(roles.id, ids)),
  api_key: (db, ids) => db.select({ id: apiKeys.id, name: apiKeys.name, orgId: apiKeys.orgId, partnerId: apiKeys.partnerId }).from(apiKeys).where(inArray(apiKeys.id, ids)),
  sso_provider: (db, ids) => db.select({ id: ssoProviders.id, name: ssoProviders.name, orgId: ssoProviders.orgId, partnerId: sql<null>`null` }).from(ssoProviders).where(inArray(ssoProviders.id, ids)),
  webhook: (db, ids) => db.select({ id: webhooks.id, name: webhooks.name, orgId: webhooks.orgId, partnerId: sql<null>`null` }).from(webhooks).where(inArray(webhooks.id, ids)),
  scim_token: (db, ids) => db.select({ id: scimTokens.id, name: scimTokens.name, orgId: scimTokens.orgId, partnerId: sql<null>`null` }).from(scimTokens).where(inArray(scimTokens.id, ids)),
  domain: (db, ids) => db.select({ id: verifiedDomains.id, name: verifiedDomains.domain, orgId: verifiedDomains.orgId, partnerId: verifiedDomains.partnerId }).from(verifiedDomains).where(inArray(verifiedDomains.id, ids)),
  // A user belongs to the organisation or partner it is a member of (one association per account).
  user: (db, ids) =>
    db
      .select({ id: users.id, name: users.email, displayName: users.name, orgId: organizationUsers.orgId, partnerId: partnerUsers.partnerId })
      .from(users)
      .leftJoin(organizationUsers, eq(organizationUsers.userId, users.id))
      .leftJoin(partnerUsers, eq(partnerUsers.userId, users.id))
      .where(inArray(users.id, ids)),
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The names an audit page shows instead of ids, looked up in one query per kind of object on the
 * page (never one per entry). A name is given only for an object that belongs to the entry's own
 * organisation or partner (a partner's entry may name its organisations; a built-in role is
 * everyone's), or to any caller who sees the whole platform: an entry may carry the id of another
 * tenant's object (a refused cross-tenant attempt), whose name it must not reveal. Actors are named
 * as they acted within the entry's scope (the actor's email is on the entry already); organisation
 * and partner names are those of the entry's own scope, which the caller reads.
 */
async function withNames(db: Db, access: AccessContext, entries: Entry[]): Promise<Named[]> {
  const wanted = new Map<string, Set<string>>();
  const want = (kind: string, id: string | null) => {
    if (!id || !UUID.test(id) || !NAMED[kind]) return;
    let set = wanted.get(kind);
    if (!set) wanted.set(kind, (set = new Set()));
    set.add(id);
  };
  const actorKind = (e: Entry) => (e.actorType === 'user' ? 'user' : e.actorType === 'api_key' ? 'api_key' : e.actorType === 'scim_token' ? 'scim_token' : null);
  for (const e of entries) {
    const ak = actorKind(e);
    if (ak) want(ak, e.actorId);
    want('organization', e.orgId);
    want('partner', e.partnerId);
    if (e.targetType) want(e.targetType, e.targetId);
  }
  const found = new Map<string, Map<string, NameRow[]>>();
  for (const [kind, ids] of wanted) {
    const lookup = NAMED[kind];
    if (!lookup) continue;
    const rows = await lookup(db, [...ids]);
    const byId = new Map<string, NameRow[]>();
    for (const r of rows) byId.set(r.id, [...(byId.get(r.id) ?? []), r]);
    found.set(kind, byId);
  }
  const everything = access.scope === 'system';
  const rowOf = (kind: string | null, id: string | null, e: Entry, any = false): NameRow | undefined => {
    if (!kind || !id) return undefined;
    const rows = found.get(kind)?.get(id) ?? [];
    return rows.find(
      (x) =>
        everything ||
        any ||
        (kind === 'role' && x.orgId === null && x.partnerId === null) ||
        (x.orgId !== null && x.orgId === e.orgId) ||
        (x.partnerId !== null && x.partnerId === e.partnerId && (e.orgId === null || kind === 'role' || kind === 'user')),
    );
  };
  return entries.map((e) => {
    const actor = rowOf(actorKind(e), e.actorId, e, true);
    return {
      ...e,
      actorName: actor ? (actor.displayName ?? actor.name) : null,
      orgName: rowOf('organization', e.orgId, e, true)?.name ?? null,
      partnerName: rowOf('partner', e.partnerId, e, true)?.name ?? null,
      targetName: rowOf(e.targetType, e.targetId, e)?.name ?? null,
    };
  });
}

/**
 * The entries a caller may read, decided by the access module's `visibleOrgs` (the one decision of
 * which organisations a principal sees): entries of the organisations it gives; beside them, for a
 * partner visibility, the partner's own entries (no organisation). A partner view of every
 * organisation (`orgAccess: all`, or a platform administrator naming the partner) also keeps the
 * entries of organisations deleted since (they carry the partner). Never another tenant's.
 */
function tenantFilter(access: AccessContext): SQL | undefined {
  const v = visibleOrgs(access);
  const orgs = visibleOrgCondition(v, auditLogs.orgId);
  if (v.kind !== 'partner') return orgs;
  const own = v.orgIds === null ? eq(auditLogs.partnerId, v.partnerId) : and(eq(auditLogs.partnerId, v.partnerId), isNull(auditLogs.orgId));
  return or(own, orgs);
}

/**
 * A caller restricted to some sites or device groups (`restricted`) reads an entry about a placed
 * object (a device, an enrolment key, a site, a device group) only when that object is still within
 * its restriction, decided by the access module's placement filters; an entry about an object gone
 * since is not listed to it. Entries about anything else (users, roles, settings) are listed as before.
 */
function placementOf(access: AccessContext): SQL | undefined {
  if (!restricted(access)) return undefined;
  const within = (ids: SQL) => sql`${auditLogs.targetId} in (${ids})`;
  const seen = (where: SQL | undefined) => where ?? sql`true`;
  return sql`(case ${auditLogs.targetType}
    when 'device' then ${within(sql`select ${devices.id}::text from ${devices} where ${seen(placementFilter(access, devices))}`)}
    when 'enrollment_key' then ${within(sql`select ${enrollmentKeys.id}::text from ${enrollmentKeys} where ${seen(placementFilter(access, enrollmentKeys))}`)}
    when 'site' then ${within(sql`select ${sites.id}::text from ${sites} where ${seen(siteListFilter(access, sites.id))}`)}
    when 'device_group' then ${within(sql`select ${deviceGroups.id}::text from ${deviceGroups} where ${seen(groupListFilter(access, deviceGroups))}`)}
    else true end)`;
}

function whereOf(access: AccessContext, f: z.infer<typeof Filters>): SQL | undefined {
  return and(
    tenantFilter(access),
    placementOf(access),
    f.action ? eq(auditLogs.action, f.action) : undefined,
    f.actorId ? eq(auditLogs.actorId, f.actorId) : undefined,
    f.targetType ? eq(auditLogs.targetType, f.targetType) : undefined,
    f.targetId ? eq(auditLogs.targetId, f.targetId) : undefined,
    f.from ? gte(auditLogs.createdAt, new Date(f.from)) : undefined,
    f.to ? lte(auditLogs.createdAt, new Date(f.to)) : undefined,
  );
}

/** Newest first, keyset-paged by (created_at, id) so an export never holds the whole log in memory. */
async function* allEntries(db: Db, where: SQL | undefined, batch = 500): AsyncGenerator<Entry> {
  let cursor: { createdAt: Date; id: string } | null = null;
  for (;;) {
    const after: SQL | undefined = cursor
      ? or(lt(auditLogs.createdAt, cursor.createdAt), and(eq(auditLogs.createdAt, cursor.createdAt), lt(auditLogs.id, cursor.id)))
      : undefined;
    const rows: Row[] = await db.select().from(auditLogs).where(and(where, after)).orderBy(desc(auditLogs.createdAt), desc(auditLogs.id)).limit(batch);
    for (const r of rows) yield entry(r);
    const last = rows[rows.length - 1];
    if (!last || rows.length < batch) return;
    cursor = { createdAt: last.createdAt, id: last.id };
  }
}

const CSV_COLUMNS = ['id', 'createdAt', 'action', 'actorType', 'actorId', 'actorEmail', 'partnerId', 'orgId', 'targetType', 'targetId', 'changes', 'details', 'result', 'ipAddress', 'userAgent', 'requestId'] as const;

function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = typeof value === 'string' ? value : JSON.stringify(value);
  // Cells a spreadsheet would run as a formula are prefixed (CSV injection).
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

const VerifySchema = z
  .object({
    ok: z.boolean().openapi({ description: 'True when every link of the chain holds' }),
    checked: z.number().int().openapi({ description: 'Entries checked, from where the chain starts (after retention) to its head' }),
    firstBroken: z
      .object({
        id: z.string().nullable().openapi({ description: 'The first entry where the chain breaks; for `entries_missing_at_end`, the last entry left (null when none is)' }),
        reason: z.enum(['hash_mismatch', 'entries_missing', 'unexpected_entry', 'entries_missing_at_end', 'checkpoint_mismatch']).openapi({
          description: '`hash_mismatch`: the entry was edited; `entries_missing`: entries before it were deleted; `unexpected_entry`: it was inserted (its position or link is taken); `entries_missing_at_end`: the newest entries were deleted; `checkpoint_mismatch`: a signed checkpoint names another hash here',
        }),
      })
      .optional()
      .openapi({ description: 'Absent when the chain holds' }),
  })
  .openapi('AuditChainVerification');

/** The chain a caller's scope names: its organisation; else its partner (partner-level entries); else the platform's. */
function chainOf(access: AccessContext): string {
  const v = visibleOrgs(access);
  if (v.kind === 'org') return v.orgId;
  if (v.kind === 'partner') return v.partnerId;
  if (v.kind === 'all') return PLATFORM_CHAIN;
  throw notFound('Organization');
}

export function mountAuditRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const tag = ['audit'];

  api.openapi(
    createRoute({
      method: 'get', path: '/audit-logs/verify', tags: tag, summary: 'Check the hash chain of the scope\'s audit log',
      description: 'Walks the chain of the organisation (`orgId`), of the partner\'s own entries (`partnerId`) or, for a platform administrator naming neither, of the platform, and reports the first broken link (an edited, deleted or inserted entry).',
      middleware: [auth, ...guard(keel, { permission: ['audit', 'read'], wholeOrg: true })],
      request: { query: ScopeQuery },
      responses: { 200: json(VerifySchema), ...errors(404) },
    }),
    async (c) => c.json(await verifyChain(keel.db, chainOf(accessOf(c))), 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/audit-logs', tags: tag, summary: 'Audit entries of the scope, newest first',
      middleware: [auth, ...guard(keel, { permission: ['audit', 'read'] })],
      request: { query: PageQuery.extend(ScopeQuery.shape).extend(Filters.shape) },
      responses: { 200: json(paginated(EntrySchema)), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const where = whereOf(accessOf(c), q);
      const [total] = await keel.db.select({ n: count() }).from(auditLogs).where(where);
      const rows = await keel.db
        .select()
        .from(auditLogs)
        .where(where)
        .orderBy(desc(auditLogs.createdAt), desc(auditLogs.id))
        .limit(q.limit)
        .offset((q.page - 1) * q.limit);
      return c.json(page(await withNames(keel.db, accessOf(c), rows.map(entry)), q, total?.n ?? 0), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/audit-logs/export', tags: tag, summary: 'Export the audit entries of the scope (streamed JSON lines or CSV)',
      middleware: [auth, ...guard(keel, { permission: ['audit', 'export'] })],
      request: { query: ScopeQuery.extend(Filters.shape).extend({
          format: z.enum(['jsonl', 'csv']).default('jsonl').openapi({ description: '`jsonl`: one JSON entry per line (default); `csv`: a header row, then one row per entry (cells that a spreadsheet would run as a formula are prefixed with `\'`)' }),
        }) },
      responses: {
        200: {
          description: 'The entries, newest first',
          content: { 'application/x-ndjson': { schema: z.string() }, 'text/csv': { schema: z.string() } },
        },
        ...errors(404),
      },
    }),
    (c) => {
      const q = c.req.valid('query');
      const where = whereOf(accessOf(c), q);
      const csv = q.format === 'csv';
      c.header('Content-Type', csv ? 'text/csv; charset=utf-8' : 'application/x-ndjson; charset=utf-8');
      c.header('Content-Disposition', `attachment; filename="audit-log.${q.format}"`);
      return stream(c, async (out) => {
        if (csv) await out.write(`${CSV_COLUMNS.join(',')}\n`);
        for await (const e of allEntries(keel.db, where)) {
          await out.write(csv ? `${CSV_COLUMNS.map((k) => csvCell(e[k])).join(',')}\n` : `${JSON.stringify(e)}\n`);
        }
      });
    },
  );
}
