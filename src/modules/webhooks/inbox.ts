import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import { loggableError } from '../../platform/safe-error.js';
import { SWEEP_MS } from './scheduler.js';
import { handOver, routeEvents, routeInbox, routerStats, type Routable, type Routed, type RouterStats } from './routing.js';

/**
 * Publishing outside a transaction (`POST /events`, whose event is its only write): docs/decisions.md
 * "Publishing under load stores the event; routing follows".
 *
 * - **The publish batch** (group commit): the events published while a statement runs go together in
 *   the next one (up to 256 events or 1 MiB of bodies); each publisher's 202 waits for the statement
 *   that wrote its event, so an accepted event is never lost, and a failed statement fails (and writes
 *   nothing for) every publisher in it. One statement at a time on PGlite (its one connection), two on
 *   PostgreSQL. While the API is quiet the statement routes the events (their payloads and
 *   deliveries: routing.ts), so the 202 means the deliveries are written. While it is
 *   saturated (`RequestLoad.saturated`: requests wait and the event loop has no time to spare) the
 *   statement only stores them in `webhook_inbox`, one row each, and the publishers are answered:
 *   the API accepts a burst at the rate it can answer.
 * - **The router** routes the inbox: rows oldest first (`FOR UPDATE SKIP LOCKED`), deleted in the
 *   statement that writes their payloads and deliveries, so each event is routed exactly once by
 *   whichever process takes it. It runs after each insert in the process that stored the events, and
 *   every SWEEP_MS (5 s) wherever the delivery engine runs
 *   (rows left by a process that stopped or died between storing and routing, or at start-up). While
 *   the API is saturated it takes BUSY_ROUTE_EVENTS events per BUSY_ROUTE_INTERVAL_MS of the
 *   clock (a floor: deliveries go on during a long burst); once it is not, the rest at once.
 */

const insertStatement = prepared(
  'webhook_inbox_insert',
  `insert into webhook_inbox (id, org_id, event_type, event_id, body, traceparent, created_at)
   select u.*, $7::timestamptz from unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::json[], $6::text[]) as u(id, org_id, event_type, event_id, body, traceparent)`,
);

/** The most events one inbox insert carries, and the most body bytes (a single larger event still goes, alone). */
const INBOX_BATCH_EVENTS = 256;
const INBOX_BATCH_BYTES = 1 << 20;
/** The most events one routing statement takes while the API is quiet. */
const ROUTE_BATCH_EVENTS = 256;
/** While the API is saturated: at most this many events per routing statement, one statement per BUSY_ROUTE_INTERVAL_MS (80 events a second). */
export const BUSY_ROUTE_EVENTS = 8;
export const BUSY_ROUTE_INTERVAL_MS = 100;
/** How often a router waiting out the interval looks again whether the API is still saturated (real time). */
const BUSY_POLL_MS = 10;

interface Waiter {
  event: Routable;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** The publishes of one Keel instance outside a transaction (group commit): routed at once, or stored in the inbox while the API is saturated (the router is woken then). */
export class PublishBatch {
  readonly #keel: Keel;
  readonly #slots: number;
  readonly #stored: () => void;
  #queue: Waiter[] = [];
  #running = 0;

  constructor(keel: Keel, stored: () => void) {
    this.#keel = keel;
    this.#stored = stored;
    this.#slots = keel.database.kind === 'pglite' ? 1 : 2;
  }

