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
 * One statement routes any number of events. A publisher inside a transaction routes its own event
 * with it (`routeStatement`: $1-$4 their organisations, types, ids and bodies). A publisher outside one
 * (`tx.alone`: `POST /events`, whose event is its only write) stores its event in the inbox and is
 * answered; the router then takes the inbox's events, many per statement (`inboxRouteStatement`,
 * inbox.ts). On PGlite a routing statement cost ~420 µs for 10 rows alone and ~250 µs per event 8 at
 * a time (most of a statement's cost is per statement, not per row).
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

/** Where a routing statement's parameters are ($n), besides its events'. */
interface RouteParams {
  now: string;
  claimId: string;
  leaseUntil: string;
  full: string;
  v7: string;
}

/**
 * The routing statement's common table expressions after its events: `ev` (before these) holds org_id,
 * type, event_id, payload (json), payload_id, traceparent, created_at and partner_id; `ins` returns
 * the rows written.
 */
function routeCtes(p: RouteParams): string {
  return `m as (
     select e.org_id, e.type, e.event_id, e.payload_id, e.traceparent, e.created_at, w.id as webhook_id, w.status
       from ev e join webhooks w on w.org_id = e.org_id and (w.events ? e.type or ${OPERATIONAL})
     union all
     select e.org_id, e.type, e.event_id, e.payload_id, e.traceparent, e.created_at, w.id as webhook_id, w.status
       from ev e join webhooks w on w.partner_id = e.partner_id and (w.events ? e.type or ${OPERATIONAL})
   ), t as (
     select * from m where m.status = 'active'
   ), pl as (
     insert into webhook_payloads (id, org_id, body, event_type, created_at)
     select e.payload_id, e.org_id, e.payload, e.type, e.created_at from ev e
      where exists (select 1 from t where t.payload_id = e.payload_id)
         or (not ${OPERATIONAL} and exists (select 1 from m where m.payload_id = e.payload_id))
   ), ins as (
     insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at, claim_id, lease_expires_at, traceparent)
     select encode(overlay(uuid_send(${p.v7}::uuid) placing int4send((row_number() over ())::int4) from 13 for 4), 'hex')::uuid,
            t.webhook_id, t.org_id, t.type, t.event_id, t.payload_id, 'pending', 0, ${p.now}::timestamptz, t.created_at,
            c.claim_id, case when c.claim_id is null then null else to_timestamp(${p.leaseUntil}::float8 / 1000.0) end, t.traceparent
       from t
       cross join lateral (select case when ${p.claimId}::uuid is null or t.webhook_id = any(${p.full}::uuid[]) then null else ${p.claimId}::uuid end as claim_id) c
     returning id, webhook_id, claim_id, event_id, payload_id
   )`;
}

/** The rows written: claimed ones with their event (the router's events are not in memory) and what an attempt needs of their webhook. */
const ROUTED = `select ins.id, ins.webhook_id, ins.claim_id, ins.event_id, e.org_id as event_org_id, e.type as event_type, e.payload::text as event_body, e.traceparent as event_traceparent,
          w.url_sealed, w.secret_sealed, w.previous_secret_sealed, w.previous_secret_expires_at, w.older_secrets_sealed, w.headers_sealed, w.retry_policy,
          w.rate_limit_per_second, w.hold_until
     from ins left join webhooks w on ins.claim_id is not null and w.id = ins.webhook_id
              left join ev e on ins.claim_id is not null and e.payload_id = ins.payload_id`;

/** Routes events given as parameters ($1-$4, $10, $11: organisations, types, ids, bodies, payload ids, traces), in the publisher's transaction. */
const routeStatement = prepared(
  'webhook_deliveries_route',
  `with ev as (
     select u.*, $5::timestamptz as created_at, o.partner_id from unnest($1::uuid[], $2::text[], $3::text[], $4::json[], $10::uuid[], $11::text[]) as u(org_id, type, event_id, payload, payload_id, traceparent)
       left join organizations o on o.id = u.org_id
   ), ${routeCtes({ now: '$5', claimId: '$6', leaseUntil: '$7', full: '$8', v7: '$9' })}
   ${ROUTED}`,
);

/**
 * Routes the inbox's oldest events ($1 at most; inbox.ts): they are deleted in the statement that
 * writes their payloads (under the inbox row's id) and deliveries, so an event is routed once
 * whichever process takes it (rows another statement holds are skipped). Every row carries how many
 * events were taken; a statement that took events with no delivery answers one row of nulls beside
 * that count.
 */
const inboxRouteStatement = prepared(
  'webhook_inbox_route',
  `with taken as (
     delete from webhook_inbox where id in (select id from webhook_inbox order by id limit $1 for update skip locked)
     returning org_id, event_type as type, event_id, body as payload, id as payload_id, traceparent, created_at
   ), ev as (
     select k.*, o.partner_id from taken k left join organizations o on o.id = k.org_id
   ), ${routeCtes({ now: '$2', claimId: '$3', leaseUntil: '$4', full: '$5', v7: '$6' })}, routed as (
     ${ROUTED}
   )
   select (select count(*)::int from taken) as taken, r.* from (values (1)) as one(x) left join routed r on true`,
);

interface RoutedRow extends WebhookAttemptColumns {
  /** Null only in the inbox statement's row of nulls (events taken, no delivery written). */
  id: string | null;
  webhook_id: string;
  event_id: string;
  /** Set when the row was claimed by the ticket (then its event's and the webhook's columns are there too). */
  claim_id: string | null;
  event_org_id: string | null;
  event_type: string | null;
  event_body: string | null;
  event_traceparent: string | null;
}

/** An event as routing needs it: its JSON body is made once, stored and sent as it is. */
export interface Routable {
  orgId: string;
  type: string;
  id: string;
  body: string;
  /** The trace of the publisher, continued by the event's deliveries (tracing on only: webhooks/tracing.ts). */
  traceparent?: string | undefined;
}

/** What a routing statement wrote: rows claimed for this process's engine, and rows left to claims. */
export interface Routed {
  claimed: ClaimedDelivery[];
  waiting: { id: string; webhookId: string }[];
}

/** The ticket's parameters of a routing statement: claim id, lease end, webhooks left to claims, the statement's id base. */
function ticketParams(runtime: RuntimeHooks): [string | null, number | null, string[], string] {
  const ticket = runtime.ticket();
  return [ticket?.claimId ?? null, ticket?.leaseUntil ?? null, ticket?.full ?? [], randomV7()];
}

function sorted(rows: RoutedRow[]): Routed {
  const claimed: ClaimedDelivery[] = [];
  const waiting: Routed['waiting'] = [];
  for (const r of rows) {
    if (r.id === null) continue;
    if (r.claim_id !== null) {
      claimed.push({
        id: r.id, webhookId: r.webhook_id, orgId: r.event_org_id as string, eventType: r.event_type as string, eventId: r.event_id,
        body: r.event_body as string, attempts: 0, traceparent: r.event_traceparent ?? undefined,
        ...attemptFields(r), claimId: r.claim_id, leaseUntil: 0,
      });
    } else waiting.push({ id: r.id, webhookId: r.webhook_id });
  }
  return { claimed, waiting };
}

async function routeNow(keel: Keel, db: Db, events: Routable[], runtime: RuntimeHooks): Promise<Routed> {
  const [claimId, leaseUntil, full, v7] = ticketParams(runtime);
  const rows = await rawQuery<RoutedRow>(db, routeStatement, [
    events.map((e) => e.orgId),
    events.map((e) => e.type),
    events.map((e) => e.id),
    events.map((e) => e.body),
    clock.now().toISOString(),
    claimId,
    leaseUntil,
    full,
    v7,
    events.map(() => newId()),
    // The publishers' traces (tracing on only; off, one null: every row's column stays null).
    activeTracer ? events.map((e) => e.traceparent ?? null) : null,
  ]);
  routerStats(keel).statements++;
  return withLease(sorted(rows), leaseUntil);
}

function withLease(routed: Routed, leaseUntil: number | null): Routed {
  if (leaseUntil !== null) for (const c of routed.claimed) c.leaseUntil = leaseUntil;
  return routed;
}

/** Routes events of publishers outside a transaction (inbox.ts `PublishBatch`) in one statement; `handOver` once they are answered. */
export function routeEvents(keel: Keel, events: Routable[]): Promise<Routed> {
  return routeNow(keel, keel.db, events, webhooksRuntime(keel));
}

/**
 * Routes up to `limit` of the inbox's oldest events (inbox.ts) and hands their deliveries over; the
 * number of events taken (fewer than `limit`: nothing more to take now).
 */
export async function routeInbox(keel: Keel, limit: number): Promise<number> {
  const runtime = webhooksRuntime(keel);
  const [claimId, leaseUntil, full, v7] = ticketParams(runtime);
  const rows = await rawQuery<RoutedRow & { taken: number }>(keel.db, inboxRouteStatement, [limit, clock.now().toISOString(), claimId, leaseUntil, full, v7]);
  const taken = rows[0]?.taken ?? 0;
  if (taken === 0) return 0;
  routerStats(keel).statements++;
  handOver(keel, withLease(sorted(rows), leaseUntil));
  return taken;
}

/**
 * Committed rows go to this process's engine, and workers are woken for the others. A failure here
 * is logged, not thrown: the rows are committed (one the engine failed to start is attempted once its
 * lease runs out).
 */
export function handOver(keel: Keel, { claimed, waiting }: Routed, runtime: RuntimeHooks = webhooksRuntime(keel)): void {
  try {
    if (claimed.length > 0) runtime.accept(claimed);
    if (waiting.length > 0) runtime.announce(waiting.map((r) => r.id), waiting.map((r) => r.webhookId));
  } catch (err) {
    keel.log.error({ error: loggableError(err) }, 'webhooks: routed deliveries could not be handed to the engine');
  }
}

export interface RouterStats {
  /** Routing statements that routed events (in a publisher's transaction, or from the inbox). */
  statements: number;
  /** Inbox inserts (inbox.ts). */
  inboxStatements: number;
  /** Events of publishers outside a transaction (`PublishBatch`): routed at once or stored in the inbox. */
  batchedEvents: number;
}

/** Counters of a Keel instance's routing (tests compare statements with events). */
export function routerStats(keel: Keel): RouterStats {
  return keel.modules.get('webhooks').router.stats;
}

/**
 * The bus subscriber: routes `event` in the publisher's transaction, so an event whose transaction
 * rolls back delivers nothing and a committed one is never lost. Once it has committed, the rows
 * this process's engine claimed go to it; workers are woken for the others. A publisher outside a
 * transaction (`POST /events`) stores its event in the inbox, routed right after (inbox.ts). Events
 * without an organisation are not routed (docs/decisions.md "Webhook shapes").
 */
export async function routeEvent(keel: Keel, tx: Tx, event: KeelEvent): Promise<void> {
  if (!event.orgId) return;
  const routable: Routable = { orgId: event.orgId, type: event.type, id: event.id, body: JSON.stringify(eventBody(event)) };
  if (activeTracer) routable.traceparent = currentTraceparent();
  if (tx.alone) return keel.modules.get('webhooks').router.batch.publish(routable);
  const runtime = webhooksRuntime(keel);
  const routed = await routeNow(keel, tx.db, [routable], runtime);
  if (routed.claimed.length > 0 || routed.waiting.length > 0) tx.afterCommit(() => handOver(keel, routed, runtime));
}
