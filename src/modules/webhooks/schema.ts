import { sql } from 'drizzle-orm';
import { bigint, check, index, integer, json, jsonb, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { organizations, partners } from '../tenancy/schema.js';

/** Stored webhook status: the API's `active` / `paused` / `failed` (docs/decisions.md "Webhook shapes"). */
export type StoredWebhookStatus = 'active' | 'disabled' | 'error';

/** A delivery's own retry schedule (docs/specification.md "Limits"), the defaults filled in. */
export interface RetryPolicy {
  maxRetries: number;
  initialDelayMs: number;
  backoffMultiplier: number;
  maxDelayMs: number;
  /** The named `extended` schedule (its own delays, with jitter) instead of the exponential one. */
  schedule?: 'extended' | undefined;
}

/**
 * A subscription of an organisation's events (docs/specification.md "Webhooks: subscriptions"). The URL, the secrets and the custom headers
 * (which often carry a receiver's credentials) are AES-256-GCM sealed, bound to the row's id.
 * `previous_secret_sealed` is the secret a rotation replaced, still signing until
 * `previous_secret_expires_at`; `older_secrets_sealed` holds the ones rotated out before it (a sealed
 * JSON list, each with its own expiry: every rotated-out secret keeps its whole overlap). `failing_since` / `dead_letter_streak` decide the automatic move to
 * `error` (docs/decisions.md "Webhook shapes": 24 hours in which every delivery was dead-lettered, at least 10).
 */
export const webhooks = pgTable(
  'webhooks',
  {
    id: idColumn(),
    /** The organisation whose events it receives; null for a partner-wide webhook. */
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'cascade' }),
    /** A partner-wide webhook's partner: it receives the events of every organisation of the partner (docs/decisions.md "Webhook replay and partner-wide webhooks"). */
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'cascade' }),
    name: varchar('name', { length: 255 }).notNull(),
    urlSealed: text('url_sealed').notNull(),
    secretSealed: text('secret_sealed'),
    previousSecretSealed: text('previous_secret_sealed'),
    previousSecretExpiresAt: ts('previous_secret_expires_at'),
    olderSecretsSealed: text('older_secrets_sealed'),
    events: jsonb('events').$type<string[]>().notNull(),
    headersSealed: text('headers_sealed'),
    status: varchar('status', { length: 20 }).$type<StoredWebhookStatus>().notNull().default('active'),
    retryPolicy: jsonb('retry_policy').$type<Partial<RetryPolicy>>(),
    successCount: integer('success_count').notNull().default(0),
    failureCount: integer('failure_count').notNull().default(0),
    lastDeliveryAt: ts('last_delivery_at'),
    lastSuccessAt: ts('last_success_at'),
    failingSince: ts('failing_since'),
    deadLetterStreak: integer('dead_letter_streak').notNull().default(0),
    /** At most this many attempts start per clock second, across every worker (throttle.ts); null: no limit. */
    rateLimitPerSecond: integer('rate_limit_per_second'),
    /** A receiver's 429 with Retry-After holds the deliveries until then (throttle.ts). */
    holdUntil: ts('hold_until'),
    /** 429s in a row not counted as failed attempts (throttle.ts `MAX_RATE_LIMITED_STREAK`). */
    rateLimitedStreak: integer('rate_limited_streak').notNull().default(0),
    createdBy: uuid('created_by'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index('webhooks_org_idx').on(t.orgId, t.status),
    index('webhooks_partner_idx').on(t.partnerId, t.status).where(sql`${t.partnerId} is not null`),
    check('webhooks_one_owner', sql`(${t.orgId} is null) <> (${t.partnerId} is null)`),
  ],
);

/** The permits of a throttled webhook's current clock second (throttle.ts; Redis keeps them instead when the deployment has it). */
export const webhookRateWindows = pgTable('webhook_rate_windows', {
  webhookId: uuid('webhook_id')
    .primaryKey()
    .references(() => webhooks.id, { onDelete: 'cascade' }),
  windowSecond: bigint('window_second', { mode: 'number' }).notNull(),
  used: integer('used').notNull(),
  /** What the last take got (the take statement answers it). */
  granted: integer('granted').notNull(),
});

export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'retrying';

/**
 * An event's request body, stored once and referenced by each of its deliveries (one per webhook, and
 * their manual retries). `body` is exactly what is sent and signed (`json`, not `jsonb`: the text is
 * kept byte for byte). Written in the routing statement with its deliveries; deleted by the retention
 * sweep once no delivery refers to it (runtime.ts).
 */
