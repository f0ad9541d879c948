import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { transactionIf } from '../../platform/db/transaction.js';
import { OutboundError, UNSAFE_TARGET_CODES, outboundRequest } from '../../platform/outbound.js';
import { loggableError } from '../../platform/safe-error.js';
import { writeAudit } from '../audit/service.js';
import { aad, attemptFields, effectivePolicy, retryDelayMs, type ClaimedDelivery, type PreviousSecret, type RouteTicket, type WebhookAttemptColumns } from './model.js';
import { deliveryHeaders } from './signing.js';

/**
 * The delivery engine: PostgreSQL rows are the queue (ARCHITECTURE "Where state lives").
 *
 * - **Claim.** One statement takes up to N due rows (`pending`/`retrying`, `next_retry_at` passed, no
 *   live lease, webhook `active`) with `FOR UPDATE SKIP LOCKED` and stamps them with a fresh claim id
 *   and a lease. Two workers never take the same row; a row whose worker died is taken again once its
 *   lease has run out.
 * - **Attempt.** Outside any transaction (PGlite has one session): the URL is vetted again and only
 *   vetted addresses are dialled (platform/outbound.ts); one overall deadline (WEBHOOK_TIMEOUT_MS,
 *   30 s); at most RESPONSE_READ_BYTES of the answer are read; redirects are failures.
 * - **Record.** Results are written in batches, one statement for many attempts, and only where the
 *   row still carries the attempt's claim id (fencing: the late result of an expired lease is
 *   dropped). The same statement updates the webhooks' counters, the dead-letter streak and the
 *   automatic move to `error`.
 * - **Concurrency.** At most WEBHOOK_CONCURRENCY attempts in flight per process, and at most
 *   WEBHOOK_CONCURRENCY_PER_WEBHOOK per webhook (2 while the webhook's last attempt failed), so one
 *   slow or dead receiver never holds the slots other webhooks need.
 * - **Wake-ups.** `wake()` (new deliveries here, a Redis hint, a NOTIFY), a timer to the next retry
 *   this process scheduled, and a slow safety sweep (SWEEP_MS) for anything else. No busy polling.
 */

export const RESPONSE_BODY_CHARS = 1_000;
/** The most of an answer ever read: 1,000 characters of UTF-8 fit in 4,000 bytes. */
export const RESPONSE_READ_BYTES = 4_096;
/** The safety sweep: how long a due row can wait when every wake-up was lost. */
export const SWEEP_MS = 5_000;
/** Rows a webhook may hold in this process, in multiples of its slots (in flight + queued); claimed again at half. */
const WINDOW = 4;
/**
 * Rows routed straight to this process (`ticket`), per webhook, in multiples of its slots. On
 * PostgreSQL a few times the claim's window (4), so other workers still share a backlog; on the
 * embedded database this process is the only worker (the data-directory lock), so it takes a burst
 * in hand. A queued row whose lease runs short is released and found again by a claim (at the
 * latest by the 5-second sweep).
 */
const ROUTE_WINDOW = { postgres: 16, pglite: 256 } as const;
/** Bodies of queued rows this process holds at most before new rows are left to a claim (memory). */
const ROUTE_MAX_QUEUED_BYTES = 64 * 1024 * 1024;
/** A failing webhook gets this many attempts at a time until one succeeds. */
const FAILING_WEBHOOK_SLOTS = 2;
const FLUSH_BATCH = 1_000;
/** How long a finished attempt's result may wait to be written with others. */
const FLUSH_DELAY_MS = 100;
/** DECISIONS "Webhooks": at least this many dead-lettered deliveries, and every one of 24 hours. */
export const AUTO_FAIL_MIN_DEAD = 10;
export const AUTO_FAIL_WINDOW_MS = 24 * 60 * 60 * 1000;
/** Redis lists (SPEC 6.1): wake-up hints and the dead-letter list, delivery ids only; capped. */
export const DELIVERY_LIST = 'service:webhooks:delivery';
export const DLQ_LIST = 'service:webhooks:dlq';
export const LIST_CAP = 10_000;

