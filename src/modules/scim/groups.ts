import { and, asc, count, eq, inArray, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { AppError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { users } from '../identity/schema.js';
import { identityOf } from '../identity/context.js';
import { organizations } from '../tenancy/schema.js';
import { getAccessSummary, getMembership, assertNotLastFullAdmin, setOrganizationMemberRole } from '../access/service.js';
import { PermissionSet } from '../access/permissions.js';
import { roleFromGroups } from '../access/group-roles.js';
import { scimGroupMembers, scimGroups, scimUsers, type ScimGroupRow } from './schema.js';
import { ScimError, scimInvalid, scimNotFound } from './errors.js';
import { matches, parseFilter, pushDown, tooManyToFilter, dateField, type SqlField } from './filter.js';
import { getScimSettings, scimDefaultRole } from './settings.js';
import { DEFAULT_COUNT, MAX_COUNT, MAX_PATCH_OPERATIONS, type ScimContext } from './users.js';

export const CORE_GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** The most members one group holds (a directory's large groups are sent in batches well under it). */
export const MAX_GROUP_MEMBERS = 50_000;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Attribute names are case-insensitive (RFC 7643 §2.1). */
function get(o: Record<string, unknown>, name: string): unknown {
  if (name in o) return o[name];
  const key = Object.keys(o).find((k) => k.toLowerCase() === name.toLowerCase());
  return key === undefined ? undefined : o[key];
}

function text(v: unknown, path: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw scimInvalid(`${path} must be a string`);
  const t = v.trim();
  if (t.length > 255) throw scimInvalid(`${path} is longer than 255 characters`);
  return t === '' ? null : t;
}

/** `members` as a directory sends it: `[{value: "<user id>"}, …]`, ids checked as UUIDs. */
function memberIds(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  if (list.length > MAX_GROUP_MEMBERS) throw new ScimError(400, `A group holds at most ${MAX_GROUP_MEMBERS} members`, 'tooMany');
  return [
    ...new Set(
      list.map((m, i) => {
        const value = isObject(m) ? get(m, 'value') : undefined;
        if (typeof value !== 'string' || !UUID.test(value)) throw scimInvalid(`members[${i}].value must be the id of a User`);
        return value.toLowerCase();
      }),
    ),
  ];
}

interface GroupInput {
  displayName: string;
  externalId: string | null;
  members: string[];
}

function parseGroupInput(body: unknown): GroupInput {
  if (!isObject(body)) throw new ScimError(400, 'The body must be a SCIM Group object', 'invalidSyntax');
  const displayName = text(get(body, 'displayName'), 'displayName');
  if (!displayName) throw scimInvalid('displayName is required');
  return { displayName, externalId: text(get(body, 'externalId'), 'externalId'), members: memberIds(get(body, 'members')) };
}

function groupResource(row: ScimGroupRow, members: { id: string; display: string }[] | null, baseUrl: string): Record<string, unknown> {
  return {
    schemas: [CORE_GROUP],
    id: row.id,
    ...(row.externalId ? { externalId: row.externalId } : {}),
    displayName: row.displayName,
    ...(members ? { members: members.map((m) => ({ value: m.id, display: m.display, type: 'User', $ref: `${baseUrl}/Users/${m.id}` })) } : {}),
    meta: {
      resourceType: 'Group',
      created: row.createdAt.toISOString(),
      lastModified: row.updatedAt.toISOString(),
      location: `${baseUrl}/Groups/${row.id}`,
      version: `W/"${row.version}"`,
    },
  };
}

async function membersOf(db: Db, groupIds: string[]): Promise<Map<string, { id: string; display: string }[]>> {
  const out = new Map<string, { id: string; display: string }[]>(groupIds.map((id) => [id, []]));
  if (groupIds.length === 0) return out;
  const rows = await db
    .select({ groupId: scimGroupMembers.groupId, id: scimGroupMembers.userId, display: users.name })
    .from(scimGroupMembers)
    .innerJoin(users, eq(users.id, scimGroupMembers.userId))
    .where(inArray(scimGroupMembers.groupId, groupIds))
    .orderBy(asc(scimGroupMembers.userId));
  for (const r of rows) out.get(r.groupId)?.push({ id: r.id, display: r.display });
  return out;
}

async function findGroup(db: Db, orgId: string, id: string, lock: boolean): Promise<ScimGroupRow> {
  if (!UUID.test(id)) throw scimNotFound('Group');
  const q = db.select().from(scimGroups).where(and(eq(scimGroups.id, id), eq(scimGroups.orgId, orgId)));
  const [row] = await (lock ? q.for('update') : q);
  if (!row) throw scimNotFound('Group');
  return row;
}

/** Whether `excludedAttributes` drops `members` (then they are not read at all). */
export const membersExcluded = (excluded: string | undefined, attributes: string | undefined): boolean => {
  const names = (v: string | undefined) => (v ?? '').split(',').map((s) => s.trim().toLowerCase().replace(/^urn:ietf:params:scim:schemas:core:2\.0:group:/, ''));
  if (attributes) return !names(attributes).some((n) => n === 'members' || n.startsWith('members.'));
  return names(excluded).includes('members');
};

export async function getGroup(ctx: ScimContext, id: string, withMembers = true): Promise<Record<string, unknown>> {
  const row = await findGroup(ctx.keel.db, ctx.caller.orgId, id, false);
  const members = withMembers ? ((await membersOf(ctx.keel.db, [row.id])).get(row.id) ?? []) : null;
  return groupResource(row, members, ctx.baseUrl);
}

export const GROUP_FIELDS: Record<string, SqlField> = {
  displayname: (op, v) => (op === 'eq' && typeof v === 'string' ? sql`lower(${scimGroups.displayName}) = ${v.toLowerCase()}` : null),
  externalid: (op, v) => (op === 'eq' && typeof v === 'string' ? eq(scimGroups.externalId, v) : null),
  id: (op, v) => (op === 'eq' && typeof v === 'string' ? (UUID.test(v) ? eq(scimGroups.id, v) : sql`false`) : null),
  'meta.lastmodified': dateField(scimGroups.updatedAt),
  'meta.created': dateField(scimGroups.createdAt),
};

/**
 * `GET /Groups`: the organisation's groups in creation order, filtered and paged as `GET /Users` is
 * (`displayName`, `externalId` and `id` `eq` in SQL; members read only when answered).
 */
export async function listGroups(
  ctx: ScimContext,
  q: { filter?: string | undefined; startIndex?: number | undefined; count?: number | undefined; withMembers: boolean },
): Promise<{ totalResults: number; startIndex: number; resources: Record<string, unknown>[] }> {
  const startIndex = Math.max(1, q.startIndex ?? 1);
  const take = Math.min(MAX_COUNT, Math.max(0, q.count ?? DEFAULT_COUNT));
  const db = ctx.keel.db;
  const filter = q.filter === undefined || q.filter.trim() === '' ? null : parseFilter(q.filter);
  const pushed = filter ? pushDown(filter, GROUP_FIELDS) : { where: undefined, exact: true };
  const where = and(eq(scimGroups.orgId, ctx.caller.orgId), pushed.where);
  const order = [asc(scimGroups.createdAt), asc(scimGroups.id)] as const;
  let total: number;
  let rows: ScimGroupRow[];
  if (pushed.exact) {
    const [[n], page] = await Promise.all([
      db.select({ n: count() }).from(scimGroups).where(where),
      take === 0 ? Promise.resolve([]) : db.select().from(scimGroups).where(where).orderBy(...order).limit(take).offset(startIndex - 1),
    ]);
    total = n?.n ?? 0;
    rows = page;
  } else {
    // Members are not filtered on here: a filter on them is answered as one on the group's own attributes.
    const cap = ctx.keel.config.SCIM_FILTER_SCAN_LIMIT;
    const read = await db.select().from(scimGroups).where(where).orderBy(...order).limit(cap + 1);
    if (read.length > cap) throw tooManyToFilter(cap);
    const hits = read.filter((r) => filter === null || matches(filter, groupResource(r, null, ctx.baseUrl)));
    total = hits.length;
    rows = hits.slice(startIndex - 1, startIndex - 1 + take);
  }
  const members = q.withMembers ? await membersOf(db, rows.map((r) => r.id)) : null;
  return { totalResults: total, startIndex, resources: rows.map((r) => groupResource(r, members?.get(r.id) ?? null, ctx.baseUrl)) };
}

const isUniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return (e.code ?? e.cause?.code) === '23505';
};
const duplicateGroup = () => new ScimError(409, 'A group with this displayName already exists', 'uniqueness');

const audit = (ctx: ScimContext, db: Db, action: string, groupId: string, details: Record<string, unknown> = {}) =>
  writeAudit(db, ctx.info, { action, orgId: ctx.caller.orgId, target: { type: 'scim_group', id: groupId }, details });

/** Every id must be a user this organisation's directory manages: 400 `invalidValue` naming the first that is not (nothing written). */
async function assertMembersManaged(db: Db, orgId: string, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  const found = new Set<string>();
  for (let i = 0; i < ids.length; i += 1000) {
    const chunk = ids.slice(i, i + 1000);
    const rows = await db.select({ id: scimUsers.userId }).from(scimUsers).where(and(eq(scimUsers.orgId, orgId), inArray(scimUsers.userId, chunk)));
    for (const r of rows) found.add(r.id);
  }
  const missing = ids.find((id) => !found.has(id));
  if (missing) throw scimInvalid(`members: ${missing} is not a User of this organization`);
}

async function addMembers(tx: Tx, orgId: string, groupId: string, ids: string[]): Promise<string[]> {
  await assertMembersManaged(tx.db, orgId, ids);
  const added: string[] = [];
  for (let i = 0; i < ids.length; i += 1000) {
    const rows = await tx.db
      .insert(scimGroupMembers)
      .values(ids.slice(i, i + 1000).map((userId) => ({ groupId, userId })))
      .onConflictDoNothing()
      .returning({ userId: scimGroupMembers.userId });
    added.push(...rows.map((r) => r.userId));
  }
  return added;
}

async function removeMembers(tx: Tx, groupId: string, ids: string[] | 'all'): Promise<string[]> {
  const where = ids === 'all' ? eq(scimGroupMembers.groupId, groupId) : and(eq(scimGroupMembers.groupId, groupId), inArray(scimGroupMembers.userId, ids));
  if (ids !== 'all' && ids.length === 0) return [];
  const rows = await tx.db.delete(scimGroupMembers).where(where).returning({ userId: scimGroupMembers.userId });
  return rows.map((r) => r.userId);
}

async function currentMembers(db: Db, groupId: string): Promise<string[]> {
  return (await db.select({ id: scimGroupMembers.userId }).from(scimGroupMembers).where(eq(scimGroupMembers.groupId, groupId))).map((r) => r.id);
}

/**
 * What the token's creator may grant, read now (docs/decisions.md "SCIM"): the permissions of their
 * current association when it still reaches the organisation and the account is active; nothing
 * otherwise (a token whose creator is gone or demoted grants no mapped role beyond theirs).
 */
export async function grantorCeiling(keel: Keel, db: Db, orgId: string, creatorId: string | null): Promise<(p: PermissionSet) => boolean> {
  const never = () => false;
  if (!creatorId) return never;
  const [creator] = await db.select({ status: users.status, isPlatformAdmin: users.isPlatformAdmin }).from(users).where(eq(users.id, creatorId));
  if (creator?.status !== 'active') return never;
  const summary = await getAccessSummary(db, { id: creatorId, isPlatformAdmin: creator.isPlatformAdmin });
  let reaches = summary.scope === 'system' || (summary.scope === 'organization' && summary.orgId === orgId);
  if (summary.scope === 'partner') {
    const [org] = await db.select({ partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, orgId));
    reaches = org?.partnerId === summary.partnerId && (summary.orgAccess === 'all' || summary.orgIds.includes(orgId));
  }
  if (!reaches) return never;
  const held = new PermissionSet(summary.permissions);
  return (p) => held.missing(p.pairs).length === 0;
}

/** Who decides roles: the organisation, whose permissions bound the grant, and the audit actor. */
export interface RoleDecider {
  orgId: string;
  /** The token's creator for a directory's change, the saver for a settings save. */
  grantorId: string | null;
  info: AuditRequestInfo;
  /** Recorded in each audited change: what made it. */
  source: 'scim_group_mapping' | 'scim_settings';
}

/** A directory's membership change: roles decided within the token creator's permissions. */
export function reevaluateRoles(ctx: ScimContext, tx: Tx, userIds: Iterable<string>): Promise<number> {
  return decideRoles(ctx.keel, tx, { orgId: ctx.caller.orgId, grantorId: ctx.caller.createdBy, info: ctx.info, source: 'scim_group_mapping' }, userIds);
}

/**
 * Brings each member's role to what their groups give now (docs/decisions.md "SCIM"): the shared
 * rule `roleFromGroups` over the organisation's SCIM group mappings, bounded by the grantor's
 * permissions at this moment, else the default SCIM role. Nothing changes while no mapping is saved.
 * Each user's record is locked first (in id order), so concurrent membership changes decide one
 * after another on what is committed. A change is audited `user.role.assign` and reaches live
 * sessions after commit as any role change does (`sessions.userChanged`); one that would remove the
 * last full administrator is skipped and audited `user.role.assign_skipped`. Answers how many changed.
 */
export async function decideRoles(keel: Keel, tx: Tx, decider: RoleDecider, userIds: Iterable<string>): Promise<number> {
  const { orgId, info } = decider;
  const ids = [...new Set(userIds)].sort();
  if (ids.length === 0) return 0;
  const { groupRoleMappings } = await getScimSettings(tx.db, orgId);
  if (groupRoleMappings.length === 0) return 0;
  const mayGrant = await grantorCeiling(keel, tx.db, orgId, decider.grantorId);
  const fallback = await scimDefaultRole(tx.db, orgId);
  let changed = 0;
  for (const userId of ids) {
    const [managed] = await tx.db.select({ id: scimUsers.userId }).from(scimUsers).where(and(eq(scimUsers.userId, userId), eq(scimUsers.orgId, orgId))).for('update');
    if (!managed) continue;
    const groups = await tx.db
      .select({ name: scimGroups.displayName })
      .from(scimGroupMembers)
      .innerJoin(scimGroups, eq(scimGroups.id, scimGroupMembers.groupId))
      .where(eq(scimGroupMembers.userId, userId));
    const names = groups.map((g) => g.name);
    const { roleId, skipped } = await roleFromGroups(tx.db, orgId, groupRoleMappings, names, mayGrant);
    const target = roleId ?? fallback;
    const m = await getMembership(tx.db, userId);
    if (m?.kind !== 'organization' || m.orgId !== orgId || m.roleId === target) continue;
    const details = { from: m.roleId, to: target, source: decider.source, groups: names.slice(0, 50), skipped };
    try {
      await assertNotLastFullAdmin(tx.db, { orgId }, userId, target);
    } catch (err) {
      if (err instanceof AppError && err.code === 'last_admin') {
        await writeAudit(tx.db, info, { action: 'user.role.assign_skipped', orgId, target: { type: 'user', id: userId }, details: { ...details, reason: 'last_admin' } });
        continue;
      }
      throw err;
    }
    await setOrganizationMemberRole(tx.db, orgId, userId, target);
    tx.afterCommit(() => identityOf(keel).sessions.userChanged(userId));
    await writeAudit(tx.db, info, { action: 'user.role.assign', orgId, target: { type: 'user', id: userId }, details });
    changed += 1;
  }
  return changed;
}

async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicateGroup();
    throw err;
  }
}

