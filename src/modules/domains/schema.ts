import { sql } from 'drizzle-orm';
import { check, index, pgTable, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { organizations, partners } from '../tenancy/schema.js';
import { users } from '../identity/schema.js';

/**
 * An email domain an organisation (or a partner) claims, proven by a DNS TXT record
 * `keel-verification=<token>` at the domain (docs/decisions.md "Verified domains and SSO step-up"). At most one owner
 * holds a domain `verified` at a time (partial unique index); the token is public by design (it is
 * published in DNS) and is compared in constant time.
 */
export const verifiedDomains = pgTable(
  'verified_domains',
  {
    id: idColumn(),
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'cascade' }),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    /** IDNA (punycode), lower case, no trailing dot. */
    domain: varchar('domain', { length: 253 }).notNull(),
    status: varchar('status', { length: 16 }).$type<'pending' | 'verified'>().notNull().default('pending'),
    token: varchar('token', { length: 64 }).notNull(),
    /** Why the last check did not verify (or why a verified domain lapsed); null after a success. */
    reason: varchar('reason', { length: 200 }),
    verifiedAt: ts('verified_at'),
    checkedAt: ts('checked_at'),
    lapsedAt: ts('lapsed_at'),
    createdBy: uuid('created_by').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('verified_domains_one_verified_idx').on(t.domain).where(sql`status = 'verified'`),
    uniqueIndex('verified_domains_org_domain_idx').on(t.orgId, t.domain).where(sql`org_id IS NOT NULL`),
    uniqueIndex('verified_domains_partner_domain_idx').on(t.partnerId, t.domain).where(sql`partner_id IS NOT NULL`),
    index('verified_domains_due_idx').on(t.checkedAt).where(sql`status = 'verified'`),
    check('verified_domains_one_owner', sql`(org_id IS NULL) <> (partner_id IS NULL)`),
    check('verified_domains_status', sql`status IN ('pending', 'verified')`),
  ],
);

export type DomainRow = typeof verifiedDomains.$inferSelect;