export const webhookPayloads = pgTable(
  'webhook_payloads',
  {
    id: uuid('id').primaryKey(),
    /** The event's organisation; null for a partner webhook's test and operational events. */
    orgId: uuid('org_id'),
    body: json('body').notNull(),
    /** The event's type; null for a test delivery's body. Events are what a replay re-sends (replay.ts). */
    eventType: varchar('event_type', { length: 100 }),
    createdAt: createdAt(),
  },
  (t) => [
    index('webhook_payloads_created_idx').on(t.createdAt),
    index('webhook_payloads_org_created_idx').on(t.orgId, t.createdAt).where(sql`${t.eventType} is not null`),
  ],
);

/**
 * Events accepted by `POST /events` and not yet routed (routing.ts, inbox.ts): the publisher's 202 waits
 * for this row only; a router takes rows oldest first (the id is a UUIDv7) and, in one statement,
 * deletes them and writes their payloads (under the same id) and deliveries.
 */
export const webhookInbox = pgTable('webhook_inbox', {
  id: uuid('id').primaryKey(),
  orgId: uuid('org_id').notNull(),
  eventType: varchar('event_type', { length: 100 }).notNull(),
  eventId: varchar('event_id', { length: 100 }).notNull(),
  body: json('body').notNull(),
  traceparent: text('traceparent'),
  createdAt: ts('created_at').notNull(),
});

/**
 * One event for one webhook (docs/specification.md "Webhooks: deliveries"), and the queue itself (docs/architecture.md "Processes and where state lives"): a
 * row is due when `status` is pending/retrying and `next_retry_at` has passed; a worker claims it by
 * setting `claim_id` and `lease_expires_at` (FOR UPDATE SKIP LOCKED), and records the attempt's result
 * only while its claim id is still the row's (fencing). `payload_id` names the request body, stored
 * once per event in `webhook_payloads`.
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: idColumn(),
    webhookId: uuid('webhook_id')
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    orgId: uuid('org_id'),
    eventType: varchar('event_type', { length: 100 }).notNull(),
    eventId: varchar('event_id', { length: 100 }).notNull(),
    payloadId: uuid('payload_id').notNull(),
    status: varchar('status', { length: 20 }).$type<DeliveryStatus>().notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextRetryAt: ts('next_retry_at'),
    responseStatus: integer('response_status'),
    responseBody: text('response_body'),
    responseTimeMs: integer('response_time_ms'),
    errorMessage: text('error_message'),
    /** The failed delivery this one retries (a manual retry): at most one retry per failed delivery. */
    retryOf: uuid('retry_of'),
    /** The W3C `traceparent` of the request that caused the delivery, while tracing is on (webhooks/tracing.ts). */
    traceparent: text('traceparent'),
    claimId: uuid('claim_id'),
    leaseExpiresAt: ts('lease_expires_at'),
    createdAt: createdAt(),
    deliveredAt: ts('delivered_at'),
  },
  (t) => [
    index('webhook_deliveries_webhook_idx').on(t.webhookId, t.createdAt),
    // The retention sweep's "does a delivery still refer to this payload?".
    index('webhook_deliveries_payload_idx').on(t.payloadId),
    uniqueIndex('webhook_deliveries_retry_of_idx').on(t.retryOf).where(sql`${t.retryOf} is not null`),
    // The claim (a webhook's oldest due rows) and the discovery of webhooks with due rows.
    index('webhook_deliveries_webhook_due_idx')
      .on(t.webhookId, t.nextRetryAt)
      .where(sql`${t.status} in ('pending', 'retrying')`),
  ],
);

export type ReplayStatus = 'running' | 'complete' | 'failed' | 'cancelled';

/**
 * A replay of one webhook's events in a window (replay.ts): at most one `running` per webhook (the
 * partial unique index), advanced in batches by the `webhooks.replay` job from the keyset
 * (`cursor_at`, `cursor_id`) of the last payload it sent.
 */
export const webhookReplays = pgTable(
  'webhook_replays',
  {
    id: idColumn(),
    webhookId: uuid('webhook_id')
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    since: ts('since').notNull(),
    until: ts('until').notNull(),
    eventTypes: jsonb('event_types').$type<string[]>(),
    status: varchar('status', { length: 20 }).$type<ReplayStatus>().notNull().default('running'),
    total: integer('total').notNull(),
    sent: integer('sent').notNull().default(0),
    cursorAt: ts('cursor_at'),
    cursorId: uuid('cursor_id'),
    error: text('error'),
    createdBy: uuid('created_by'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    finishedAt: ts('finished_at'),
  },
  (t) => [
    uniqueIndex('webhook_replays_running_idx').on(t.webhookId).where(sql`${t.status} = 'running'`),
    index('webhook_replays_webhook_idx').on(t.webhookId, t.createdAt),
  ],
);