/** `POST /Groups`: a group with its members; 409 `uniqueness` for a displayName the organisation has (a retry). Audited `scim_group.create`. */
export async function createGroup(ctx: ScimContext, body: unknown): Promise<Record<string, unknown>> {
  const input = parseGroupInput(body);
  const id = await guarded(() =>
    transaction(ctx.keel.db, async (tx) => {
      const now = clock.now();
      const [row] = await tx.db.insert(scimGroups).values({ orgId: ctx.caller.orgId, displayName: input.displayName, externalId: input.externalId, createdAt: now, updatedAt: now }).onConflictDoNothing().returning();
      if (!row) throw duplicateGroup();
      const added = await addMembers(tx, ctx.caller.orgId, row.id, input.members);
      await audit(ctx, tx.db, 'scim_group.create', row.id, { displayName: input.displayName, members: added.length });
      await reevaluateRoles(ctx, tx, added);
      return row.id;
    }),
  );
  return getGroup(ctx, id);
}

/** A write to one group with its row locked; the version and lastModified move on. */
async function writeGroup(ctx: ScimContext, id: string, work: (tx: Tx, row: ScimGroupRow) => Promise<{ set?: Partial<Pick<ScimGroupRow, 'displayName' | 'externalId'>>; touched: string[]; renamed: boolean; changes: string[] }>): Promise<void> {
  await guarded(() =>
    transaction(ctx.keel.db, async (tx) => {
      const row = await findGroup(tx.db, ctx.caller.orgId, id, true);
      const { set, touched, renamed, changes } = await work(tx, row);
      await tx.db.update(scimGroups).set({ ...set, version: sql`${scimGroups.version} + 1`, updatedAt: clock.now() }).where(eq(scimGroups.id, id));
      // A rename changes which mapping the group matches: every member is decided again.
      const affected = renamed ? [...touched, ...(await currentMembers(tx.db, id))] : touched;
      if (changes.length > 0) await audit(ctx, tx.db, 'scim_group.update', id, { changes, members: touched.length });
      await reevaluateRoles(ctx, tx, affected);
    }),
  );
}

