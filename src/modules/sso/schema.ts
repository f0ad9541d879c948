import { sql } from 'drizzle-orm';
import { boolean, check, index, jsonb, pgEnum, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { organizations, partners } from '../tenancy/schema.js';
import { orgAccess, roles } from '../access/schema.js';
import { users } from '../identity/schema.js';

export const ssoProviderType = pgEnum('sso_provider_type', ['oidc', 'saml']);
export const ssoProviderStatus = pgEnum('sso_provider_status', ['inactive', 'testing', 'active']);

/** Claim names of the IdP for each profile field (docs/specification.md "Single sign-on: providers"). */
export interface AttributeMapping {
  email: string;
  name: string;
  firstName?: string | undefined;
  lastName?: string | undefined;
  groups?: string | undefined;
}

export interface GroupRoleMapping {
  group: string;
  roleId: string;
  /** Partner providers: the mapping gives `orgAccess: selected` with these organisations of the partner (absent: the provider's orgAccess). */
  orgIds?: string[] | undefined;
}

/**
 * An organisation's identity provider (docs/specification.md "Single sign-on: providers"). `client_secret` is AES-256-GCM sealed (bound to the
 * row id); at most one provider per organisation is `active` (partial unique index).
 */
export const ssoProviders = pgTable(
  'sso_providers',
  {
    id: idColumn(),
    /** Exactly one of orgId and partnerId (docs/decisions.md "Partner-level SSO"). */
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'cascade' }),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    name: varchar('name', { length: 255 }).notNull(),
    type: ssoProviderType('type').notNull(),
    status: ssoProviderStatus('status').notNull().default('inactive'),
    preset: varchar('preset', { length: 100 }),
    issuer: varchar('issuer', { length: 500 }),
    clientId: varchar('client_id', { length: 255 }),
    clientSecret: text('client_secret'),
    authorizationUrl: varchar('authorization_url', { length: 500 }),
    tokenUrl: varchar('token_url', { length: 500 }),
    userInfoUrl: varchar('user_info_url', { length: 500 }),
    jwksUrl: varchar('jwks_url', { length: 500 }),
    scopes: varchar('scopes', { length: 500 }).notNull(),
    attributeMapping: jsonb('attribute_mapping').$type<AttributeMapping>().notNull(),
    autoProvision: boolean('auto_provision').notNull().default(true),
    defaultRoleId: uuid('default_role_id').references(() => roles.id, { onDelete: 'set null' }),
    allowedDomains: varchar('allowed_domains', { length: 1000 }).notNull().default(''),
    enforceSso: boolean('enforce_sso').notNull().default(false),
    entityId: varchar('entity_id', { length: 500 }),
    ssoUrl: varchar('sso_url', { length: 500 }),
    certificate: text('certificate'),
    groupRoleMappings: jsonb('group_role_mappings').$type<GroupRoleMapping[]>().notNull().default([]),
    /** OIDC `acr` / SAML AuthnContextClassRef values that mean the IdP checked a second factor (sso/mfa.ts). */
    mfaAcrValues: jsonb('mfa_acr_values').$type<string[]>().notNull().default([]),
    /** Partner providers: the orgAccess of a provisioned technician when no group mapping names organisations. */
    orgAccess: orgAccess('org_access').notNull().default('all'),
    orgIds: uuid('org_ids').array().notNull().default(sql`'{}'::uuid[]`),
    /** Partner providers: members who keep password sign-in under enforceSSO, audited (break-glass). */
    breakGlassUserIds: uuid('break_glass_user_ids').array().notNull().default(sql`'{}'::uuid[]`),
    createdBy: uuid('created_by').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index('sso_providers_org_idx').on(t.orgId),
    uniqueIndex('sso_providers_one_active_idx').on(t.orgId).where(sql`status = 'active'`),
    index('sso_providers_partner_idx').on(t.partnerId).where(sql`partner_id IS NOT NULL`),
    uniqueIndex('sso_providers_one_active_partner_idx').on(t.partnerId).where(sql`status = 'active' AND partner_id IS NOT NULL`),
    check('sso_providers_one_owner', sql`(org_id IS NULL) <> (partner_id IS NULL)`),
  ],
);

/** A user's link to an identity at a provider (docs/specification.md "Single sign-on: the login flow"); IdP tokens sealed. */
export const ssoIdentities = pgTable(
  'sso_identities',
  {
    id: idColumn(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    providerId: uuid('provider_id')
      .notNull()
      .references(() => ssoProviders.id, { onDelete: 'cascade' }),
    externalId: varchar('external_id', { length: 255 }).notNull(),
    email: varchar('email', { length: 255 }).notNull(),
    profile: jsonb('profile').$type<Record<string, unknown>>().notNull().default({}),
    accessToken: text('access_token'),
    refreshToken: text('refresh_token'),
    tokenExpiresAt: ts('token_expires_at'),
    lastLoginAt: ts('last_login_at'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('sso_identities_provider_external_idx').on(t.providerId, t.externalId),
    uniqueIndex('sso_identities_provider_user_idx').on(t.providerId, t.userId),
    index('sso_identities_user_idx').on(t.userId),
  ],
);
