import { sql } from 'drizzle-orm';
import {
  type AnyPgColumn,
  boolean,
  index,
  jsonb,
  pgEnum,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
  uuid,
  varchar,
} from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { organizations, partners } from '../tenancy/schema.js';
import { users } from '../identity/schema.js';

export const roleScope = pgEnum('role_scope', ['system', 'partner', 'organization']);
export const orgAccess = pgEnum('org_access', ['all', 'selected', 'none']);

export const roles = pgTable(
  'roles',
  {
    id: idColumn(),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'cascade' }),
    parentRoleId: uuid('parent_role_id').references((): AnyPgColumn => roles.id, { onDelete: 'restrict' }),
    scope: roleScope('scope').notNull(),
    name: varchar('name', { length: 100 }).notNull(),
    description: text('description'),
    isSystem: boolean('is_system').notNull().default(false),
    forceMfa: boolean('force_mfa').notNull().default(false),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index('roles_partner_idx').on(t.partnerId),
    index('roles_org_idx').on(t.orgId),
    index('roles_parent_idx').on(t.parentRoleId),
  ],
);

export const permissions = pgTable(
  'permissions',
  {
    id: idColumn(),
    resource: varchar('resource', { length: 100 }).notNull(),
    action: varchar('action', { length: 50 }).notNull(),
    description: text('description'),
  },
  (t) => [uniqueIndex('permissions_resource_action_idx').on(t.resource, t.action)],
);

export const rolePermissions = pgTable(
  'role_permissions',
  {
    roleId: uuid('role_id')
      .notNull()
      .references(() => roles.id, { onDelete: 'cascade' }),
    permissionId: uuid('permission_id')
      .notNull()
      .references(() => permissions.id, { onDelete: 'cascade' }),
    constraints: jsonb('constraints'),
  },
  (t) => [primaryKey({ columns: [t.roleId, t.permissionId] })],
);

/** A user has at most one association: a partner membership or one organisation membership. */
export const partnerUsers = pgTable(
  'partner_users',
  {
    id: idColumn(),
    partnerId: uuid('partner_id')
      .notNull()
      .references(() => partners.id, { onDelete: 'cascade' }),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    roleId: uuid('role_id')
      .notNull()
      .references(() => roles.id, { onDelete: 'restrict' }),
    orgAccess: orgAccess('org_access').notNull().default('all'),
    orgIds: uuid('org_ids').array().notNull().default(sql`'{}'::uuid[]`),
    createdAt: createdAt(),
  },
  (t) => [
    uniqueIndex('partner_users_user_idx').on(t.userId),
    index('partner_users_partner_idx').on(t.partnerId),
    // Role holders: user counts, role delete checks and the RESTRICT foreign key.
    index('partner_users_role_idx').on(t.roleId),
  ],
);

export const organizationUsers = pgTable(
  'organization_users',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    roleId: uuid('role_id')
      .notNull()
      .references(() => roles.id, { onDelete: 'restrict' }),
    /** null: all sites / device groups of the organisation. */
    siteIds: uuid('site_ids').array(),
    deviceGroupIds: uuid('device_group_ids').array(),
    createdAt: createdAt(),
  },
  (t) => [
    uniqueIndex('organization_users_user_idx').on(t.userId),
    index('organization_users_org_idx').on(t.orgId),
    index('organization_users_role_idx').on(t.roleId),
  ],
);

export interface PermissionPair {
  resource: string;
  action: string;
}

export const apiKeys = pgTable(
  'api_keys',
  {
    id: idColumn(),
    name: varchar('name', { length: 255 }).notNull(),
    /** First characters of the key, shown in lists so a person can tell keys apart. */
    keyPrefix: varchar('key_prefix', { length: 16 }).notNull(),
    keyHash: varchar('key_hash', { length: 64 }).notNull(),
    createdBy: uuid('created_by')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    scope: roleScope('scope').notNull(),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'cascade' }),
    permissions: jsonb('permissions').$type<PermissionPair[]>().notNull(),
    expiresAt: ts('expires_at'),
    lastUsedAt: ts('last_used_at'),
    revokedAt: ts('revoked_at'),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('api_keys_hash_idx').on(t.keyHash), index('api_keys_creator_idx').on(t.createdBy)],
);