/** `PUT /Groups/:id`: displayName, externalId and members replaced. */
export async function replaceGroup(ctx: ScimContext, id: string, body: unknown): Promise<Record<string, unknown>> {
  const input = parseGroupInput(body);
  await writeGroup(ctx, id, async (tx, row) => {
    const before = new Set(await currentMembers(tx.db, id));
    const next = new Set(input.members);
    const removed = await removeMembers(tx, id, [...before].filter((u) => !next.has(u)));
    const added = await addMembers(tx, ctx.caller.orgId, id, input.members.filter((u) => !before.has(u)));
    const renamed = row.displayName !== input.displayName;
    const changes = [...(renamed ? ['displayName'] : []), ...(row.externalId !== input.externalId ? ['externalId'] : []), ...(added.length + removed.length > 0 ? ['members'] : [])];
    return { set: { displayName: input.displayName, externalId: input.externalId }, touched: [...added, ...removed], renamed, changes };
  });
  return getGroup(ctx, id);
}

/** `members[value eq "id"]` (or several joined by `or`): the ids it names; null for a path that is not such a filter. */
function memberFilterIds(path: string): string[] | null {
  const m = /^members\[(.*)\]$/is.exec(path.trim());
  if (!m?.[1]) return null;
  const ids: string[] = [];
  const walk = (f: ReturnType<typeof parseFilter>): void => {
    if (f.op === 'or') f.filters.forEach(walk);
    else if (f.op === 'eq' && f.attrPath.toLowerCase() === 'value' && typeof f.compValue === 'string' && UUID.test(f.compValue)) ids.push(f.compValue.toLowerCase());
    else throw new ScimError(400, 'A members filter may only name members by value eq', 'invalidFilter');
  };
  walk(parseFilter(m[1]));
  return ids;
}

