import type { Keel } from '../../keel.js';
import type { KeelEvent } from '../../events.js';
import { OPERATIONAL_EVENT_TYPES } from '../../event-types.js';
import { clock } from '../../platform/clock.js';
import { loggableError } from '../../platform/safe-error.js';
import { activeTracer, currentTraceparent } from '../../platform/tracing/index.js';
import type { Db } from '../../platform/db/client.js';
import { newId, randomV7 } from '../../platform/db/columns.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import type { Tx } from '../../platform/db/transaction.js';
import { attemptFields, eventBody, type ClaimedDelivery, type WebhookAttemptColumns } from './model.js';
import { webhooksRuntime, type RuntimeHooks } from './service.js';

/**
 * Routing (docs/specification.md "Webhooks: deliveries"): one pending delivery per active webhook of an event's organisation subscribed
 * to its type (every active webhook for an operational type such as `webhook.disabled`), and per
 * active partner-wide webhook of the organisation's partner (the same join through the partner's
 * index: one statement whatever the number of organisations; docs/decisions.md "Webhook replay and
 * partner-wide webhooks"), written in the publisher's transaction. The event's body is stored once
 * (`webhook_payloads`, $10: one id per event), in the same statement, for an event that has a
 * delivery or that a paused or failed webhook subscribes to (a replay may send it later, replay.ts);
 * each delivery refers to it.
 *
 * One statement routes any number of events ($1-$4: their organisations, types, ids and bodies). A
 * publisher inside a transaction routes its own event with it. A publisher outside one (`tx.alone`:
 * `POST /events`, whose routing is its only write) joins the **route batch**: the events published
 * while a routing statement runs go together in the next one, and each publisher waits for the
 * statement that wrote its rows (group commit). A lone event is routed at once; under load a
 * statement carries many. On PGlite a routing statement cost ~420 µs for 10 rows alone and ~250 µs
 * per event 8 at a time (most of a statement's cost is per statement, not per row).
 *
 * Ids: one random UUIDv7 per statement ($9, `randomV7`) with its last four bytes replaced by the row's
 * number: distinct within the statement, time-ordered and random (42 bits) across statements, and no
 * id lookup before the statement (`gen_random_uuid()` per row opened the random device through
 * PGlite's file system each time: 5 µs a row).
 *
 * With a ticket of this process's engine ($6 claim id, $7 lease end in epoch ms), the rows are claimed
 * as they are written, except for the webhooks named in $8, and come back with what an attempt needs
 * of their webhook: the engine starts them once the statement's transaction commits, and the claim
 * statement never reads them (a claim cost as much as the insert). Without one ($6 null) they wait
 * for any worker's claim.
 *
 * While tracing is on, $11 carries each publisher's `traceparent`, stored on its rows: the attempt
 * continues that trace in whichever process sends it (tracing.ts). Off, $11 is null and so is the column.
 */
