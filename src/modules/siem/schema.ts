import { bigint, index, integer, pgTable, primaryKey, text, timestamp, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, updatedAt } from '../../platform/db/columns.js';
import { partners } from '../tenancy/schema.js';

/**
 * Destinations the audit log is streamed to (docs/decisions.md "Audit streaming"): a partner's (its own
 * and its organisations' entries) or, with no partner, the platform's (every entry). The secret of an
 * `https` stream is sealed (`secret_sealed`, context: the stream's id). `claim_id`/`lease_expires_at`:
 * the sender that holds the stream (one at a time across processes).
 */
export const auditStreams = pgTable(
  'audit_streams',
  {
    id: idColumn(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    type: varchar('type', { length: 10 }).$type<'syslog' | 'https'>().notNull(),
    url: text('url').notNull(),
    tlsCa: text('tls_ca'),
    secretSealed: text('secret_sealed'),
    status: varchar('status', { length: 20 }).$type<'pending' | 'ok' | 'failing'>().notNull().default('pending'),
    lastError: text('last_error'),
    lastSentAt: timestamp('last_sent_at', { withTimezone: true }),
    failures: integer('failures').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }),
    claimId: uuid('claim_id'),
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
  },
  (t) => [index('audit_streams_partner_idx').on(t.partnerId)],
);

/** A stream's durable cursor: per hash chain of its scope, the position of the last entry sent. */
export const auditStreamCursors = pgTable(
  'audit_stream_cursors',
  {
    streamId: uuid('stream_id')
      .notNull()
      .references(() => auditStreams.id, { onDelete: 'cascade' }),
    scopeId: uuid('scope_id').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ name: 'audit_stream_cursors_pk', columns: [t.streamId, t.scopeId] })],
);
