import { index, integer, jsonb, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts } from './columns.js';

/**
 * The one store for single-use, short-lived records (MFA temp tokens, TOTP setup, WebAuthn challenges,
 * SMS codes, reset and invite tokens, SSO sessions and exchange codes). A record is found by the
 * SHA-256 of its secret and consumed by one DELETE ... RETURNING, so exactly one caller wins.
 * `sealed` holds any secret payload, AES-256-GCM sealed; `data` only non-secret fields.
 */
export const singleUseRecords = pgTable(
  'single_use_records',
  {
    id: idColumn(),
    purpose: varchar('purpose', { length: 50 }).notNull(),
    tokenHash: varchar('token_hash', { length: 64 }).notNull(),
    subjectId: uuid('subject_id'),
    data: jsonb('data').$type<Record<string, unknown>>().notNull().default({}),
    sealed: text('sealed'),
    attempts: integer('attempts').notNull().default(0),
    expiresAt: ts('expires_at').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    uniqueIndex('single_use_records_purpose_hash_idx').on(t.purpose, t.tokenHash),
    index('single_use_records_subject_idx').on(t.purpose, t.subjectId),
    index('single_use_records_expires_idx').on(t.expiresAt),
  ],
);
