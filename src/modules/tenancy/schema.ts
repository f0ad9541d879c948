import { index, jsonb, pgTable, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, updatedAt } from '../../platform/db/columns.js';

/** `settings.security`: { requireMfa, allowedMfaMethods: { totp, sms, passkey } } (docs/decisions.md "Access and tenancy"). */
export interface TenantSettings {
  security?: {
    requireMfa?: boolean | undefined;
    allowedMfaMethods?: { totp?: boolean | undefined; sms?: boolean | undefined; passkey?: boolean | undefined } | undefined;
  } | undefined;
  [key: string]: unknown;
}

export const partners = pgTable(
  'partners',
  {
    id: idColumn(),
    name: varchar('name', { length: 255 }).notNull(),
    /** Unique, lowercase: the partner's sign-in page `/login/<slug>` (docs/decisions.md "Partner-level SSO"). */
    slug: varchar('slug', { length: 63 }).notNull(),
    settings: jsonb('settings').$type<TenantSettings>().notNull().default({}),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('partners_slug_idx').on(t.slug)],
);

export const organizations = pgTable(
  'organizations',
  {
    id: idColumn(),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'restrict' }),
    name: varchar('name', { length: 255 }).notNull(),
    settings: jsonb('settings').$type<TenantSettings>().notNull().default({}),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('organizations_partner_idx').on(t.partnerId)],
);

export const sites = pgTable(
  'sites',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: varchar('name', { length: 255 }).notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('sites_org_idx').on(t.orgId)],
);

export const deviceGroups = pgTable(
  'device_groups',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    siteId: uuid('site_id').references(() => sites.id, { onDelete: 'set null' }),
    name: varchar('name', { length: 255 }).notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('device_groups_org_idx').on(t.orgId)],
);