const OPERATIONAL = `e.type in (${OPERATIONAL_EVENT_TYPES.map((t) => `'${t}'`).join(', ')})`;
const routeStatement = prepared(
  'webhook_deliveries_route',
  `with ev as (
     select u.*, o.partner_id from unnest($1::uuid[], $2::text[], $3::text[], $4::json[], $10::uuid[], $11::text[]) as u(org_id, type, event_id, payload, payload_id, traceparent)
       left join organizations o on o.id = u.org_id
   ), m as (
     select e.org_id, e.type, e.event_id, e.payload_id, e.traceparent, w.id as webhook_id, w.status
       from ev e join webhooks w on w.org_id = e.org_id and (w.events ? e.type or ${OPERATIONAL})
     union all
     select e.org_id, e.type, e.event_id, e.payload_id, e.traceparent, w.id as webhook_id, w.status
       from ev e join webhooks w on w.partner_id = e.partner_id and (w.events ? e.type or ${OPERATIONAL})
   ), t as (
     select * from m where m.status = 'active'
   ), pl as (
     insert into webhook_payloads (id, org_id, body, event_type, created_at)
     select e.payload_id, e.org_id, e.payload, e.type, $5::timestamptz from ev e
      where exists (select 1 from t where t.payload_id = e.payload_id)
         or (not ${OPERATIONAL} and exists (select 1 from m where m.payload_id = e.payload_id))
   ), ins as (
     insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at, claim_id, lease_expires_at, traceparent)
     select encode(overlay(uuid_send($9::uuid) placing int4send((row_number() over ())::int4) from 13 for 4), 'hex')::uuid,
            t.webhook_id, t.org_id, t.type, t.event_id, t.payload_id, 'pending', 0, $5::timestamptz, $5::timestamptz,
            c.claim_id, case when c.claim_id is null then null else to_timestamp($7::float8 / 1000.0) end, t.traceparent
       from t
       cross join lateral (select case when $6::uuid is null or t.webhook_id = any($8::uuid[]) then null else $6::uuid end as claim_id) c
     returning id, webhook_id, claim_id, event_id
   )
   select ins.id, ins.webhook_id, ins.claim_id, ins.event_id, w.url_sealed, w.secret_sealed, w.previous_secret_sealed, w.previous_secret_expires_at, w.older_secrets_sealed, w.headers_sealed, w.retry_policy,
          w.rate_limit_per_second, w.hold_until
     from ins left join webhooks w on ins.claim_id is not null and w.id = ins.webhook_id`,
);

interface RoutedRow extends WebhookAttemptColumns {
  id: string;
  webhook_id: string;
  event_id: string;
  /** Set when the row was claimed by the ticket (then the webhook's columns are there too). */
  claim_id: string | null;
}

/** An event as routing needs it: its JSON body is made once, stored and sent as it is. */
interface Routable {
  orgId: string;
  type: string;
  id: string;
  body: string;
  /** The trace of the publisher, continued by the event's deliveries (tracing on only: webhooks/tracing.ts). */
  traceparent?: string | undefined;
}

/** What a routing statement wrote: rows claimed for this process's engine, and rows left to claims. */
interface Routed {
  claimed: ClaimedDelivery[];
  waiting: RoutedRow[];
}

async function routeNow(keel: Keel, db: Db, events: Routable[], runtime: RuntimeHooks): Promise<Routed> {
  const ticket = runtime.ticket();
  const rows = await rawQuery<RoutedRow>(db, routeStatement, [
    events.map((e) => e.orgId),
    events.map((e) => e.type),
    events.map((e) => e.id),
    events.map((e) => e.body),
    clock.now().toISOString(),
    ticket?.claimId ?? null,
    ticket?.leaseUntil ?? null,
    ticket?.full ?? [],
    randomV7(),
    events.map(() => newId()),
    // The publishers' traces (tracing on only; off, one null: every row's column stays null).
    activeTracer ? events.map((e) => e.traceparent ?? null) : null,
  ]);
  routerStats(keel).statements++;
  const claimed: ClaimedDelivery[] = [];
  const waiting: RoutedRow[] = [];
  if (rows.length === 0) return { claimed, waiting };
  const byId = events.length === 1 ? null : new Map(events.map((e) => [e.id, e]));
  for (const r of rows) {
    if (ticket && r.claim_id !== null) {
      const event = byId ? (byId.get(r.event_id) as Routable) : (events[0] as Routable);
      claimed.push({
        id: r.id, webhookId: r.webhook_id, orgId: event.orgId, eventType: event.type, eventId: event.id, body: event.body, attempts: 0, traceparent: event.traceparent,
        ...attemptFields(r), claimId: ticket.claimId, leaseUntil: ticket.leaseUntil,
      });
    } else waiting.push(r);
  }
  return { claimed, waiting };
}

/** Committed rows go to this process's engine, and workers are woken for the others. */
function handOver(runtime: RuntimeHooks, { claimed, waiting }: Routed): void {
  if (claimed.length > 0) runtime.accept(claimed);
  if (waiting.length > 0) runtime.announce(waiting.map((r) => r.id), waiting.map((r) => r.webhook_id));
}