  /** Resolves once the event's deliveries, or (API saturated) its inbox row, are committed. */
  publish(event: Routable): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({ event, resolve, reject });
      if (this.#running < this.#slots) {
        this.#running++;
        // After the I/O callbacks of this turn of the event loop: the requests that arrived together
        // (PGlite answers a statement without waiting on I/O, so one started at once would end before
        // the next request is read) join this statement.
        setImmediate(() => void this.#drain());
      }
    });
  }

  async #insert(events: Routable[]): Promise<void> {
    await rawQuery(this.#keel.db, insertStatement, [
      events.map(() => newId()),
      events.map((e) => e.orgId),
      events.map((e) => e.type),
      events.map((e) => e.id),
      events.map((e) => e.body),
      events.some((e) => e.traceparent) ? events.map((e) => e.traceparent ?? null) : null,
      clock.now().toISOString(),
    ]);
    routerStats(this.#keel).inboxStatements++;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        let bytes = 0;
        let n = 0;
        while (n < this.#queue.length && n < INBOX_BATCH_EVENTS && (n === 0 || bytes + (this.#queue[n] as Waiter).event.body.length <= INBOX_BATCH_BYTES)) {
          bytes += (this.#queue[n] as Waiter).event.body.length;
          n++;
        }
        const batch = this.#queue.splice(0, n);
        const events = batch.map((w) => w.event);
        const stats = routerStats(this.#keel);
        stats.batchedEvents += batch.length;
        // An API with time to spare routes at once (the 202 means the deliveries are written); a
        // saturated one stores the events for the router and answers.
        const busy = this.#keel.requests.saturated;
        let routed: Routed | null = null;
        try {
          if (busy) await this.#insert(events);
          else routed = await routeEvents(this.#keel, events);
        } catch (err) {
          for (const w of batch) w.reject(err);
          continue;
        }
        // Committed: every publisher is answered, whatever the hand-over does (a row it failed to
        // start is attempted once its lease runs out).
        for (const w of batch) w.resolve();
        if (routed) handOver(this.#keel, routed);
        else this.#stored();
      }
    } finally {
      this.#running--;
    }
  }
}

/**
 * Routes the inbox (see above). One drain runs at a time in a process; a wake-up during it makes it
 * look again when it ends. While the API is saturated a drain takes BUSY_ROUTE_EVENTS events per
 * BUSY_ROUTE_INTERVAL_MS of the clock (a floor: deliveries never stop during a long burst); once the
 * requests end, the rest at once. A failing statement (the database away) leaves the rows where they
 * are: the next wake-up or sweep tries again.
 */
export class InboxRouter {
  readonly #keel: Keel;
  #drain: Promise<void> | null = null;
  #again = false;
  #stopped = false;
  #sweep: NodeJS.Timeout | null = null;
  #lastBusyMs = Number.NEGATIVE_INFINITY;
  #failing = false;

  constructor(keel: Keel) {
    this.#keel = keel;
  }

  /** The periodic sweep (with the delivery engine: the `webhooks.delivery` job); routes what the inbox holds now (start-up). */
  start(): void {
    this.#stopped = false;
    if (!this.#sweep) {
      this.#sweep = setInterval(() => this.wake(), SWEEP_MS);
      this.#sweep.unref();
    }
    this.wake();
  }

  /** Stops routing (rows left in the inbox are routed by another process, or at the next start); resolves once a statement running has ended. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#sweep) clearInterval(this.#sweep);
    this.#sweep = null;
    await this.#drain?.catch(() => undefined);
  }

  /** The inbox may hold events: route them soon (after this turn of the event loop). */
  wake(): void {
    if (this.#stopped) return;
    if (this.#drain) {
      this.#again = true;
      return;
    }
    this.#drain = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => this.#run())
      .finally(() => {
        this.#drain = null;
        if (this.#again) {
          this.#again = false;
          this.wake();
        }
      });
  }

  async #run(): Promise<void> {
    const busy = () => this.#keel.requests.saturated;
    const stopped = () => this.#stopped;
    const again = () => this.#again;
    for (;;) {
      if (stopped()) return;
      this.#again = false;
      let limit = ROUTE_BATCH_EVENTS;
      if (busy()) {
        // The API is saturated: one small statement per interval, unless that ends meanwhile.
        while (busy() && clock.nowMs() < this.#lastBusyMs + BUSY_ROUTE_INTERVAL_MS) {
          await new Promise((resolve) => setTimeout(resolve, BUSY_POLL_MS));
          if (stopped()) return;
        }
        if (busy()) {
          limit = BUSY_ROUTE_EVENTS;
          this.#lastBusyMs = clock.nowMs();
        }
      }
      let taken: number;
      try {
        taken = await routeInbox(this.#keel, limit);
      } catch (err) {
        if (!this.#failing) this.#keel.log.warn({ error: loggableError(err) }, 'webhooks: routing published events failed (they stay stored; tried again within seconds)');
        this.#failing = true;
        return;
      }
      this.#failing = false;
      // Fewer than asked: the inbox is empty (or its other rows are another process's right now).
      if (taken < limit && !again()) return;
      // The next statement after the I/O of this turn: PGlite answers without waiting on I/O, so a
      // backlog routed statement after statement would hold the event loop (requests and the
      // deliveries just routed) until the inbox is empty.
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}

/** The router of a Keel instance: its inbox, the router and their counters (held by the module's handle, runtime.ts). */
export interface Router {
  batch: PublishBatch;
  router: InboxRouter;
  stats: RouterStats;
}

export function createRouter(keel: Keel): Router {
  const router = new InboxRouter(keel);
  return { batch: new PublishBatch(keel, () => router.wake()), router, stats: { statements: 0, inboxStatements: 0, batchedEvents: 0 } };
}
