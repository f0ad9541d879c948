import { newId } from '../../platform/db/columns.js';
import type { Db } from '../../platform/db/client.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { transactionIf, type Tx } from '../../platform/db/transaction.js';
import { writeAudit } from '../audit/service.js';
import { attemptFields, type ClaimedDelivery, type WebhookAttemptColumns } from './model.js';
import { AUTO_FAIL_MIN_DEAD, AUTO_FAIL_WINDOW_MS } from './retry.js';

/**
 * The queue: `webhook_deliveries` rows are it (docs/architecture.md "The delivery engine"). A row is
 * due when `pending`/`retrying` and `next_retry_at` has passed; a worker holds it by stamping its
 * claim id and a lease; a result is written only where the row still carries the attempt's claim id
 * (fencing: the late result of an expired lease is dropped). Every statement of the engine is here.
 */

/** The lease of a claimed row: it may wait for attempts of its webhook before its own, and starts only with a whole deadline left, so two deadlines and a margin. */
export const leaseMsFor = (timeoutMs: number): number => timeoutMs * 2 + 10_000;

/** A row held by a claim id: what a release or a fenced write names. */
export interface HeldRow {
  id: string;
  claimId: string;
}

/** One attempt's result, as the record statement takes it. */
export interface AttemptResult extends HeldRow {
  webhookId: string;
  status: 'delivered' | 'retrying' | 'failed';
  /** Times as epoch milliseconds: the record statement takes them as float8[] (see there). */
  nextRetryAt: number | null;
  responseStatus: number | null;
  responseBody: string | null;
  responseTimeMs: number;
  errorMessage: string | null;
  deliveredAt: number | null;
  attemptedAt: number;
}

/**
 * The claim, per webhook: for each webhook named ($3) up to its room ($4) of its oldest due rows, each
 * locked with SKIP LOCKED (concurrent claims never block on, or take, the same row), stamped with the
 * claim id and the lease. Only rows of `active` webhooks are taken (others are held), and none of a
 * webhook a receiver's 429 holds (throttle.ts). The index on
 * (webhook_id, next_retry_at) makes the cost proportional to the rows taken, whatever the backlog.
 */
const claimStatement = prepared(
  'webhook_deliveries_claim',
  `with want as (
     select * from unnest($3::uuid[], $4::int[]) as w(webhook_id, room)
   ), picked as (
     select x.id
       from want cross join lateral (
         select d.id from webhook_deliveries d
          where d.webhook_id = want.webhook_id and d.status in ('pending', 'retrying') and d.next_retry_at <= $1::timestamptz
            and (d.lease_expires_at is null or d.lease_expires_at <= $1::timestamptz)
          order by d.next_retry_at
          limit want.room
          for update of d skip locked
       ) x
   )
   update webhook_deliveries d set claim_id = $2::uuid, lease_expires_at = $5::timestamptz
     from picked, webhooks w, webhook_payloads p
    where d.id = picked.id and w.id = d.webhook_id and w.status = 'active' and (w.hold_until is null or w.hold_until <= $1::timestamptz) and p.id = d.payload_id
   returning d.id, d.webhook_id, d.org_id, d.event_type, d.event_id, p.body::text as body, d.attempts, d.traceparent,
             w.url_sealed, w.secret_sealed, w.previous_secret_sealed, w.previous_secret_expires_at, w.older_secrets_sealed, w.headers_sealed, w.retry_policy,
             w.rate_limit_per_second, w.hold_until`,
  // A generic plan of this one scanned the whole table (platform/db/raw.ts `customPlan`).
  { customPlan: true },
);

/** Which active webhooks have due rows (at start, the safety sweep, a re-activation, a retry falling due). */
const discoverStatement = prepared(
  'webhook_deliveries_discover',
  `select distinct d.webhook_id from webhook_deliveries d
    where d.status in ('pending', 'retrying') and d.next_retry_at <= $1::timestamptz
      and (d.lease_expires_at is null or d.lease_expires_at <= $1::timestamptz)
      and exists (select 1 from webhooks w where w.id = d.webhook_id and w.status = 'active' and (w.hold_until is null or w.hold_until <= $1::timestamptz))
    limit 10000`,
);

/** The webhooks of deliveries named by a hint from another process (Redis). */
const hintedWebhooksStatement = prepared('webhook_deliveries_hinted', 'select distinct webhook_id from webhook_deliveries where id = any($1::uuid[])');

