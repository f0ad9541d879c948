import type { Keel } from '../../keel.js';
import type { ClaimedDelivery, RouteTicket } from './model.js';
import { Dispatcher, settle } from './dispatcher.js';
import { Recorder } from './recorder.js';
import { Scheduler } from './scheduler.js';
import { Slots } from './slots.js';
import { deferRateLimited, permitsFor } from './throttle.js';
import { runAttempt } from './tracing.js';

/**
 * The delivery engine: PostgreSQL rows are the queue (docs/architecture.md "The delivery engine").
 * Its stages, each in a file of its own:
 *
 * - **Queue** (`queue.ts`): the statements. A claim takes due rows of named webhooks with
 *   `FOR UPDATE SKIP LOCKED` and stamps them with a claim id and a lease; a result is written only
 *   where the row still carries the attempt's claim id (fencing), in the statement that also updates
 *   the webhook's counters, dead-letter streak and automatic move to `error`.
 * - **Scheduler** (`scheduler.ts`): when to claim (wake-ups, a timer to the next retry this process
 *   scheduled, a slow safety sweep), start and stop.
 * - **Slots** (`slots.ts`): the rows held in this process, in-process queues per webhook, at most
 *   WEBHOOK_CONCURRENCY attempts in flight and WEBHOOK_CONCURRENCY_PER_WEBHOOK per webhook.
 * - **Dispatcher** (`dispatcher.ts`): one attempt: sign, send through `outboundRequest`, classify.
 * - **Retry** (`retry.ts`): what follows an attempt, a pure function of its outcome, its number and
 *   the webhook's policy.
 * - **Recorder** (`recorder.ts`): results written in batches; the dead-letter list (`dead-letter.ts`).
 * - **Throttle** (`throttle.ts`): a webhook's `rateLimitPerSecond` (permits shared by every worker)
 *   and a receiver's 429 with Retry-After (the webhook is held, the attempt not counted).
 */

export { RESPONSE_BODY_CHARS, RESPONSE_READ_BYTES } from './dispatcher.js';
export { DLQ_LIST, LIST_CAP } from './dead-letter.js';
export { DELIVERY_ATTEMPTS_METRIC } from './recorder.js';
export { AUTO_FAIL_MIN_DEAD, AUTO_FAIL_WINDOW_MS } from './retry.js';
export { SWEEP_MS } from './scheduler.js';

/** The Redis list of wake-up hints: ids of new deliveries, capped at LIST_CAP. */
export const DELIVERY_LIST = 'service:webhooks:delivery';

export interface EngineOptions {
  concurrency: number;
  perWebhook: number;
  timeoutMs: number;
}

export class DeliveryEngine {
  readonly #scheduler: Scheduler;
  readonly #slots: Slots;
  /** Counters for tests and logs. */
  readonly stats = { routedHere: 0, hintLookups: 0, claimed: 0, attempted: 0, recorded: 0, fencedOut: 0, released: 0, claims: 0, claimMs: 0, records: 0, recordMs: 0 };

  constructor(keel: Keel, opts: EngineOptions) {
    const recorder = new Recorder(keel, this.stats, { stopping: () => this.#scheduler.stopping, stopped: () => this.#scheduler.stopped });
    const dispatcher = new Dispatcher(keel, opts.timeoutMs, this.stats);
    const permits = permitsFor(keel);
    this.#slots = new Slots(
      keel,
      opts,
      recorder,
      runAttempt(dispatcher, async (row, attempt) => {
        // A 429 with Retry-After holds the webhook instead of counting the attempt (throttle.ts).
        if (attempt.retryAfterMs != null) {
          const until = attempt.attemptedAt + attempt.retryAfterMs;
          if (await deferRateLimited(keel.db, row, attempt, until)) {
            this.#slots.hold(row.webhookId, until);
            return null;
          }
        }
        return settle(row, attempt);
      }),
      permits,
    );
    this.#scheduler = new Scheduler(keel, this.#slots, recorder, this.stats);
  }

  get running(): boolean {
    return this.#scheduler.running;
  }

  get inflight(): number {
    return this.#slots.inflight;
  }

  /** Starts claiming. On the embedded database (one process by the data-directory lock) leases left by a killed process are released first. */
  start(): Promise<void> {
    return this.#scheduler.start();
  }

  /** Claims what is due now and resolves once that claim has run (tests, after moving the clock). */
  pumpNow(): Promise<void> {
    this.#slots.kick();
    return this.#scheduler.pumpNow();
  }

  /** Runs when the engine stops (wake-up listeners close here). */
  onStop(fn: () => Promise<void> | void): void {
    this.#scheduler.onStop(fn);
  }

  /**
   * Something may be due: these webhooks have new deliveries (this process routed them), or, without
   * ids (a sweep, a re-activation), anything may be: look for it. Claims soon, coalesced within a tick.
   */
  wake(webhookIds?: Iterable<string>): void {
    this.#scheduler.wake(webhookIds);
  }

  /** A hint from another process: delivery ids (Redis), looked up to their webhooks. */
  hinted(deliveryIds: string[]): Promise<void> {
    return this.#scheduler.hinted(deliveryIds);
  }

  /**
   * A claim for deliveries about to be routed in this process, so they need no claim statement: null
   * when the engine is not running here or holds all it may. Webhooks that are failing or hold their
   * window are named in `full`: their new rows wait for a claim (any worker's).
   */
  ticket(): RouteTicket | null {
    return this.#scheduler.ticket();
  }

  /** Committed rows that were routed with a ticket of this engine: attempted here, without a claim. */
  accept(rows: ClaimedDelivery[]): void {
    this.#scheduler.accept(rows);
  }

  /**
   * Stops claiming. `graceful`: attempts in flight finish (each within its deadline) and are recorded;
   * otherwise they are cancelled and their rows released for another attempt. Rows claimed but not
   * started are released either way. Resolves once everything is written.
   */
  stop(opts: { graceful: boolean } = { graceful: true }): Promise<void> {
    return this.#scheduler.stop(opts.graceful);
  }
}