/**
 * `PATCH /Groups/:id` (RFC 7644 §3.5.2) on the attributes a group has: `add`/`replace`/`remove` of
 * `members` with and without a value (Entra ID's batches of `{value}`), removal by
 * `members[value eq "…"]`, `displayName` and `externalId` with a path or in a path-less value;
 * operation names in any case.
 */
export async function patchGroup(ctx: ScimContext, id: string, body: unknown): Promise<Record<string, unknown>> {
  if (!isObject(body)) throw new ScimError(400, 'The body must be a SCIM PatchOp', 'invalidSyntax');
  const ops = get(body, 'Operations');
  if (!Array.isArray(ops) || ops.length === 0) throw new ScimError(400, 'Operations must be a non-empty array', 'invalidSyntax');
  if (ops.length > MAX_PATCH_OPERATIONS) throw new ScimError(400, `At most ${MAX_PATCH_OPERATIONS} operations per request`, 'tooMany');
  await writeGroup(ctx, id, async (tx, row) => {
    const touched: string[] = [];
    const changes = new Set<string>();
    let displayName = row.displayName;
    let externalId = row.externalId;
    const setAttr = (name: string, value: unknown, op: string): void => {
      const key = name.toLowerCase();
      if (key === 'displayname') {
        const v = text(value, 'displayName');
        if (!v) throw scimInvalid('displayName cannot be empty');
        displayName = v;
        changes.add('displayName');
      } else if (key === 'externalid') {
        externalId = op === 'remove' ? null : text(value, 'externalId');
        changes.add('externalId');
      } else if (key === 'id' || key === 'meta' || key === 'schemas') throw new ScimError(400, `${name} cannot be changed`, 'mutability');
      else throw new ScimError(400, `Unknown attribute "${name.slice(0, 60)}"`, 'invalidPath');
    };
    for (const raw of ops) {
      if (!isObject(raw)) throw new ScimError(400, 'Each operation must be an object', 'invalidSyntax');
      const given = get(raw, 'op');
      const op = typeof given === 'string' ? given.toLowerCase() : '';
      if (op !== 'add' && op !== 'replace' && op !== 'remove') throw new ScimError(400, `Unknown operation "${typeof given === 'string' ? given.slice(0, 40) : typeof given}"`, 'invalidSyntax');
      const rawPath = get(raw, 'path');
      if (rawPath !== undefined && typeof rawPath !== 'string') throw new ScimError(400, 'path must be a string', 'invalidPath');
      const path = rawPath?.trim().replace(/^urn:ietf:params:scim:schemas:core:2\.0:group:/i, '') || undefined;
      const value = get(raw, 'value');
      const members = async (mode: 'add' | 'replace' | 'remove', v: unknown): Promise<void> => {
        changes.add('members');
        if (mode === 'remove') {
          touched.push(...(await removeMembers(tx, id, v === undefined || v === null ? 'all' : memberIds(v))));
          return;
        }
        const ids = memberIds(v);
        if (mode === 'replace') {
          const keep = new Set(ids);
          touched.push(...(await removeMembers(tx, id, (await currentMembers(tx.db, id)).filter((u) => !keep.has(u)))));
        }
        touched.push(...(await addMembers(tx, ctx.caller.orgId, id, ids)));
      };
      if (!path) {
        if (op === 'remove') throw new ScimError(400, 'remove needs a path', 'noTarget');
        if (!isObject(value)) throw new ScimError(400, 'An operation without path needs an object value', 'invalidValue');
        for (const [k, v] of Object.entries(value)) {
          if (k.toLowerCase() === 'members') await members(op, v);
          else setAttr(k, v, op);
        }
        continue;
      }
      const filtered = memberFilterIds(path);
      if (filtered !== null) {
        if (op !== 'remove') throw new ScimError(400, 'Only remove takes a members filter', 'invalidPath');
        changes.add('members');
        touched.push(...(await removeMembers(tx, id, filtered)));
      } else if (path.toLowerCase() === 'members') await members(op, value);
      else setAttr(path, value, op);
    }
    const [size] = await tx.db.select({ n: count() }).from(scimGroupMembers).where(eq(scimGroupMembers.groupId, id));
    if ((size?.n ?? 0) > MAX_GROUP_MEMBERS) {
      throw new ScimError(400, `A group holds at most ${MAX_GROUP_MEMBERS} members`, 'tooMany');
    }
    const renamed = displayName !== row.displayName;
    return { set: { displayName, externalId }, touched, renamed, changes: [...changes] };
  });
  return getGroup(ctx, id);
}

/** `DELETE /Groups/:id`: the group goes; its members' roles are decided again without it. Audited `scim_group.delete`. */
export async function deleteGroup(ctx: ScimContext, id: string): Promise<void> {
  await transaction(ctx.keel.db, async (tx) => {
    const row = await findGroup(tx.db, ctx.caller.orgId, id, true);
    const members = await currentMembers(tx.db, id);
    await tx.db.delete(scimGroups).where(eq(scimGroups.id, id));
    await audit(ctx, tx.db, 'scim_group.delete', id, { displayName: row.displayName, members: members.length });
    await reevaluateRoles(ctx, tx, members);
  });
}