const releaseStatement = prepared(
  'webhook_deliveries_release',
  `update webhook_deliveries d set claim_id = null, lease_expires_at = null
     from unnest($1::uuid[], $2::uuid[]) as r(id, claim_id)
    where d.id = r.id and d.claim_id = r.claim_id`,
);

/**
 * Times travel as epoch milliseconds (float8[]), not timestamptz text: parsing three ISO strings per
 * row was half of this statement's cost on PGlite. The same statement updates the webhooks' counters,
 * the dead-letter streak and the automatic move to `error` (retry.ts `webhookAfter`, in SQL).
 */
const recordStatement = prepared(
  'webhook_deliveries_record',
  `with r as (
     select id, claim_id, status, to_timestamp(next_ms / 1000.0) as next_retry_at, response_status, response_body, response_time_ms,
            error_message, to_timestamp(delivered_ms / 1000.0) as delivered_at, to_timestamp(attempted_ms / 1000.0) as attempted_at
       from unnest($1::uuid[], $2::uuid[], $3::text[], $4::float8[], $5::int[], $6::text[], $7::int[], $8::text[], $9::float8[], $10::float8[])
         as u(id, claim_id, status, next_ms, response_status, response_body, response_time_ms, error_message, delivered_ms, attempted_ms)
   ), upd as (
     update webhook_deliveries d
        set status = r.status, attempts = d.attempts + 1, next_retry_at = r.next_retry_at,
            response_status = r.response_status, response_body = r.response_body, response_time_ms = r.response_time_ms,
            error_message = r.error_message, delivered_at = coalesce(r.delivered_at, d.delivered_at),
            claim_id = null, lease_expires_at = null
       from r
      where d.id = r.id and d.claim_id = r.claim_id
     returning d.id, d.webhook_id, r.status, r.attempted_at
   ), agg as (
     select webhook_id,
            count(*) filter (where status = 'delivered')::int as ok,
            count(*) filter (where status <> 'delivered')::int as bad,
            count(*) filter (where status = 'failed')::int as dead,
            max(attempted_at) as last,
            max(attempted_at) filter (where status = 'delivered') as last_ok
       from upd group by webhook_id
   ), decide as (
     select w.id, agg.ok, agg.bad, agg.dead, agg.last, agg.last_ok,
            case when agg.ok > 0 then 0 else w.dead_letter_streak + agg.dead end as streak,
            case when agg.ok > 0 then null when agg.dead > 0 then coalesce(w.failing_since, $11::timestamptz) else w.failing_since end as failing_since,
            (w.status = 'active' and agg.ok = 0 and agg.dead > 0 and w.dead_letter_streak + agg.dead >= $12
               and coalesce(w.failing_since, $11::timestamptz) <= $11::timestamptz - ($13 || ' milliseconds')::interval) as auto_fail
       from webhooks w join agg on agg.webhook_id = w.id
   ), hooks as (
     update webhooks w
        set success_count = w.success_count + decide.ok, failure_count = w.failure_count + decide.bad,
            last_delivery_at = greatest(w.last_delivery_at, decide.last), last_success_at = greatest(w.last_success_at, decide.last_ok),
            dead_letter_streak = decide.streak, failing_since = decide.failing_since, rate_limited_streak = 0,
            status = case when decide.auto_fail then 'error' else w.status end
       from decide where w.id = decide.id
     returning w.id, w.org_id, w.partner_id, w.name, decide.auto_fail, decide.streak, decide.failing_since
   )
   select (select count(*)::int from upd) as recorded,
          (select coalesce(json_agg(id), '[]'::json) from upd where status = 'failed') as dead,
          (select coalesce(json_agg(json_build_object('id', id, 'orgId', org_id, 'partnerId', partner_id, 'name', name, 'streak', streak, 'since', failing_since)), '[]'::json) from hooks where auto_fail) as auto_failed`,
);

const releaseAllStatement = prepared('webhook_deliveries_release_all', 'update webhook_deliveries set claim_id = null, lease_expires_at = null where claim_id is not null');

const parseJson = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : v);

/** Drops every lease (the embedded database at start: the data-directory lock makes this the only worker). */
export async function releaseAll(db: Db): Promise<void> {
  await rawQuery(db, releaseAllStatement, []);
}

