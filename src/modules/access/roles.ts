import { loggableError } from '../../platform/safe-error.js';
import { and, asc, count, desc, eq, inArray, or, sql, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { requestLog } from '../../platform/request-scope.js';
import { clock } from '../../platform/clock.js';
import { rowsOf, type Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { users } from '../identity/schema.js';
import { canonicalList, privilegeEscalation } from './api-keys.js';
import { PermissionSet, permissionKey, sortPairs, type PermissionPair } from './permissions.js';
import { loadRoleChain, MAX_CHAIN_DEPTH, publishRoleChange, resolveRole } from './role-cache.js';
import { organizationUsers, partnerUsers, permissions, rolePermissions, roles } from './schema.js';
import { keepsFullAdmin, type Tenant } from './service.js';
import { reachOrg, visibleOrgCondition, visibleOrgs, visiblePartnerId, type AccessContext } from './scope.js';
import { accessError } from './errors.js';

type RoleRow = typeof roles.$inferSelect;

export interface RoleView {
  id: string;
  name: string;
  description: string | null;
  scope: 'system' | 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
  isSystem: boolean;
  parentRoleId: string | null;
  forceMfa: boolean;
  permissions: PermissionPair[];
  userCount: number;
  createdAt: string;
  updatedAt: string;
}

export interface RoleInput {
  name?: string | undefined;
  description?: string | null | undefined;
  permissions?: PermissionPair[] | undefined;
  parentRoleId?: string | null | undefined;
  forceMfa?: boolean | undefined;
}

/** Serialises concurrent parent changes, so two PATCHes cannot close a cycle between them. */
const ROLE_TREE_LOCK = 7_243_001;

export const systemRoleImmutable = (verb: 'modified' | 'deleted') =>
  accessError('system_role_immutable', { message: `System roles cannot be ${verb}` });
export const circularInheritance = () =>
  accessError('circular_inheritance');
const invalidParent = (why: string) => accessError('invalid_parent_role', { message: why });
const ownRole = () => accessError('own_role');

/** Who owns a role created in this request: the organisation acted in, else the partner. */
interface Owner {
  scope: 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
}

function ownerFor(access: AccessContext): Owner {
  if (access.orgId) return { scope: 'organization', partnerId: null, orgId: access.orgId };
  if (access.partnerId) return { scope: 'partner', partnerId: access.partnerId, orgId: null };
  throw accessError('scope_required');
}

/** Whether the caller can see a role: system roles always; custom roles of a partner or organisation it reaches. */
async function canSee(db: Db, access: AccessContext, role: RoleRow): Promise<boolean> {
  if (role.isSystem) return true;
  if (role.orgId) return (await reachOrg(db, access, role.orgId)) !== null;
  if (role.partnerId) return access.scope === 'system' || (access.scope === 'partner' && access.partnerId === role.partnerId);
  return access.scope === 'system';
}

export async function findVisibleRole(db: Db, access: AccessContext, id: string): Promise<RoleRow> {
  const [role] = await db.select().from(roles).where(eq(roles.id, id));
  if (!role || !(await canSee(db, access, role))) throw notFound('Role');
  return role;
}

async function directPermissions(db: Db, roleIds: string[]): Promise<Map<string, PermissionPair[]>> {
  const out = new Map<string, PermissionPair[]>(roleIds.map((id) => [id, []]));
  if (roleIds.length === 0) return out;
  const rows = await db
    .select({ roleId: rolePermissions.roleId, resource: permissions.resource, action: permissions.action })
    .from(rolePermissions)
    .innerJoin(permissions, eq(permissions.id, rolePermissions.permissionId))
    .where(inArray(rolePermissions.roleId, roleIds));
  for (const r of rows) out.get(r.roleId)?.push({ resource: r.resource, action: r.action });
  return out;
}

/**
 * Which holders of a role the caller is shown (userCount, /roles/:id/users). A custom role's holders
 * all live in its owner, which the caller reaches (findVisibleRole). A system role is shared by every
 * tenant, so only the holders the caller may see count: organisation holders in the organisations of
 * `visibleOrgs` (the one decision, so a partner user's `orgAccess` and a named organisation narrow
 * it), partner holders of the partner it shows (`visiblePartnerId`), everyone for a system caller
 * naming nothing. A role of scope `partner` is held only through partner_users, `organization` only
 * through organization_users. Null: none visible.
 */
function holderCondition(role: Pick<RoleRow, 'id' | 'scope' | 'isSystem'>, access: AccessContext): { table: 'partner' | 'organization'; where: SQL } | null {
  const v = visibleOrgs(access);
  if (role.scope === 'partner') {
    const base = eq(partnerUsers.roleId, role.id);
    if (!role.isSystem || v.kind === 'all') return { table: 'partner', where: base };
    const partnerId = visiblePartnerId(v);
    return partnerId ? { table: 'partner', where: and(base, eq(partnerUsers.partnerId, partnerId)) as SQL } : null;
  }
  const base = eq(organizationUsers.roleId, role.id);
  if (!role.isSystem) return { table: 'organization', where: base };
  if (v.kind === 'nothing') return null;
  return { table: 'organization', where: and(base, visibleOrgCondition(v, organizationUsers.orgId)) as SQL };
}

async function userCount(db: Db, role: RoleRow, access: AccessContext): Promise<number> {
  const h = holderCondition(role, access);
  if (!h) return 0;
  const [row] =
    h.table === 'partner'
      ? await db.select({ n: count() }).from(partnerUsers).where(h.where)
      : await db.select({ n: count() }).from(organizationUsers).where(h.where);
  return row?.n ?? 0;
}

async function toViews(db: Db, rows: RoleRow[], access: AccessContext): Promise<RoleView[]> {
  const perms = await directPermissions(db, rows.map((r) => r.id));
  const counts = await Promise.all(rows.map((r) => userCount(db, r, access)));
  return rows.map((r, i) => ({
    id: r.id,
    name: r.name,
    description: r.description,
    scope: r.scope,
    partnerId: r.partnerId,
    orgId: r.orgId,
    isSystem: r.isSystem,
    parentRoleId: r.parentRoleId,
    forceMfa: r.forceMfa,
    permissions: sortPairs(perms.get(r.id) ?? []),
    userCount: counts[i] ?? 0,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
  }));
}

async function viewOf(db: Db, role: RoleRow, access: AccessContext): Promise<RoleView> {
  const [v] = await toViews(db, [role], access);
  if (!v) throw new Error('role view missing');
  return v;
}

/**
 * Roles of the caller's context: the system roles of its scope and the custom roles of its
 * organisation (when it acts in one) or partner. A system caller naming nothing sees every role.
 */
function listCondition(access: AccessContext): SQL | undefined {
  if (access.orgId) return or(and(eq(roles.isSystem, true), eq(roles.scope, 'organization')), eq(roles.orgId, access.orgId));
  if (access.partnerId) return or(and(eq(roles.isSystem, true), eq(roles.scope, 'partner')), eq(roles.partnerId, access.partnerId));
  if (access.scope === 'system') return undefined;
  return sql`false`;
}

export async function listRoles(db: Db, access: AccessContext, q: { page: number; limit: number }): Promise<{ data: RoleView[]; total: number }> {
  const where = listCondition(access);
  const [rows, [total]] = await Promise.all([
    db.select().from(roles).where(where).orderBy(desc(roles.isSystem), asc(roles.name), asc(roles.id)).limit(q.limit).offset((q.page - 1) * q.limit),
    db.select({ n: count() }).from(roles).where(where),
  ]);
  return { data: await toViews(db, rows, access), total: total?.n ?? 0 };
}

export async function getRole(db: Db, access: AccessContext, id: string): Promise<RoleView> {
  return viewOf(db, await findVisibleRole(db, access, id), access);
}

/** Checks a parent for a role of `owner` (docs/decisions.md "Roles, permissions and seeded roles": same scope; a system role or one of the same owner; no cycle). */
async function checkParent(db: Db, owner: Owner, parentId: string, selfId: string | null): Promise<RoleRow> {
  if (selfId && parentId === selfId) throw circularInheritance();
  const [parent] = await db.select().from(roles).where(eq(roles.id, parentId));
  if (!parent) throw invalidParent('The parent role does not exist');
  if (!parent.isSystem && (parent.partnerId !== owner.partnerId || parent.orgId !== owner.orgId)) {
    // Another owner's role: answered like a missing one, so its existence is not revealed.
    throw invalidParent('The parent role does not exist');
  }
  if (parent.scope !== owner.scope) throw invalidParent(`The parent role must be a ${owner.scope} role`);
  const chain = await loadRoleChain(db, parentId);
  if (selfId && chain?.chain.some((r) => r.id === selfId)) throw circularInheritance();
  const below = selfId ? await subtreeDepth(db, selfId) : 0;
  if ((chain?.chain.length ?? 1) + 1 + below > MAX_CHAIN_DEPTH) {
    throw invalidParent(`Inheritance may be at most ${MAX_CHAIN_DEPTH} roles deep`);
  }
  return parent;
}

/** How many generations of child roles hang below a role (0: none). */
async function subtreeDepth(db: Db, roleId: string): Promise<number> {
  const result = await db.execute(sql`
    with recursive d as (
      select id, 0 as depth from roles where id = ${roleId}
      union all
      select r.id, d.depth + 1 from roles r join d on r.parent_role_id = d.id where d.depth < ${MAX_CHAIN_DEPTH * 2}
    )
    select coalesce(max(depth), 0) as depth from d`);
  return Number(rowsOf<{ depth: number | string }>(result)[0]?.depth ?? 0);
}

/** The caps of docs/decisions.md "Roles, permissions and seeded roles": what the role would grant (own + inherited) must be within the caller's permissions. */
async function assertWithinCaller(db: Db, access: AccessContext, direct: PermissionPair[], parentId: string | null): Promise<void> {
  const inherited = parentId ? ((await loadRoleChain(db, parentId))?.permissions.pairs ?? []) : [];
  const missing = access.permissions.missing(new PermissionSet([...direct, ...inherited]).pairs);
  if (missing.length > 0) throw privilegeEscalation(missing);
}

/** Changing or deleting a role needs every permission it grants now, inheritance applied (403 `privilege_escalation`). */
async function assertCoversRole(db: Db, access: AccessContext, roleId: string): Promise<void> {
  const current = await loadRoleChain(db, roleId);
  const missing = access.permissions.missing(current?.permissions.pairs ?? []);
  if (missing.length > 0) {
    throw accessError('privilege_escalation', { message: 'You cannot change a role that grants permissions you do not have', details: { permissions: missing.map(permissionKey) } });
  }
}

/** The partner or organisation whose members a custom role (and every role inheriting from it) can be held by. */
function ownerTenant(role: Pick<RoleRow, 'partnerId' | 'orgId'>): Tenant {
  if (role.orgId) return { orgId: role.orgId };
  if (role.partnerId) return { partnerId: role.partnerId };
  throw new Error('a custom role without an owner');
}

async function permissionIds(db: Db, pairs: PermissionPair[]): Promise<string[]> {
  if (pairs.length === 0) return [];
  const rows = await db
    .select({ id: permissions.id })
    .from(permissions)
    .where(or(...pairs.map((p) => and(eq(permissions.resource, p.resource), eq(permissions.action, p.action)))));
  if (rows.length !== pairs.length) throw new Error('permission catalog not seeded');
  return rows.map((r) => r.id);
}

async function setPermissions(db: Db, roleId: string, pairs: PermissionPair[]): Promise<void> {
  await db.delete(rolePermissions).where(eq(rolePermissions.roleId, roleId));
  const ids = await permissionIds(db, pairs);
  if (ids.length > 0) await db.insert(rolePermissions).values(ids.map((permissionId) => ({ roleId, permissionId })));
}

function tenantOf(role: Pick<RoleRow, 'partnerId' | 'orgId'>): { partnerId: string | null; orgId: string | null } {
  return { partnerId: role.partnerId, orgId: role.orgId };
}

export async function createRole(
  keel: Keel,
  access: AccessContext,
  input: RoleInput & { name: string },
  info: AuditRequestInfo,
): Promise<RoleView> {
  const owner = ownerFor(access);
  const direct = canonicalList(input.permissions ?? []);
  const parentId = input.parentRoleId ?? null;
  const role = await transaction(keel.db, async (tx) => {
    if (parentId) await checkParent(tx.db, owner, parentId, null);
    await assertWithinCaller(tx.db, access, direct, parentId);
    const now = clock.now();
    const [row] = await tx.db
      .insert(roles)
      .values({
        ...owner,
        parentRoleId: parentId,
        name: input.name,
        description: input.description ?? null,
        forceMfa: input.forceMfa ?? false,
        isSystem: false,
        createdAt: now,
        updatedAt: now,
      })
      .returning();
    if (!row) throw new Error('role insert returned nothing');
    await setPermissions(tx.db, row.id, direct);
    await writeAudit(tx.db, info, {
      action: 'role.create',
      ...tenantOf(row),
      target: { type: 'role', id: row.id },
      details: { name: row.name, scope: row.scope, parentRoleId: parentId, permissionCount: direct.length, forceMfa: row.forceMfa },
    });
    return row;
  });
  return viewOf(keel.db, role, access);
}

export async function updateRole(keel: Keel, access: AccessContext, id: string, input: RoleInput, info: AuditRequestInfo): Promise<RoleView> {
  const direct = input.permissions !== undefined ? canonicalList(input.permissions) : undefined;
  const role = await transaction(keel.db, async (tx) => {
    const existing = await findVisibleRole(tx.db, access, id);
    if (existing.isSystem) throw systemRoleImmutable('modified');
    if (access.roleId === existing.id) throw ownRole();
    const owner: Owner = { scope: existing.scope === 'partner' ? 'partner' : 'organization', partnerId: existing.partnerId, orgId: existing.orgId };
    const parentChanges = input.parentRoleId !== undefined && input.parentRoleId !== existing.parentRoleId;
    const parentId = input.parentRoleId !== undefined ? input.parentRoleId : existing.parentRoleId;
    // Whoever changes a role must hold everything it grants now (own + inherited), not only what it
    // will grant: a caller cannot strip a stronger role (docs/security.md "Findings", 5).
    await assertCoversRole(tx.db, access, existing.id);
    if (parentChanges) {
      await tx.db.execute(sql`select pg_advisory_xact_lock(${ROLE_TREE_LOCK})`);
      if (parentId) await checkParent(tx.db, owner, parentId, existing.id);
    }
    const grantsChange = direct !== undefined || parentChanges;
    if (grantsChange) {
      const current = direct ?? (await directPermissions(tx.db, [existing.id])).get(existing.id) ?? [];
      await assertWithinCaller(tx.db, access, current, parentId);
    }
    const changes: string[] = [];
    const set: Partial<typeof roles.$inferInsert> = { updatedAt: clock.now() };
    if (input.name !== undefined && input.name !== existing.name) {
      set.name = input.name;
      changes.push('name');
    }
    if (input.description !== undefined && input.description !== existing.description) {
      set.description = input.description;
      changes.push('description');
    }
    if (input.forceMfa !== undefined && input.forceMfa !== existing.forceMfa) {
      set.forceMfa = input.forceMfa;
      changes.push('forceMfa');
    }
    if (parentChanges) {
      set.parentRoleId = parentId;
      changes.push('parentRoleId');
    }
    const write = async () => {
      const [updated] = await tx.db.update(roles).set(set).where(eq(roles.id, existing.id)).returning();
      if (!updated) throw notFound('Role');
      if (direct !== undefined) await setPermissions(tx.db, updated.id, direct);
      return updated;
    };
    // What the role and its descendants grant changes: its owner must keep a `*:*` holder (409 last_admin).
    const row = grantsChange ? await keepsFullAdmin(tx.db, ownerTenant(existing), write) : await write();
    if (direct !== undefined) changes.push('permissions');
    await writeAudit(tx.db, info, { action: 'role.update', ...tenantOf(row), target: { type: 'role', id: row.id }, changes, details: { name: row.name } });
    tx.afterCommit(() => publishRoleChange(keel, row.id));
    return row;
  }, (err) => requestLog(keel.log, info).error({ error: loggableError(err) }, 'role invalidation failed'));
  return viewOf(keel.db, role, access);
}

function isForeignKeyViolation(err: unknown): boolean {
  for (let e: unknown = err; e && typeof e === 'object'; e = (e as { cause?: unknown }).cause) {
    if ((e as { code?: unknown }).code === '23503') return true;
  }
  return false;
}

async function blockers(db: Db, roleId: string): Promise<{ users: number; childRoles: number }> {
  // One after another: inside a transaction there is one connection.
  const [p] = await db.select({ n: count() }).from(partnerUsers).where(eq(partnerUsers.roleId, roleId));
  const [o] = await db.select({ n: count() }).from(organizationUsers).where(eq(organizationUsers.roleId, roleId));
  const [ch] = await db.select({ n: count() }).from(roles).where(eq(roles.parentRoleId, roleId));
  return { users: (p?.n ?? 0) + (o?.n ?? 0), childRoles: ch?.n ?? 0 };
}

const roleInUse = (b: { users: number; childRoles: number }) =>
  accessError('role_in_use', { message: `The role is still in use: ${b.users} user(s) and ${b.childRoles} child role(s)`, details: b });

export async function deleteRole(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  try {
    await transaction(keel.db, async (tx) => {
      const existing = await findVisibleRole(tx.db, access, id);
      if (existing.isSystem) throw systemRoleImmutable('deleted');
      if (access.roleId === existing.id) throw ownRole();
      await assertCoversRole(tx.db, access, existing.id);
      await tx.db.execute(sql`select pg_advisory_xact_lock(${ROLE_TREE_LOCK})`);
      // A role with holders or child roles is never deleted (role_in_use), so no holder can lose `*:*`
      // here; the delete still runs under the owner's last-holder rule, like every role change.
      await keepsFullAdmin(tx.db, ownerTenant(existing), async () => {
        const b = await blockers(tx.db, existing.id);
        if (b.users > 0 || b.childRoles > 0) throw roleInUse(b);
        await tx.db.delete(roles).where(eq(roles.id, existing.id));
      });
      await writeAudit(tx.db, info, { action: 'role.delete', ...tenantOf(existing), target: { type: 'role', id: existing.id }, details: { name: existing.name } });
      tx.afterCommit(() => publishRoleChange(keel, existing.id));
    }, (err) => requestLog(keel.log, info).error({ error: loggableError(err) }, 'role invalidation failed'));
  } catch (err) {
    // A holder or child appeared between the count and the delete: the foreign key stops it.
    if (isForeignKeyViolation(err)) throw roleInUse(await blockers(keel.db, id));
    throw err;
  }
}

export async function cloneRole(keel: Keel, access: AccessContext, id: string, input: { name: string }, info: AuditRequestInfo): Promise<RoleView> {
  const owner = ownerFor(access);
  const role = await transaction(keel.db, async (tx) => {
    const source = await findVisibleRole(tx.db, access, id);
    if (source.scope !== owner.scope) {
      throw accessError('scope_mismatch', { message: `A ${source.scope} role cannot be cloned into ${owner.scope === 'partner' ? 'a partner' : 'an organization'}` });
    }
    const direct = (await directPermissions(tx.db, [source.id])).get(source.id) ?? [];
    if (source.parentRoleId) await checkParent(tx.db, owner, source.parentRoleId, null);
    await assertWithinCaller(tx.db, access, direct, source.parentRoleId);
    const now = clock.now();
    const [row] = await tx.db
      .insert(roles)
      .values({
        ...owner,
        parentRoleId: source.parentRoleId,
        name: input.name,
        description: source.description,
        forceMfa: source.forceMfa,
        isSystem: false,
        createdAt: now,
        updatedAt: now,
      })
      .returning();
    if (!row) throw new Error('role insert returned nothing');
    await setPermissions(tx.db, row.id, direct);
    await writeAudit(tx.db, info, {
      action: 'role.clone',
      ...tenantOf(row),
      target: { type: 'role', id: row.id },
      details: { name: row.name, sourceRoleId: source.id, sourceRoleName: source.name },
    });
    return row;
  });
  return viewOf(keel.db, role, access);
}

export interface EffectivePermissions {
  direct: PermissionPair[];
  inherited: (PermissionPair & { sourceRoleId: string; sourceRoleName: string })[];
}

/** Direct and inherited permissions; each inherited pair names the nearest ancestor that grants it. */
export async function effectivePermissions(keel: Keel, access: AccessContext, id: string): Promise<EffectivePermissions> {
  const role = await findVisibleRole(keel.db, access, id);
  const resolved = await resolveRole(keel, role.id);
  const [self, ...ancestors] = resolved?.chain ?? [];
  const direct = sortPairs(self?.direct ?? []);
  const seen = new Set(direct.map((p) => `${p.resource}:${p.action}`));
  const inherited: EffectivePermissions['inherited'] = [];
  for (const a of ancestors) {
    for (const p of sortPairs(a.direct)) {
      const k = `${p.resource}:${p.action}`;
      if (seen.has(k)) continue;
      seen.add(k);
      inherited.push({ resource: p.resource, action: p.action, sourceRoleId: a.id, sourceRoleName: a.name });
    }
  }
  return { direct, inherited };
}

export interface RoleUserView {
  id: string;
  email: string;
  name: string;
  status: 'active' | 'invited' | 'disabled';
  avatarUrl: string | null;
  isPlatformAdmin: boolean;
  scope: 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
  roleId: string;
  orgAccess: 'all' | 'selected' | 'none' | null;
  orgIds: string[];
  siteIds: string[] | null;
  deviceGroupIds: string[] | null;
  mfaEnabled: boolean;
  mfaMethod: 'totp' | 'sms' | 'passkey' | null;
  lastLoginAt: string | null;
  createdAt: string;
}

const userCols = {
  id: users.id,
  email: users.email,
  name: users.name,
  status: users.status,
  avatarUrl: users.avatarUrl,
  isPlatformAdmin: users.isPlatformAdmin,
  mfaEnabled: users.mfaEnabled,
  mfaMethod: users.mfaMethod,
  lastLoginAt: users.lastLoginAt,
  createdAt: users.createdAt,
};

type UserBase = { [K in keyof typeof userCols]: (typeof users.$inferSelect)[K] };

function userView(u: UserBase, m: Omit<RoleUserView, keyof UserBase | 'lastLoginAt' | 'createdAt'>): RoleUserView {
  return { ...u, ...m, lastLoginAt: u.lastLoginAt?.toISOString() ?? null, createdAt: u.createdAt.toISOString() };
}

/** Users holding the role, limited to those the caller's context shows (see holderCondition). */
export async function roleUsers(keel: Keel, access: AccessContext, id: string, q: { page: number; limit: number }): Promise<{ data: RoleUserView[]; total: number }> {
  const db = keel.db;
  const role = await findVisibleRole(db, access, id);
  const h = holderCondition(role, access);
  if (!h) return { data: [], total: 0 };
  const offset = (q.page - 1) * q.limit;
  if (h.table === 'partner') {
    const [rows, [total]] = await Promise.all([
      db.select({ ...userCols, m: partnerUsers }).from(partnerUsers).innerJoin(users, eq(users.id, partnerUsers.userId)).where(h.where)
        .orderBy(asc(users.email)).limit(q.limit).offset(offset),
      db.select({ n: count() }).from(partnerUsers).where(h.where),
    ]);
    return {
      data: rows.map(({ m, ...u }) =>
        userView(u, { scope: 'partner', partnerId: m.partnerId, orgId: null, roleId: m.roleId, orgAccess: m.orgAccess, orgIds: m.orgIds, siteIds: null, deviceGroupIds: null })),
      total: total?.n ?? 0,
    };
  }
  const [rows, [total]] = await Promise.all([
    db.select({ ...userCols, m: organizationUsers }).from(organizationUsers).innerJoin(users, eq(users.id, organizationUsers.userId)).where(h.where)
      .orderBy(asc(users.email)).limit(q.limit).offset(offset),
    db.select({ n: count() }).from(organizationUsers).where(h.where),
  ]);
  return {
    data: rows.map(({ m, ...u }) =>
      userView(u, { scope: 'organization', partnerId: null, orgId: m.orgId, roleId: m.roleId, orgAccess: null, orgIds: [], siteIds: m.siteIds, deviceGroupIds: m.deviceGroupIds })),
    total: total?.n ?? 0,
  };
}

/**
 * For the users module (invitations, role assignment): the role if it can be given to a member of
 * this partner or organisation (same scope; a system role or one the tenant owns), else null.
 */
export async function assignableRole(db: Db, roleId: string, target: { partnerId: string } | { orgId: string }): Promise<RoleRow | null> {
  const [role] = await db.select().from(roles).where(eq(roles.id, roleId));
  if (!role) return null;
  if ('partnerId' in target) {
    return role.scope === 'partner' && (role.isSystem || role.partnerId === target.partnerId) ? role : null;
  }
  return role.scope === 'organization' && (role.isSystem || role.orgId === target.orgId) ? role : null;
}
