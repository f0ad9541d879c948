import { and, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/client.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import { loggableError } from '../../platform/safe-error.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { AccessContext } from '../access/scope.js';
import { apiStatus } from './model.js';
import { webhookReplays, webhooks, type ReplayStatus } from './schema.js';
import { visibleWebhook, webhooksRuntime } from './service.js';
import { webhooksError } from './errors.js';

/**
 * Replay (docs/decisions.md "Webhook replay and partner-wide webhooks"): one webhook gets again every
 * event of its scope (its organisation, or every organisation of its partner) in a window, of the
 * types it subscribes to (narrowed by `eventTypes`), as new pending deliveries carrying the events'
 * own ids (`webhook-id`: the receiver drops what it already has), oldest first. The events are the
 * stored payloads (`webhook_payloads`, kept `WEBHOOK_EVENT_RETENTION_DAYS`, retention.ts); a test
 * delivery's body is none. The request checks and counts; the `webhooks.replay` job queues them in
 * batches, from a keyset cursor, one batch per transaction under the replay row's lock.
 */

/** Payloads one batch queues. */
export const REPLAY_BATCH = 500;
/** How often a worker looks for running replays. */
export const REPLAY_TICK_MS = 1_000;
/** Batches one replay gets per tick before the others get theirs. */
const BATCHES_PER_TICK = 20;

export interface ReplayView {
  id: string;
  webhookId: string;
  status: ReplayStatus;
  since: string;
  until: string;
  eventTypes: string[] | null;
  total: number;
  sent: number;
  error: string | null;
  createdAt: string;
  finishedAt: string | null;
}

type ReplayRow = typeof webhookReplays.$inferSelect;

function replayView(r: ReplayRow): ReplayView {
  return {
    id: r.id,
    webhookId: r.webhookId,
    status: r.status,
    since: r.since.toISOString(),
    until: r.until.toISOString(),
    eventTypes: r.eventTypes,
    total: r.total,
    sent: r.sent,
    error: r.error,
    createdAt: r.createdAt.toISOString(),
    finishedAt: r.finishedAt ? r.finishedAt.toISOString() : null,
  };
}

// The webhook's events in the window after the cursor, oldest first: its organisation's ($1), or
// every organisation of its partner ($2), through the payloads' (org_id, created_at) index.
const SCOPE = `p.org_id in (select $1::uuid where $1::uuid is not null union all select o.id from organizations o where $2::uuid is not null and o.partner_id = $2::uuid)
  and p.event_type is not null and p.event_type = any($3::text[])
  and p.created_at >= $4::timestamptz and p.created_at < $5::timestamptz`;

const countStatement = prepared(
  'webhook_replay_count',
  `select count(*)::int as n from (select 1 from webhook_payloads p where ${SCOPE} limit $6) x`,
);

const batchStatement = prepared(
  'webhook_replay_batch',
  `select p.id, p.created_at from webhook_payloads p
    where ${SCOPE} and ($6::timestamptz is null or (p.created_at, p.id) > ($6::timestamptz, $7::uuid))
    order by p.created_at, p.id limit $8`,
);

// New deliveries in the payloads' order: the claim takes a webhook's rows by `next_retry_at`, here a
// microsecond apart and ending at now (due at once).
const queueStatement = prepared(
  'webhook_replay_queue',
  `insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at)
   select u.id, $3::uuid, p.org_id, p.event_type, p.body->>'id', p.id, 'pending', 0,
          $4::timestamptz - (cardinality($1::uuid[]) - u.n) * interval '1 microsecond', $4::timestamptz - (cardinality($1::uuid[]) - u.n) * interval '1 microsecond'
     from unnest($1::uuid[], $2::uuid[]) with ordinality as u(id, payload_id, n)
     join webhook_payloads p on p.id = u.payload_id`,
);

const DAY_MS = 24 * 60 * 60 * 1000;

export interface ReplayInput {
  since: string;
  until?: string | undefined;
  eventTypes?: string[] | undefined;
}

/**
 * Starts a replay: 409 `webhook_not_active` unless the webhook is active, 400 for a window that is
 * empty, reaches back beyond the event retention or names types the webhook does not subscribe to,
 * 400 `replay_too_large` beyond WEBHOOK_REPLAY_MAX_EVENTS events, 409 `replay_running` while another
 * replay of the webhook runs (the webhook's row lock orders two requests; the partial unique index
 * is the last word).
 */
export async function startReplay(keel: Keel, access: AccessContext, webhookId: string, input: ReplayInput, info: AuditRequestInfo): Promise<ReplayView> {
  const hook = await visibleWebhook(keel.db, access, webhookId);
  if (hook.status !== 'active') {
    throw webhooksError('webhook_not_active', { message: `Only an active webhook can be replayed to; this one is ${apiStatus(hook.status)}` });
  }
  const now = clock.nowMs();
  const since = Date.parse(input.since);
  const until = Math.min(input.until === undefined ? now : Date.parse(input.until), now);
  const retentionDays = keel.config.WEBHOOK_EVENT_RETENTION_DAYS;
  if (since < now - retentionDays * DAY_MS) {
    throw validationError([{ path: 'since', message: `must be within the last ${retentionDays} days (events are kept that long)` }]);
  }
  if (!(until > since)) throw validationError([{ path: 'until', message: 'must be after since (and since before now)' }]);
  const unsubscribed = (input.eventTypes ?? []).filter((t) => !hook.events.includes(t));
  if (unsubscribed.length > 0) throw validationError([{ path: 'eventTypes', message: `the webhook does not subscribe to ${unsubscribed.join(', ')}` }]);
  const types = input.eventTypes ? [...new Set(input.eventTypes)] : hook.events;
  const cap = keel.config.WEBHOOK_REPLAY_MAX_EVENTS;
  const sinceIso = new Date(since).toISOString();
  const untilIso = new Date(until).toISOString();
  const [counted] = await rawQuery<{ n: number }>(keel.db, countStatement, [hook.orgId, hook.partnerId, types, sinceIso, untilIso, cap + 1]);
  const total = counted?.n ?? 0;
  if (total > cap) {
    throw webhooksError('replay_too_large', { message: `A replay sends at most ${cap} events; this window holds more: replay a shorter window or fewer types`, details: { limit: cap } });
  }
  const id = newId();
  const row = await transaction(keel.db, async (tx) => {
    await tx.db.select({ id: webhooks.id }).from(webhooks).where(eq(webhooks.id, webhookId)).for('update');
    const [running] = await tx.db
      .select({ id: webhookReplays.id })
      .from(webhookReplays)
      .where(and(eq(webhookReplays.webhookId, webhookId), eq(webhookReplays.status, 'running')));
    if (running) throw webhooksError('replay_running', { details: { replayId: running.id } });
    const [created] = await tx.db
      .insert(webhookReplays)
      .values({
        id,
        webhookId,
        since: new Date(since),
        until: new Date(until),
        eventTypes: input.eventTypes ? types : null,
        status: total === 0 ? 'complete' : 'running',
        total,
        createdBy: access.principal.userId,
        createdAt: clock.now(),
        updatedAt: clock.now(),
        finishedAt: total === 0 ? clock.now() : null,
      })
      .returning();
    if (!created) throw new Error('replay insert returned nothing');
    await writeAudit(tx.db, info, {
      action: 'webhook.replay',
      partnerId: hook.partnerId ?? access.partnerId,
      orgId: hook.orgId,
      target: { type: 'webhook', id: webhookId },
      details: { replayId: id, since: sinceIso, until: untilIso, eventTypes: input.eventTypes ? types : null, total },
    });
    return created;
  }).catch((err: unknown) => {
    // The partial unique index decided between two starts the row lock did not order.
    if (uniqueViolation(err)) throw webhooksError('replay_running');
    throw err;
  });
  return replayView(row);
}

const uniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: string; cause?: { code?: string } } | null;
  return (e?.code ?? e?.cause?.code) === '23505';
};