/** The most events one batched statement carries, and the most body bytes (a single larger event still goes, alone). */
export const ROUTE_BATCH_EVENTS = 256;
const ROUTE_BATCH_BYTES = 1 << 20;

interface Waiter {
  event: Routable;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * The route batch of one Keel instance. At most `slots` statements run at once: one on PGlite (one
 * connection: a second would only queue behind it, so the events wait here instead and go together),
 * a few on PostgreSQL (a pool). A statement that fails fails every publisher in it; none of its rows
 * were written.
 */
export class RouteBatch {
  readonly #keel: Keel;
  readonly #slots: number;
  #queue: Waiter[] = [];
  #running = 0;

  constructor(keel: Keel) {
    this.#keel = keel;
    this.#slots = keel.database.kind === 'pglite' ? 1 : 2;
  }

  route(event: Routable): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ event, resolve, reject });
      if (this.#running < this.#slots) {
        this.#running++;
        // After the I/O callbacks of this turn of the event loop: the requests that arrived together
        // (and PGlite answers a statement without waiting on I/O, so one started at once would end
        // before the next request is read) join this statement.
        setImmediate(() => void this.#drain());
      }
    });
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        let bytes = 0;
        let n = 0;
        while (n < this.#queue.length && n < ROUTE_BATCH_EVENTS && (n === 0 || bytes + (this.#queue[n] as Waiter).event.body.length <= ROUTE_BATCH_BYTES)) {
          bytes += (this.#queue[n] as Waiter).event.body.length;
          n++;
        }
        const batch = this.#queue.splice(0, n);
        routerStats(this.#keel).batchedEvents += batch.length;
        const runtime = webhooksRuntime(this.#keel);
        let routed: Routed;
        try {
          routed = await routeNow(this.#keel, this.#keel.db, batch.map((w) => w.event), runtime);
        } catch (err) {
          for (const w of batch) w.reject(err);
          continue;
        }
        // Committed: every publisher's event is routed, whatever the hand-over does (a row it failed
        // to start is attempted once its lease runs out).
        for (const w of batch) w.resolve();
        try {
          handOver(runtime, routed);
        } catch (err) {
          this.#keel.log.error({ error: loggableError(err) }, 'webhooks: routed deliveries could not be handed to the engine');
        }
      }
    } finally {
      this.#running--;
    }
  }
}

export interface RouterStats {
  /** Routing statements run. */
  statements: number;
  /** Events routed through the batch (publishers outside a transaction). */
  batchedEvents: number;
}

/** The router of a Keel instance: its route batch and counters (held by the module's handle, runtime.ts). */
export interface Router {
  batch: RouteBatch;
  stats: RouterStats;
}

export function createRouter(keel: Keel): Router {
  return { batch: new RouteBatch(keel), stats: { statements: 0, batchedEvents: 0 } };
}

/** Counters of a Keel instance's routing (tests compare statements with events). */
export function routerStats(keel: Keel): RouterStats {
  return keel.modules.get('webhooks').router.stats;
}

/**
 * The bus subscriber: routes `event` in the publisher's transaction, so an event whose transaction
 * rolls back delivers nothing and a committed one is never lost. Once it has committed, the rows
 * this process's engine claimed go to it; workers are woken for the others. Events without an
 * organisation are not routed (docs/decisions.md "Webhook shapes").
 */
export async function routeEvent(keel: Keel, tx: Tx, event: KeelEvent): Promise<void> {
  if (!event.orgId) return;
  const routable: Routable = { orgId: event.orgId, type: event.type, id: event.id, body: JSON.stringify(eventBody(event)) };
  if (activeTracer) routable.traceparent = currentTraceparent();
  if (tx.alone) return keel.modules.get('webhooks').router.batch.route(routable);
  const runtime = webhooksRuntime(keel);
  const routed = await routeNow(keel, tx.db, [routable], runtime);
  if (routed.claimed.length > 0 || routed.waiting.length > 0) tx.afterCommit(() => handOver(runtime, routed));
}
