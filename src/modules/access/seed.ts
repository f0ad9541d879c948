import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import { permissions, rolePermissions, roles } from './schema.js';
import { PERMISSION_CATALOG, SYSTEM_ROLES } from './catalog.js';

const SYSTEM_ROLE_IDS = Object.values(SYSTEM_ROLES).map((r) => r.id);

/**
 * True when the catalog and the system roles in the database already match the seed: three reads
 * instead of the ~20 writes of a seed, so a restart on an existing data dir skips the transaction.
 */
async function seedUpToDate(db: Db): Promise<boolean> {
  const [perms, seededRoles, grants] = await Promise.all([
    db.select({ id: permissions.id, resource: permissions.resource, action: permissions.action }).from(permissions),
    db
      .select({ id: roles.id, name: roles.name, forceMfa: roles.forceMfa, isSystem: roles.isSystem })
      .from(roles)
      .where(inArray(roles.id, SYSTEM_ROLE_IDS)),
    db.select({ roleId: rolePermissions.roleId, permissionId: rolePermissions.permissionId }).from(rolePermissions).where(inArray(rolePermissions.roleId, SYSTEM_ROLE_IDS)),
  ]);
  const idOf = new Map(perms.map((p) => [`${p.resource}:${p.action}`, p.id]));
  if (PERMISSION_CATALOG.some((p) => !idOf.has(`${p.resource}:${p.action}`))) return false;
  const roleById = new Map(seededRoles.map((r) => [r.id, r]));
  for (const role of Object.values(SYSTEM_ROLES)) {
    const row = roleById.get(role.id);
    if (row?.name !== role.name || row.forceMfa !== role.forceMfa || !row.isSystem) return false;
    const wanted = new Set(role.permissions.map((p) => idOf.get(`${p.resource}:${p.action}`)).filter((id): id is string => !!id));
    const current = grants.filter((g) => g.roleId === role.id).map((g) => g.permissionId);
    if (current.length !== wanted.size || current.some((id) => !wanted.has(id))) return false;
  }
  return true;
}

/**
 * Idempotent seed, run at every start after migrations: the permission catalog and the system roles
 * with exactly their listed permissions. When nothing changed it only reads (see seedUpToDate).
 */
export async function seedAccess(db: Db): Promise<void> {
  if (await seedUpToDate(db)) return;
  await db.transaction(async (tx) => {
    await tx
      .insert(permissions)
      .values(PERMISSION_CATALOG.map((p) => ({ resource: p.resource, action: p.action, description: p.description })))
      .onConflictDoNothing();
    const all = await tx.select().from(permissions);
    const idOf = new Map(all.map((p) => [`${p.resource}:${p.action}`, p.id]));
    for (const role of Object.values(SYSTEM_ROLES)) {
      await tx
        .insert(roles)
        .values({ id: role.id, name: role.name, scope: role.scope, description: role.description, isSystem: true, forceMfa: role.forceMfa })
        .onConflictDoUpdate({
          target: roles.id,
          set: { name: role.name, description: role.description, forceMfa: role.forceMfa, isSystem: true },
          setWhere: sql`${roles.name} is distinct from ${role.name} or ${roles.forceMfa} is distinct from ${role.forceMfa}`,
        });
      const wanted = role.permissions.map((p) => idOf.get(`${p.resource}:${p.action}`)).filter((id): id is string => !!id);
      await tx
        .insert(rolePermissions)
        .values(wanted.map((permissionId) => ({ roleId: role.id, permissionId })))
        .onConflictDoNothing();
      const current = await tx.select({ id: rolePermissions.permissionId }).from(rolePermissions).where(eq(rolePermissions.roleId, role.id));
      const extra = current.map((r) => r.id).filter((id) => !wanted.includes(id));
      if (extra.length > 0) {
        await tx.delete(rolePermissions).where(and(eq(rolePermissions.roleId, role.id), inArray(rolePermissions.permissionId, extra)));
      }
    }
  });
}
