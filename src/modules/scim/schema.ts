import { sql } from 'drizzle-orm';
import { boolean, index, integer, jsonb, pgTable, primaryKey, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { organizations } from '../tenancy/schema.js';
import { users } from '../identity/schema.js';
import { roles } from '../access/schema.js';

/**
 * A directory's bearer token for `/scim/v2` (docs/decisions.md "SCIM provisioning"): one organisation's,
 * stored as its SHA-256 only; `prefix` (the first characters) tells tokens apart in lists.
 */
export const scimTokens = pgTable(
  'scim_tokens',
  {
    id: idColumn(),
    orgId: uuid('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
    name: varchar('name', { length: 100 }).notNull(),
    tokenHash: varchar('token_hash', { length: 64 }).notNull(),
    prefix: varchar('prefix', { length: 16 }).notNull(),
    createdBy: uuid('created_by').references(() => users.id, { onDelete: 'set null' }),
    lastUsedAt: ts('last_used_at'),
    expiresAt: ts('expires_at'),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('scim_tokens_hash_idx').on(t.tokenHash), index('scim_tokens_org_idx').on(t.orgId)],
);

export interface ScimGroupRoleMapping {
  group: string;
  roleId: string;
}

/**
 * An organisation's SCIM settings: the role a provisioned user gets, and the group mappings. A save
 * re-decides every managed member's role (docs/decisions.md "SCIM at scale"): `reevaluationPending`
 * until the last batch is done, `reevaluationCursor` the last user id decided, `reevaluationBy` the
 * saver, whose permissions bound what the batches grant.
 */
export const scimSettings = pgTable(
  'scim_settings',
  {
    orgId: uuid('org_id').primaryKey().references(() => organizations.id, { onDelete: 'cascade' }),
    defaultRoleId: uuid('default_role_id').references(() => roles.id, { onDelete: 'set null' }),
    groupRoleMappings: jsonb('group_role_mappings').$type<ScimGroupRoleMapping[]>().notNull().default([]),
    reevaluationPending: boolean('reevaluation_pending').notNull().default(false),
    reevaluationCursor: uuid('reevaluation_cursor'),
    reevaluationBy: uuid('reevaluation_by').references(() => users.id, { onDelete: 'set null' }),
    updatedAt: updatedAt(),
  },
  (t) => [index('scim_settings_reevaluation_idx').on(t.orgId).where(sql`${t.reevaluationPending}`)],
);

/** The SCIM attributes Keel keeps beside the account (userName is the account's email, `active` its status). */
export interface ScimUserAttributes {
  name?: Record<string, string>;
  displayName?: string;
  title?: string;
  emails?: { value: string; type?: string; primary?: boolean }[];
  enterprise?: { department?: string; manager?: { value?: string; displayName?: string } };
}

/**
 * An account a directory manages in one organisation (its SCIM id is the account id). The lookup
 * columns a directory filters on (`userName`, `externalId`) are indexed per organisation.
 */
export const scimUsers = pgTable(
  'scim_users',
  {
    userId: uuid('user_id').primaryKey().references(() => users.id, { onDelete: 'cascade' }),
    orgId: uuid('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
    /** The email in lower case. */
    userName: varchar('user_name', { length: 255 }).notNull(),
    externalId: varchar('external_id', { length: 255 }),
    attributes: jsonb('attributes').$type<ScimUserAttributes>().notNull().default({}),
    version: integer('version').notNull().default(1),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('scim_users_org_user_name_idx').on(t.orgId, t.userName),
    index('scim_users_org_external_id_idx').on(t.orgId, t.externalId),
    index('scim_users_org_created_idx').on(t.orgId, t.createdAt),
    index('scim_users_org_updated_idx').on(t.orgId, t.updatedAt),
  ],
);

/**
 * A directory's group in one organisation (docs/decisions.md "SCIM"): its displayName is unique in
 * the organisation without regard to case (the group mappings name it), so a retried POST is 409.
 */
export const scimGroups = pgTable(
  'scim_groups',
  {
    id: idColumn(),
    orgId: uuid('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
    displayName: varchar('display_name', { length: 255 }).notNull(),
    externalId: varchar('external_id', { length: 255 }),
    version: integer('version').notNull().default(1),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('scim_groups_org_display_name_idx').on(t.orgId, sql`lower(${t.displayName})`),
    index('scim_groups_org_external_id_idx').on(t.orgId, t.externalId),
    index('scim_groups_org_created_idx').on(t.orgId, t.createdAt),
  ],
);

/** A managed user's membership of a group (both of the same organisation). */
export const scimGroupMembers = pgTable(
  'scim_group_members',
  {
    groupId: uuid('group_id').notNull().references(() => scimGroups.id, { onDelete: 'cascade' }),
    userId: uuid('user_id').notNull().references(() => scimUsers.userId, { onDelete: 'cascade' }),
  },
  (t) => [primaryKey({ columns: [t.groupId, t.userId] }), index('scim_group_members_user_idx').on(t.userId)],
);

export type ScimGroupRow = typeof scimGroups.$inferSelect;
export type ScimTokenRow = typeof scimTokens.$inferSelect;
export type ScimUserRow = typeof scimUsers.$inferSelect;