/** The active webhooks with due rows at `nowIso`. */
export async function discoverDue(db: Db, nowIso: string): Promise<string[]> {
  const rows = await rawQuery<{ webhook_id: string }>(db, discoverStatement, [nowIso]);
  return rows.map((r) => r.webhook_id);
}

/** The webhooks of these deliveries. */
export async function webhooksOfDeliveries(db: Db, deliveryIds: string[]): Promise<string[]> {
  const rows = await rawQuery<{ webhook_id: string }>(db, hintedWebhooksStatement, [deliveryIds]);
  return rows.map((r) => r.webhook_id);
}

/** Claims up to `room` due rows of each webhook named, under one new claim id and a lease to `leaseUntil`. */
export async function claimDue(db: Db, want: readonly { id: string; room: number }[], nowMs: number, leaseUntil: number): Promise<ClaimedDelivery[]> {
  const claimId = newId();
  const rows = await rawQuery(db, claimStatement, [new Date(nowMs).toISOString(), claimId, want.map((w) => w.id), want.map((w) => w.room), new Date(leaseUntil).toISOString()]);
  return rows.map((r) => ({
    id: r.id as string,
    webhookId: r.webhook_id as string,
    orgId: r.org_id as string,
    eventType: r.event_type as string,
    eventId: r.event_id as string,
    body: r.body as string,
    attempts: Number(r.attempts),
    traceparent: r.traceparent as string | null,
    ...attemptFields(r as unknown as WebhookAttemptColumns),
    claimId,
    leaseUntil,
  }));
}

/** Gives held rows back to the queue as they were (only where the claim id still matches). */
export async function releaseHeld(db: Db, rows: readonly HeldRow[]): Promise<void> {
  await rawQuery(db, releaseStatement, [rows.map((r) => r.id), rows.map((r) => r.claimId)]);
}

export interface AutoFailed {
  id: string;
  /** Null for a partner-wide webhook (then `partnerId` names its partner). */
  orgId: string | null;
  partnerId: string | null;
  name: string;
  streak: number;
  since: string;
}

/**
 * Records a batch of results (fenced by claim id). The statement and the audit entries of the
 * webhooks it moved to `failed` commit together (a reader never sees the status without its audit
 * entry, and a crash cannot keep one without the other). Only a batch with a dead letter can move a
 * webhook, so only such a batch opens a transaction: the others stay one statement. Answers how many
 * were recorded (the rest were fenced out), the dead-lettered ids and the webhooks moved.
 */
export async function recordResults(
  db: Db,
  batch: readonly AttemptResult[],
  nowIso: string,
  /** Runs in the statement's transaction for the webhooks it moved to `failed` (the operational event). */
  onAutoFailed?: (tx: Tx, moved: AutoFailed[]) => Promise<void>,
): Promise<{ recorded: number; dead: string[]; autoFailed: AutoFailed[] }> {
  const mayMove = batch.some((r) => r.status === 'failed');
  return transactionIf(mayMove, db, async (tx) => {
    const [row] = await rawQuery<{ recorded: number; dead: unknown; auto_failed: unknown }>(tx.db, recordStatement, [
      batch.map((r) => r.id),
      batch.map((r) => r.claimId),
      batch.map((r) => r.status),
      batch.map((r) => r.nextRetryAt),
      batch.map((r) => r.responseStatus),
      batch.map((r) => r.responseBody),
      batch.map((r) => r.responseTimeMs),
      batch.map((r) => r.errorMessage),
      batch.map((r) => r.deliveredAt),
      batch.map((r) => r.attemptedAt),
      nowIso,
      AUTO_FAIL_MIN_DEAD,
      String(AUTO_FAIL_WINDOW_MS),
    ]);
    const moved = parseJson(row?.auto_failed ?? '[]') as AutoFailed[];
    for (const hook of moved) {
      await writeAudit(tx.db, { actor: { type: 'system' } }, {
        action: 'webhook.status.auto_failed',
        orgId: hook.orgId,
        partnerId: hook.partnerId,
        target: { type: 'webhook', id: hook.id },
        details: { deadLettered: hook.streak, failingSince: hook.since, status: 'failed' },
      });
    }
    if (moved.length > 0) await onAutoFailed?.(tx, moved);
    return { recorded: row?.recorded ?? 0, dead: parseJson(row?.dead ?? '[]') as string[], autoFailed: moved };
  });
}
