import { sql } from 'drizzle-orm';
import { bigint, index, integer, jsonb, pgTable, primaryKey, text, timestamp, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn } from '../../platform/db/columns.js';

/** Append-only. No foreign keys: an entry outlives what it speaks of. Never holds a secret. */
export const auditLogs = pgTable(
  'audit_logs',
  {
    id: idColumn(),
    createdAt: createdAt(),
    actorType: varchar('actor_type', { length: 20 }).notNull(),
    actorId: uuid('actor_id'),
    actorEmail: varchar('actor_email', { length: 255 }),
    partnerId: uuid('partner_id'),
    orgId: uuid('org_id'),
    action: varchar('action', { length: 100 }).notNull(),
    targetType: varchar('target_type', { length: 50 }),
    targetId: varchar('target_id', { length: 100 }),
    /** Names of the fields that changed; never their secret values. */
    changes: jsonb('changes').$type<string[]>(),
    details: jsonb('details').$type<Record<string, unknown>>(),
    result: varchar('result', { length: 20 }).notNull().default('success'),
    ipAddress: varchar('ip_address', { length: 45 }),
    userAgent: text('user_agent'),
    requestId: varchar('request_id', { length: 100 }),
    /**
     * The entry's link in its scope's hash chain (docs/decisions.md "Audit: hash chain, checkpoints,
     * security events"): set by the `audit_logs_link` trigger (drizzle/0017_audit_chain.sql) under the
     * lock of the scope's head row, whatever a writer gives.
     */
    chainSeq: bigint('chain_seq', { mode: 'number' }).notNull(),
    prevHash: varchar('prev_hash', { length: 64 }).notNull(),
    hash: varchar('hash', { length: 64 }).notNull(),
  },
  (t) => [
    index('audit_logs_org_created_idx').on(t.orgId, t.createdAt),
    index('audit_logs_partner_created_idx').on(t.partnerId, t.createdAt),
    index('audit_logs_action_idx').on(t.action),
    index('audit_logs_actor_idx').on(t.actorId),
    index('audit_logs_chain_idx').on(sql`audit_scope_id(${t.orgId}, ${t.partnerId})`, t.chainSeq),
  ],
);

/**
 * The head of each scope's chain: one row per organisation, partner and the platform (the zero uuid),
 * locked by every append. `start_seq`/`start_prev_hash`: where the chain begins since retention.
 */
export const auditChainHeads = pgTable('audit_chain_heads', {
  scopeId: uuid('scope_id').primaryKey(),
  scopeKind: varchar('scope_kind', { length: 20 }).notNull(),
  seq: bigint('seq', { mode: 'number' }).notNull(),
  hash: varchar('hash', { length: 64 }).notNull(),
  prevHash: varchar('prev_hash', { length: 64 }).notNull(),
  startSeq: bigint('start_seq', { mode: 'number' }).notNull().default(1),
  startPrevHash: varchar('start_prev_hash', { length: 64 }).notNull(),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
});

/** Signed chain heads, written daily: an operator copies them out of the database (an outside anchor). */
export const auditCheckpoints = pgTable(
  'audit_checkpoints',
  {
    id: idColumn(),
    createdAt: createdAt(),
    scopeId: uuid('scope_id').notNull(),
    scopeKind: varchar('scope_kind', { length: 20 }).notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    hash: varchar('hash', { length: 64 }).notNull(),
    /** The signing key's Ed25519 public key, base64 (raw 32 bytes). */
    publicKey: varchar('public_key', { length: 64 }).notNull(),
    /** Base64 Ed25519 signature of the checkpoint's canonical text (audit/chain.ts `checkpointText`). */
    signature: varchar('signature', { length: 100 }).notNull(),
  },
  (t) => [index('audit_checkpoints_scope_idx').on(t.scopeId, t.seq)],
);

/**
 * Counts of failed and refused security events per scope, action, source and minute: the first of a
 * minute is written to the log at once, the rest become one entry with the count when the minute is over.
 */
export const auditEventBuckets = pgTable(
  'audit_event_buckets',
  {
    scopeId: uuid('scope_id').notNull(),
    action: varchar('action', { length: 100 }).notNull(),
    source: varchar('source', { length: 64 }).notNull(),
    minute: timestamp('minute', { withTimezone: true }).notNull(),
    orgId: uuid('org_id'),
    partnerId: uuid('partner_id'),
    count: integer('count').notNull(),
    firstAt: timestamp('first_at', { withTimezone: true }).notNull(),
    lastAt: timestamp('last_at', { withTimezone: true }).notNull(),
  },
  (t) => [primaryKey({ name: 'audit_event_buckets_pk', columns: [t.scopeId, t.action, t.source, t.minute] }), index('audit_event_buckets_minute_idx').on(t.minute)],
);
