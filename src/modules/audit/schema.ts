import { index, jsonb, pgTable, text, uuid, varchar } from 'drizzle-orm/pg-core';
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
  },
  (t) => [
    index('audit_logs_org_created_idx').on(t.orgId, t.createdAt),
    index('audit_logs_partner_created_idx').on(t.partnerId, t.createdAt),
    index('audit_logs_action_idx').on(t.action),
    index('audit_logs_actor_idx').on(t.actorId),
  ],
);
