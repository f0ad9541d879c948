import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import { permissions, rolePermissions, roles } from './schema.js';
import { PERMISSION_CATALOG, SYSTEM_ROLES } from './catalog.js';

/**
 * Idempotent seed, run at every start after migrations: the permission catalog and the system roles
 * with exactly their listed permissions. Cheap when nothing changed (a few upserts in one transaction).
 */
export async function seedAccess(db: Db): Promise<void> {
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