/** The counter of attempt results (README "Operating"). */
export const DELIVERY_ATTEMPTS_METRIC = 'keel_webhook_delivery_attempts_total';

export interface EngineOptions {
  concurrency: number;
  perWebhook: number;
  timeoutMs: number;
}

interface Result {
  id: string;
  claimId: string;
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
 * claim id and the lease. Only rows of `active` webhooks are taken (others are held). The index on
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
    where d.id = picked.id and w.id = d.webhook_id and w.status = 'active' and p.id = d.payload_id
   returning d.id, d.webhook_id, d.org_id, d.event_type, d.event_id, p.body::text as body, d.attempts,
             w.url_sealed, w.secret_sealed, w.previous_secret_sealed, w.previous_secret_expires_at, w.older_secrets_sealed, w.headers_sealed, w.retry_policy`,
  // A generic plan of this one scanned the whole table (platform/db/raw.ts `customPlan`).
  { customPlan: true },
);

/** Which active webhooks have due rows (at start, the safety sweep, a re-activation, a retry falling due). */
const discoverStatement = prepared(
  'webhook_deliveries_discover',
  `select distinct d.webhook_id from webhook_deliveries d
    where d.status in ('pending', 'retrying') and d.next_retry_at <= $1::timestamptz
      and (d.lease_expires_at is null or d.lease_expires_at <= $1::timestamptz)
      and exists (select 1 from webhooks w where w.id = d.webhook_id and w.status = 'active')
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
 * row was half of this statement's cost on PGlite.
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
            dead_letter_streak = decide.streak, failing_since = decide.failing_since,
            status = case when decide.auto_fail then 'error' else w.status end
       from decide where w.id = decide.id
     returning w.id, w.org_id, decide.auto_fail, decide.streak, decide.failing_since
   )
   select (select count(*)::int from upd) as recorded,
          (select coalesce(json_agg(id), '[]'::json) from upd where status = 'failed') as dead,
          (select coalesce(json_agg(json_build_object('id', id, 'orgId', org_id, 'streak', streak, 'since', failing_since)), '[]'::json) from hooks where auto_fail) as auto_failed`,
);

const releaseAllStatement = prepared('webhook_deliveries_release_all', 'update webhook_deliveries set claim_id = null, lease_expires_at = null where claim_id is not null');

const parseJson = (v: unknown): unknown => (typeof v === 'string' ? JSON.parse(v) : v);

export class DeliveryEngine {
  readonly #keel: Keel;
  readonly #opts: EngineOptions;
  readonly #leaseMs: number;
  readonly #routeWindow: number;
  #running = false;
  #stopping = false;
  #pumping = false;
  #pumpAgain = false;
  #wakeScheduled = false;
  #inflight = 0;
  readonly #perHook = new Map<string, number>();
  readonly #queued = new Map<string, ClaimedDelivery[]>();
  #queuedCount = 0;
  #queuedBytes = 0;
  /** Webhooks whose last attempt here failed: fewer slots until one succeeds. */
  readonly #failing = new Set<string>();
  readonly #attempts = new Map<string, Promise<void>>();
  /** Cancels every attempt in flight (a stop that is not graceful); one per start. */
  #cancel = cancellation();
  #results: Result[] = [];
  #releases: { id: string; claimId: string }[] = [];
  #flushing: Promise<void> | null = null;
  #flushTimer: NodeJS.Timeout | null = null;
  /** Webhooks that may have due rows: claimed for as they have room; dropped when a claim finds none. */
  readonly #candidates = new Set<string>();
  /** Hinted while a claim for them ran: kept as candidates even if that claim came back short. */
  readonly #rehinted = new Set<string>();
  #claimingFor: Set<string> | null = null;
  /** Run the discovery query at the next pump. */
  #discover = true;
  /** Due times of retries this process scheduled (a timer wakes the engine at the earliest). */
  #dues: number[] = [];
  #sweep: NodeJS.Timeout | null = null;
  #dueTimer: NodeJS.Timeout | null = null;
  readonly #opened = new Map<string, string>();
  readonly #stopHooks: (() => Promise<void> | void)[] = [];
  /** Counters for tests and logs. */
  readonly stats = { routedHere: 0, hintLookups: 0, claimed: 0, attempted: 0, recorded: 0, fencedOut: 0, released: 0, claims: 0, claimMs: 0, records: 0, recordMs: 0 };

  constructor(keel: Keel, opts: EngineOptions) {
    this.#keel = keel;
    this.#opts = opts;
    // A claimed row may wait for attempts of its webhook before its own: it starts only with a whole
    // deadline of lease left (else it is released), so two deadlines and a margin.
    this.#leaseMs = opts.timeoutMs * 2 + 10_000;
    this.#routeWindow = ROUTE_WINDOW[keel.database.kind];
  }

  get running(): boolean {
    return this.#running && !this.#stopping;
  }

  get inflight(): number {
    return this.#inflight;
  }

  /** Starts claiming. On the embedded database (one process by the data-directory lock) leases left by a killed process are released first. */
  async start(): Promise<void> {
    if (this.#running) return;
    if (this.#keel.database.kind === 'pglite') await rawQuery(this.#keel.db, releaseAllStatement, []);
    this.#running = true;
    this.#stopping = false;
    this.#cancel = cancellation();
    this.#discover = true;
    this.#sweep = setInterval(() => this.wake(), SWEEP_MS);
    this.#schedulePump();
  }

  /** Claims what is due now and resolves once that claim has run (tests, after moving the clock). */
  async pumpNow(): Promise<void> {
    this.#discover = true;
    await this.#pump();
    while (this.#pumping) await new Promise((r) => setTimeout(r, 2));
  }

  /** Runs when the engine stops (wake-up listeners close here). */
  onStop(fn: () => Promise<void> | void): void {
    this.#stopHooks.push(fn);
  }

  /**
   * Something may be due: these webhooks have new deliveries (this process routed them), or, without
   * ids (a sweep, a re-activation), anything may be: look for it. Claims soon, coalesced within a tick.
   */
  wake(webhookIds?: Iterable<string>): void {
    if (webhookIds) {
      for (const id of webhookIds) {
        this.#candidates.add(id);
        if (this.#claimingFor?.has(id)) this.#rehinted.add(id);
      }
    } else this.#discover = true;
    this.#schedulePump();
  }

  /** A hint from another process: delivery ids (Redis), looked up to their webhooks. */
  async hinted(deliveryIds: string[]): Promise<void> {
    const ids = deliveryIds.filter((id) => /^[0-9a-f-]{36}$/i.test(id));
    if (ids.length === 0) return this.wake();
    this.stats.hintLookups++;
    try {
      const rows = await rawQuery<{ webhook_id: string }>(this.#keel.db, hintedWebhooksStatement, [ids]);
      this.wake(rows.map((r) => r.webhook_id));
    } catch {
      this.wake();
    }
  }

  /**
   * A claim for deliveries about to be routed in this process, so they need no claim statement: null
   * when the engine is not running here or holds all it may. Webhooks that are failing or hold their
   * window are named in `full`: their new rows wait for a claim (any worker's).
   */
  ticket(): RouteTicket | null {
    if (!this.running) return null;
    if (this.#inflight + this.#queuedCount >= this.#opts.concurrency * this.#routeWindow || this.#queuedBytes >= ROUTE_MAX_QUEUED_BYTES) return null;
    const full: string[] = [...this.#failing];
    for (const id of this.#queued.keys()) if (!this.#failing.has(id) && this.#held(id) >= this.#routeWindow * this.#capFor(id)) full.push(id);
    return { claimId: newId(), leaseUntil: clock.nowMs() + this.#leaseMs, full };
  }

  /** Committed rows that were routed with a ticket of this engine: attempted here, without a claim. */
  accept(rows: ClaimedDelivery[]): void {
    this.stats.routedHere += rows.length;
    for (const row of rows) {
      if (!this.running) {
        this.#releases.push({ id: row.id, claimId: row.claimId });
        this.#scheduleFlush();
      } else this.#dispatch(row, true);
    }
  }

  #schedulePump(): void {
    if (!this.#running || this.#stopping || this.#wakeScheduled) return;
    this.#wakeScheduled = true;
    setImmediate(() => {
      this.#wakeScheduled = false;
      void this.#pump();
    });
  }

  /**
   * Stops claiming. `graceful`: attempts in flight finish (each within its deadline) and are recorded;
   * otherwise they are cancelled and their rows released for another attempt. Rows claimed but not
   * started are released either way. Resolves once everything is written.
   */
  async stop(opts: { graceful: boolean } = { graceful: true }): Promise<void> {
    if (!this.#running || this.#stopping) return;
    this.#stopping = true;
    if (this.#sweep) clearInterval(this.#sweep);
    if (this.#dueTimer) clearTimeout(this.#dueTimer);
    if (this.#flushTimer) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    for (const fn of this.#stopHooks.splice(0)) {
      try {
        await fn();
      } catch {
        // a wake-up channel that fails to close holds nothing
      }
    }
    for (const [hook, list] of this.#queued) {
      for (const c of list) this.#releases.push({ id: c.id, claimId: c.claimId });
      this.#queued.delete(hook);
    }
    this.#queuedCount = 0;
    this.#queuedBytes = 0;
    if (!opts.graceful) this.#cancel.abort();
    await Promise.all(this.#attempts.values());
    while (this.#pumping) await new Promise((r) => setTimeout(r, 5));
    await this.#flush();
    this.#running = false;
  }

  /** Whether a wake-up arrived while claiming (read through a method: it changes across awaits). */
  #again(): boolean {
    return this.#pumpAgain;
  }

  #active(): boolean {
    return this.#running && !this.#stopping;
  }

  #capFor(webhookId: string): number {
    return this.#failing.has(webhookId) ? Math.min(FAILING_WEBHOOK_SLOTS, this.#opts.perWebhook) : this.#opts.perWebhook;
  }

  /** Rows this process holds for a webhook: in flight and queued behind them. */
  #held(webhookId: string): number {
    return (this.#perHook.get(webhookId) ?? 0) + (this.#queued.get(webhookId)?.length ?? 0);
  }

  /**
   * Claims while some candidate webhook has room. A webhook holds at most twice its slots (in flight,
   * and as many queued behind them, started without another claim as attempts finish) and is claimed
   * for again once it has drained to half; the process holds at most twice WEBHOOK_CONCURRENCY. So a
   * busy engine claims in batches, never once per finished attempt, and one webhook's backlog never
   * takes another's room.
   */
  async #pump(): Promise<void> {
    if (this.#pumping) {
      this.#pumpAgain = true;
      return;
    }
    this.#pumping = true;
    try {
      do {
        this.#pumpAgain = false;
        if (this.#discover && this.#active()) {
          this.#discover = false;
          const rows = await rawQuery<{ webhook_id: string }>(this.#keel.db, discoverStatement, [clock.now().toISOString()]);
          for (const r of rows) this.#candidates.add(r.webhook_id);
        }
        while (this.#active()) {
          let free = this.#opts.concurrency * WINDOW - this.#inflight - this.#queuedCount;
          const want: { id: string; room: number }[] = [];
          for (const id of this.#candidates) {
            const cap = this.#capFor(id);
            const held = this.#held(id);
            // Claims start when one webhook drained to half (or on a hint); each tops up every candidate
            // with room for at least a full set of slots, so rows come in few, large claims.
            if (WINDOW * cap - held < cap) continue;
            const room = Math.min(WINDOW * cap - held, free);
            if (room <= 0) break;
            want.push({ id, room });
            free -= room;
            if (want.length >= 200) break;
          }
          if (want.length === 0) break;
          const rows = await this.#claim(want);
          const got = new Map<string, number>();
          for (const row of rows) {
            got.set(row.webhookId, (got.get(row.webhookId) ?? 0) + 1);
            this.#dispatch(row);
          }
          // A webhook that had fewer due rows than its room has none left for now, unless hinted meanwhile.
          for (const w of want) if ((got.get(w.id) ?? 0) < w.room && !this.#rehinted.has(w.id)) this.#candidates.delete(w.id);
          this.#rehinted.clear();
        }
      } while (this.#again() && this.#active());
    } catch (err) {
      this.#keel.log.error({ error: loggableError(err) }, 'webhooks: claiming deliveries failed; trying again shortly');
      setTimeout(() => this.wake(), 1_000).unref();
    } finally {
      this.#pumping = false;
    }
  }

  async #claim(want: { id: string; room: number }[]): Promise<ClaimedDelivery[]> {
    const now = clock.nowMs();
    const claimId = newId();
    const leaseUntil = now + this.#leaseMs;
    this.#claimingFor = new Set(want.map((w) => w.id));
    const t0 = performance.now();
    const rows = await rawQuery(this.#keel.db, claimStatement, [
      new Date(now).toISOString(),
      claimId,
      want.map((w) => w.id),
      want.map((w) => w.room),
      new Date(leaseUntil).toISOString(),
    ]).finally(() => {
      this.#claimingFor = null;
    });
    this.stats.claims++;
    this.stats.claimMs += performance.now() - t0;
    this.stats.claimed += rows.length;
    return rows.map((r) => ({
      id: r.id as string,
      webhookId: r.webhook_id as string,
      orgId: r.org_id as string,
      eventType: r.event_type as string,
      eventId: r.event_id as string,
      body: r.body as string,
      attempts: Number(r.attempts),
      ...attemptFields(r as unknown as WebhookAttemptColumns),
      claimId,
      leaseUntil,
    }));
  }

  /** Starts a held row, or queues it behind its webhook's attempts; `routed`: it came with a ticket (its window is the route window). */
  #dispatch(row: ClaimedDelivery, routed = false): void {
    const cap = this.#capFor(row.webhookId);
    if ((this.#perHook.get(row.webhookId) ?? 0) < cap && this.#inflight < this.#opts.concurrency) return this.#start(row);
    const queue = this.#queued.get(row.webhookId) ?? [];
    if (queue.length >= ((routed ? this.#routeWindow : WINDOW) - 1) * cap) {
      // More than this process should hold for one webhook: back to the queue for anyone.
      this.#releases.push({ id: row.id, claimId: row.claimId });
      this.#scheduleFlush();
      return;
    }
    queue.push(row);
    this.#queued.set(row.webhookId, queue);
    this.#queuedCount++;
    this.#queuedBytes += row.body.length;
  }

  #start(row: ClaimedDelivery): void {
    this.#inflight++;
    this.#perHook.set(row.webhookId, (this.#perHook.get(row.webhookId) ?? 0) + 1);
    const key = `${row.id}:${row.claimId}`;
    const done = this.#attempt(row, this.#cancel.signal)
      .then(
        (result) => {
          if (result) this.#results.push(result);
          else this.#releases.push({ id: row.id, claimId: row.claimId });
        },
        (err: unknown) => {
          this.#keel.log.error({ error: loggableError(err), deliveryId: row.id }, 'webhooks: attempt failed unexpectedly; the row is released');
          this.#releases.push({ id: row.id, claimId: row.claimId });
        },
      )
      .finally(() => {
        this.#attempts.delete(key);
        this.#inflight--;
        const left = (this.#perHook.get(row.webhookId) ?? 1) - 1;
        if (left > 0) this.#perHook.set(row.webhookId, left);
        else this.#perHook.delete(row.webhookId);
        this.#scheduleFlush();
        this.#next(row.webhookId);
      });
    this.#attempts.set(key, done);
  }

  /** Starts queued rows where there are slots (this webhook's first), then claims more if this webhook drained. */
  #next(webhookId: string): void {
    this.#startQueued(webhookId);
    if (this.#inflight < this.#opts.concurrency && this.#queuedCount > 0) for (const hook of this.#queued.keys()) this.#startQueued(hook);
    if (this.#candidates.has(webhookId) && this.#held(webhookId) <= (WINDOW / 2) * this.#capFor(webhookId)) this.#schedulePump();
  }

  #startQueued(webhookId: string): void {
    const queue = this.#queued.get(webhookId);
    while (queue && queue.length > 0 && !this.#stopping && this.#inflight < this.#opts.concurrency && (this.#perHook.get(webhookId) ?? 0) < this.#capFor(webhookId)) {
      const row = queue.shift();
      if (!row) break;
      this.#queuedCount--;
      this.#queuedBytes -= row.body.length;
      // Too little lease left for a whole attempt: let it go rather than race another worker.
      if (row.leaseUntil - clock.nowMs() < this.#opts.timeoutMs + 5_000) {
        this.#releases.push({ id: row.id, claimId: row.claimId });
        this.#scheduleFlush();
      } else this.#start(row);
    }
    if (queue && queue.length === 0) this.#queued.delete(webhookId);
  }

  #open(sealed: string, context: string): string {
    const key = `${context}|${sealed}`;
    let plain = this.#opened.get(key);
    if (plain === undefined) {
      plain = this.#keel.secrets.sealer.open(sealed, context);
      if (this.#opened.size >= 10_000) this.#opened.clear();
      this.#opened.set(key, plain);
    }
    return plain;
  }

  /** One attempt; null when it was cancelled (the row is released, no attempt is counted). */
  async #attempt(row: ClaimedDelivery, signal: AbortSignal): Promise<Result | null> {
    const nowMs = clock.nowMs();
    const secrets: string[] = [];
    if (row.secretSealed) secrets.push(this.#open(row.secretSealed, aad(row.webhookId, 'secret')));
    if (row.previousSecretSealed && row.previousSecretExpiresAt !== null && row.previousSecretExpiresAt > nowMs) {
      secrets.push(this.#open(row.previousSecretSealed, aad(row.webhookId, 'previous_secret')));
    }
    // Older rotated-out secrets, each until its own expiry (service.ts rotateSecret).
    if (row.olderSecretsSealed) {
      for (const s of JSON.parse(this.#open(row.olderSecretsSealed, aad(row.webhookId, 'older_secrets'))) as PreviousSecret[]) if (s.expiresAt > nowMs) secrets.push(s.secret);
    }
    const custom = row.headersSealed ? (JSON.parse(this.#open(row.headersSealed, aad(row.webhookId, 'headers'))) as { key: string; value: string }[]) : [];
    const url = this.#open(row.urlSealed, aad(row.webhookId, 'url'));
    const headers = deliveryHeaders({ deliveryId: row.id, eventId: row.eventId, eventType: row.eventType, body: row.body, secrets, nowMs, custom });
    this.stats.attempted++;
    const started = performance.now();
    let status: number | null = null;
    let responseBody: string | null = null;
    let error: string | null = null;
    try {
      const res = await outboundRequest(
        url,
        { method: 'POST', headers, body: row.body, timeoutMs: this.#opts.timeoutMs, maxResponseBytes: RESPONSE_READ_BYTES, truncate: true, signal },
        this.#keel.outbound,
      );
      status = res.status;
      responseBody = res.body.toString('utf8').slice(0, RESPONSE_BODY_CHARS);
      if (status >= 300 && status < 400) error = `HTTP ${status}: redirects are not followed`;
      else if (status < 200 || status >= 300) error = `HTTP ${status}`;
    } catch (err) {
      if (err instanceof OutboundError && err.code === 'aborted') return null;
      error = describeFailure(err, this.#opts.timeoutMs);
    }
    const elapsed = Math.round(performance.now() - started);
    const attemptedAt = clock.nowMs();
    const attempts = row.attempts + 1;
    const base = {
      id: row.id,
      claimId: row.claimId,
      webhookId: row.webhookId,
      responseStatus: status,
      responseBody,
      responseTimeMs: elapsed,
      errorMessage: error,
      attemptedAt,
    };
    if (error === null) {
      this.#failing.delete(row.webhookId);
      return { ...base, status: 'delivered', nextRetryAt: null, deliveredAt: attemptedAt };
    }
    this.#failing.add(row.webhookId);
    const policy = effectivePolicy(row.retryPolicy);
    if (attempts <= policy.maxRetries) {
      const next = attemptedAt + retryDelayMs(policy, attempts - 1);
      this.#dueSoon(next);
      return { ...base, status: 'retrying', nextRetryAt: next, deliveredAt: null };
    }
    return { ...base, status: 'failed', nextRetryAt: null, deliveredAt: null };
  }

  /** A timer to the earliest retry this process scheduled (real time, as far as the clock moves with it). */
  #dueSoon(atMs: number): void {
    this.#dues.push(atMs);
    // The earliest ones are what the timer needs; later ones are found by the sweep if dropped here.
    if (this.#dues.length > 1_000) this.#dues = this.#dues.sort((a, b) => a - b).slice(0, 500);
    this.#armDueTimer();
  }

  #armDueTimer(): void {
    if (this.#dueTimer) clearTimeout(this.#dueTimer);
    this.#dueTimer = null;
    if (this.#dues.length === 0 || this.#stopping) return;
    const earliest = Math.min(...this.#dues);
    const delay = Math.max(0, Math.min(earliest - clock.nowMs(), SWEEP_MS)) + 5;
    this.#dueTimer = setTimeout(() => {
      this.#dueTimer = null;
      const now = clock.nowMs();
      const before = this.#dues.length;
      this.#dues = this.#dues.filter((d) => d > now);
      if (this.#dues.length < before) this.wake();
      this.#armDueTimer();
    }, delay);
  }

  /** Results are written in batches: at once from FLUSH_BATCH, else FLUSH_DELAY_MS after the first (arrival is not delayed by it). */
  #scheduleFlush(): void {
    if (this.#results.length + this.#releases.length >= FLUSH_BATCH || this.#stopping) {
      if (this.#flushTimer) clearTimeout(this.#flushTimer);
      this.#flushTimer = null;
      void this.#flush();
      return;
    }
    this.#flushTimer ??= setTimeout(() => {
      this.#flushTimer = null;
      void this.#flush();
    }, FLUSH_DELAY_MS);
  }

  /** Writes buffered results and releases, one statement each per batch; serialised. */
  async #flush(): Promise<void> {
    while (this.#flushing) await this.#flushing;
    if (this.#results.length === 0 && this.#releases.length === 0) return;
    this.#flushing = this.#flushOnce().finally(() => {
      this.#flushing = null;
    });
    await this.#flushing;
    if (this.#results.length > 0 || this.#releases.length > 0) await this.#flush();
  }

  async #flushOnce(): Promise<void> {
    const releases = this.#releases.splice(0);
    if (releases.length > 0) {
      try {
        await rawQuery(this.#keel.db, releaseStatement, [releases.map((r) => r.id), releases.map((r) => r.claimId)]);
        this.stats.released += releases.length;
      } catch (err) {
        // The lease runs out by itself; nothing is lost.
        this.#keel.log.warn({ error: loggableError(err) }, 'webhooks: releasing claimed deliveries failed');
      }
    }
    while (this.#results.length > 0) {
      const batch = this.#results.splice(0, FLUSH_BATCH);
      try {
        await this.#record(batch);
      } catch (err) {
        // Kept for the next flush; if the process dies first, the lease runs out and the attempt is made again.
        this.#keel.log.error({ error: loggableError(err) }, 'webhooks: recording attempts failed; retrying');
        this.#results.unshift(...batch);
        await new Promise((r) => setTimeout(r, 500));
        if (this.#stopping && !this.#running) return;
      }
    }
  }

  /**
   * Records a batch of results. The statement and the audit entries of the webhooks it moved to
   * `failed` commit together (a reader never sees the status without its audit entry, and a crash
   * cannot keep one without the other); the dead-letter list is told after the commit. Only a batch
   * with a dead letter can move a webhook, so only such a batch opens a transaction: the others stay
   * one statement.
   */
  async #record(batch: Result[]): Promise<void> {
    const nowIso = clock.now().toISOString();
    const t0 = performance.now();
    const mayMove = batch.some((r) => r.status === 'failed');
    const { out, autoFailed } = await transactionIf(mayMove, this.#keel.db, async (tx) => {
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
      const moved = parseJson(row?.auto_failed ?? '[]') as { id: string; orgId: string; streak: number; since: string }[];
      for (const hook of moved) {
        await writeAudit(tx.db, { actor: { type: 'system' } }, {
          action: 'webhook.status.auto_failed',
          orgId: hook.orgId,
          target: { type: 'webhook', id: hook.id },
          details: { deadLettered: hook.streak, failingSince: hook.since, status: 'failed' },
        });
      }
      return { out: row, autoFailed: moved };
    });
    this.stats.records++;
    this.stats.recordMs += performance.now() - t0;
    const recorded = out?.recorded ?? 0;
    this.stats.recorded += recorded;
    if (this.#keel.metrics.enabled) {
      const attempts = this.#keel.metrics.counter(DELIVERY_ATTEMPTS_METRIC, 'Webhook delivery attempts by result: delivered, retrying (will be tried again), failed (dead-lettered), fenced_out (a late result of an expired lease, not recorded)', ['outcome']);
      if (recorded === batch.length) for (const r of batch) attempts.inc({ outcome: r.status });
      else attempts.inc({ outcome: 'fenced_out' }, batch.length - recorded);
    }
    if (recorded < batch.length) {
      this.stats.fencedOut += batch.length - recorded;
      this.#keel.log.warn({ dropped: batch.length - recorded }, 'webhooks: late results of expired leases were not recorded');
    }
    const dead = parseJson(out?.dead ?? '[]') as string[];
    if (dead.length > 0) await this.#deadLetter(dead);
    for (const hook of autoFailed) {
      this.#keel.log.warn({ webhookId: hook.id, orgId: hook.orgId, deadLettered: hook.streak }, 'webhooks: webhook moved to failed (every delivery dead-lettered for 24 hours)');
    }
  }

  async #deadLetter(ids: string[]): Promise<void> {
    this.#keel.log.warn({ deliveryIds: ids.slice(0, 20), count: ids.length }, 'webhooks: deliveries dead-lettered after their last retry');
    const redis = this.#keel.redis;
    if (!redis) return;
    try {
      await redis.multi().lpush(DLQ_LIST, ...ids).ltrim(DLQ_LIST, 0, LIST_CAP - 1).exec();
    } catch (err) {
      this.#keel.log.warn({ error: loggableError(err) }, 'webhooks: the dead-letter list in Redis could not be written (PostgreSQL keeps the failed deliveries)');
    }
  }
}

/** The engine's one cancel signal, listened to by every attempt in flight (so no listener-count warning). */
function cancellation(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

function describeFailure(err: unknown, timeoutMs: number): string {
  if (err instanceof OutboundError) {
    // SPEC 7: an unsafe URL at delivery fails the attempt without an HTTP request.
    if (UNSAFE_TARGET_CODES.has(err.code)) return `Unsafe webhook URL: ${err.message}`;
    if (err.code === 'unresolvable') return `Unsafe webhook URL: it could not be validated (${err.message})`;
    if (err.code === 'timeout') return `Timed out: no complete answer within ${timeoutMs} ms`;
    return `Network error: ${err.message}`;
  }
  return `Network error: ${err instanceof Error ? err.message : String(err)}`;
}
