import { randomBytes } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import type { TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant, type TestUser } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { permissions, rolePermissions, roles } from '../../src/modules/access/schema.js';
import type { PermissionPair } from '../../src/modules/access/permissions.js';

export const ROLE = {
  partnerAdmin: SYSTEM_ROLES.partnerAdmin.id,
  partnerTechnician: SYSTEM_ROLES.partnerTechnician.id,
  partnerReadOnly: SYSTEM_ROLES.partnerReadOnly.id,
  orgAdmin: SYSTEM_ROLES.orgAdmin.id,
  orgTechnician: SYSTEM_ROLES.orgTechnician.id,
  orgReadOnly: SYSTEM_ROLES.orgReadOnly.id,
};

const pair = (s: string): PermissionPair => {
  const [resource = '', action = ''] = s.split(':');
  return { resource, action };
};

/**
 * Arrangement only: a custom role written straight to the tables (the API under test is used in the
 * assertions). `perms` are canonical `resource:action` strings.
 */
export async function insertRole(
  app: TestApp,
  opts: { scope: 'partner' | 'organization'; partnerId?: string; orgId?: string; name?: string; perms?: string[]; parentRoleId?: string | null; forceMfa?: boolean },
): Promise<string> {
  const db = app.server.keel.db;
  const [row] = await db
    .insert(roles)
    .values({
      scope: opts.scope,
      partnerId: opts.partnerId ?? null,
      orgId: opts.orgId ?? null,
      name: opts.name ?? `Role ${randomBytes(3).toString('hex')}`,
      parentRoleId: opts.parentRoleId ?? null,
      forceMfa: opts.forceMfa ?? false,
    })
    .returning({ id: roles.id });
  const id = row!.id;
  for (const p of (opts.perms ?? []).map(pair)) {
    const [perm] = await db
      .select({ id: permissions.id })
      .from(permissions)
      .where(and(eq(permissions.resource, p.resource), eq(permissions.action, p.action)));
    if (!perm) throw new Error(`no such permission ${p.resource}:${p.action}`);
    await db.insert(rolePermissions).values({ roleId: id, permissionId: perm.id });
  }
  return id;
}

export interface World extends Tenant {
  /** A partner-wide administrator (custom `*:*` partner role without Force MFA). */
  partnerFull: TestUser;
  platformAdmin: TestUser;
  tokens: Record<'partnerFull' | 'partnerTechnician' | 'orgAdmin' | 'orgTechnician' | 'orgReadOnly' | 'platformAdmin', string>;
}

/** A partner with orgs A and B, users of each seeded role, a platform admin, and their access tokens. */
export async function createWorld(app: TestApp): Promise<World> {
  const tenant = await createTenant(app);
  const fullRole = await insertRole(app, { scope: 'partner', partnerId: tenant.partnerId, name: 'Partner Full', perms: ['*:*'] });
  const partnerFull = await createUser(app, { name: 'Partner Full', partner: { partnerId: tenant.partnerId, roleId: fullRole } });
  const platformAdmin = await createUser(app, { name: 'Platform Admin', platformAdmin: true });
  const tok = async (u: TestUser) => (await login(app, u)).accessToken;
  return {
    ...tenant,
    partnerFull,
    platformAdmin,
    tokens: {
      partnerFull: await tok(partnerFull),
      partnerTechnician: await tok(tenant.partnerTechnician),
      orgAdmin: await tok(tenant.orgAdmin),
      orgTechnician: await tok(tenant.orgTechnician),
      orgReadOnly: await tok(tenant.orgReadOnly),
      platformAdmin: await tok(platformAdmin),
    },
  };
}

/** A user in an organisation with the given role, signed in. */
export async function orgUserWithRole(app: TestApp, orgId: string, roleId: string, extra: { siteIds?: string[] | null; deviceGroupIds?: string[] | null } = {}) {
  const user = await createUser(app, { org: { orgId, roleId, ...extra } });
  return { user, token: (await login(app, user)).accessToken };
}

/** A user in a partner with the given role and org access, signed in. */
export async function partnerUserWithRole(app: TestApp, partnerId: string, roleId: string, orgAccess: 'all' | 'selected' | 'none' = 'all', orgIds: string[] = []) {
  const user = await createUser(app, { partner: { partnerId, roleId, orgAccess, orgIds } });
  return { user, token: (await login(app, user)).accessToken };
}

export const keys = (list: { resource: string; action: string }[]) => list.map((p) => `${p.resource}:${p.action}`).sort();