export async function readReplay(keel: Keel, access: AccessContext, webhookId: string, replayId: string): Promise<ReplayView> {
  await visibleWebhook(keel.db, access, webhookId);
  const [row] = await keel.db
    .select()
    .from(webhookReplays)
    .where(and(eq(webhookReplays.id, replayId), eq(webhookReplays.webhookId, webhookId)));
  if (!row) throw notFound('Replay');
  return replayView(row);
}

type Step = 'more' | 'done' | 'busy';

/** One batch of one replay, in its own transaction under the replay row's lock (another worker skips it). */
async function step(keel: Keel, replayId: string): Promise<Step> {
  return transaction(keel.db, async (tx) => {
    const [r] = await rawQuery<{ webhook_id: string; since: unknown; until: unknown; event_types: unknown; cursor_at: unknown; cursor_id: string | null }>(
      tx.db,
      `select webhook_id, since, until, event_types, cursor_at, cursor_id from webhook_replays where id = $1 and status = 'running' for update skip locked`,
      [replayId],
    );
    if (!r) return 'busy';
    const [hook] = await tx.db.select().from(webhooks).where(eq(webhooks.id, r.webhook_id));
    const now = clock.now();
    const finish = async (status: ReplayStatus, error: string | null = null) => {
      await tx.db.update(webhookReplays).set({ status, error, updatedAt: now, finishedAt: now }).where(eq(webhookReplays.id, replayId));
      return 'done' as const;
    };
    if (!hook) return finish('cancelled', 'The webhook is gone');
    if (hook.status === 'error') return finish('cancelled', 'Keel set the webhook to failed: set it active and replay again');
    const chosen = r.event_types == null ? null : ((typeof r.event_types === 'string' ? JSON.parse(r.event_types) : r.event_types) as string[]);
    // Types the webhook no longer subscribes to are not sent.
    const types = chosen ? chosen.filter((t) => hook.events.includes(t)) : hook.events;
    const iso = (v: unknown) => (v == null ? null : new Date(v as string).toISOString());
    const batch = await rawQuery<{ id: string; created_at: unknown }>(tx.db, batchStatement, [
      hook.orgId, hook.partnerId, types, iso(r.since), iso(r.until), iso(r.cursor_at), r.cursor_id, REPLAY_BATCH,
    ]);
    const last = batch[batch.length - 1];
    if (!last) return finish('complete');
    const ids = batch.map(() => newId());
    await rawQuery(tx.db, queueStatement, [ids, batch.map((p) => p.id), hook.id, now.toISOString()]);
    const done = batch.length < REPLAY_BATCH;
    await rawQuery(
      tx.db,
      `update webhook_replays set sent = sent + $2, cursor_at = $3::timestamptz, cursor_id = $4::uuid, updated_at = $5::timestamptz,
              status = case when $6::boolean then 'complete' else status end, finished_at = case when $6::boolean then $5::timestamptz else finished_at end
        where id = $1`,
      [replayId, batch.length, iso(last.created_at), last.id, now.toISOString(), done],
    );
    tx.afterCommit(() => webhooksRuntime(keel).announce(ids, [hook.id]));
    return done ? 'done' : 'more';
  });
}

/**
 * The `webhooks.replay` job's tick (and tests'): every running replay gets up to BATCHES_PER_TICK
 * batches. A replay whose batch fails is `failed` (its deliveries queued so far stay).
 */
export async function advanceReplays(keel: Keel, db: Db = keel.db): Promise<number> {
  const running = await db.select({ id: webhookReplays.id }).from(webhookReplays).where(eq(webhookReplays.status, 'running')).limit(100);
  let batches = 0;
  for (const { id } of running) {
    for (let i = 0; i < BATCHES_PER_TICK; i++) {
      let result: Step;
      try {
        result = await step(keel, id);
      } catch (err) {
        keel.log.error({ error: loggableError(err), replayId: id }, 'webhooks: a replay batch failed; the replay is marked failed');
        await db
          .update(webhookReplays)
          .set({ status: 'failed', error: 'The replay stopped on an internal error; start another for the rest of the window', updatedAt: clock.now(), finishedAt: clock.now() })
          .where(and(eq(webhookReplays.id, id), eq(webhookReplays.status, 'running')));
        break;
      }
      if (result === 'busy') break;
      batches++;
      if (result === 'done') break;
    }
  }
  return batches;
}
