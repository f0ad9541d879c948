import { setMaxListeners } from 'node:events';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { loggableError } from '../../platform/safe-error.js';
import type { ClaimedDelivery, RouteTicket } from './model.js';
import { leaseMsFor, type AttemptResult } from './queue.js';
import type { Recorder } from './recorder.js';

/** Rows a webhook may hold in this process, in multiples of its slots (in flight + queued); claimed again at half. */
export const WINDOW = 4;
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

export interface SlotOptions {
  concurrency: number;
  perWebhook: number;
  timeoutMs: number;
}

/** One attempt of a held row, its result to record; null when none happened (the row is released). */
export type RunAttempt = (row: ClaimedDelivery, signal: AbortSignal) => Promise<AttemptResult | null>;

/** What the claimer hears from the attempts: a slot of this webhook is free again; a retry falls due then. */
export interface SlotListener {
  attemptEnded(webhookId: string): void;
  retryAt(atMs: number): void;
}

/**
 * The rows this process holds and the attempts it runs: at most `concurrency` attempts in flight, and
 * at most `perWebhook` per webhook (FAILING_WEBHOOK_SLOTS while its last attempt failed), so one slow
 * or dead receiver never holds the slots other webhooks need. A row without a free slot waits in its
 * webhook's in-process queue (up to its window) and starts as an attempt of its webhook finishes.
 * What follows a finished attempt (the next claim, the retry's wake-up) is the claimer's (scheduler.ts).
 */
export class Slots {
  readonly #keel: Keel;
  readonly #opts: SlotOptions;
  readonly #recorder: Recorder;
  readonly #run: RunAttempt;
  readonly #leaseMs: number;
  readonly #routeWindow: number;
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
  #stopping = false;
  #listener: SlotListener = { attemptEnded: () => undefined, retryAt: () => undefined };

  constructor(keel: Keel, opts: SlotOptions, recorder: Recorder, run: RunAttempt) {
    this.#keel = keel;
    this.#opts = opts;
    this.#recorder = recorder;
    this.#run = run;
    this.#leaseMs = leaseMsFor(opts.timeoutMs);
    this.#routeWindow = ROUTE_WINDOW[keel.database.kind];
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }

  get inflight(): number {
    return this.#inflight;
  }

  /** Free room for claimed rows in the whole process (its window: WINDOW × concurrency). */
  get free(): number {
    return this.#opts.concurrency * WINDOW - this.#inflight - this.#queuedCount;
  }

  listen(listener: SlotListener): void {
    this.#listener = listener;
  }

  /** Attempts start (again) after a start. */
  open(): void {
    this.#stopping = false;
    this.#cancel = cancellation();
  }

  capFor(webhookId: string): number {
    return this.#failing.has(webhookId) ? Math.min(FAILING_WEBHOOK_SLOTS, this.#opts.perWebhook) : this.#opts.perWebhook;
  }

  /** Rows this process holds for a webhook: in flight and queued behind them. */
  held(webhookId: string): number {
    return (this.#perHook.get(webhookId) ?? 0) + (this.#queued.get(webhookId)?.length ?? 0);
  }

  /** A claim for rows routed here, or null when this process holds all it may (see `DeliveryEngine.ticket`). */
  ticket(): RouteTicket | null {
    if (this.#inflight + this.#queuedCount >= this.#opts.concurrency * this.#routeWindow || this.#queuedBytes >= ROUTE_MAX_QUEUED_BYTES) return null;
    const full: string[] = [...this.#failing];
    for (const id of this.#queued.keys()) if (!this.#failing.has(id) && this.held(id) >= this.#routeWindow * this.capFor(id)) full.push(id);
    return { claimId: newId(), leaseUntil: clock.nowMs() + this.#leaseMs, full };
  }

  /** Starts a held row, or queues it behind its webhook's attempts; `routed`: it came with a ticket (its window is the route window). */
  dispatch(row: ClaimedDelivery, routed = false): void {
    const cap = this.capFor(row.webhookId);
    if ((this.#perHook.get(row.webhookId) ?? 0) < cap && this.#inflight < this.#opts.concurrency) return this.#start(row);
    const queue = this.#queued.get(row.webhookId) ?? [];
    if (queue.length >= ((routed ? this.#routeWindow : WINDOW) - 1) * cap) {
      // More than this process should hold for one webhook: back to the queue for anyone.
      this.#recorder.release(row);
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
    const done = this.#run(row, this.#cancel.signal)
      .then(
        (result) => {
          if (!result) return this.#recorder.release(row, false);
          if (result.status === 'delivered') this.#failing.delete(row.webhookId);
          else this.#failing.add(row.webhookId);
          if (result.nextRetryAt !== null) this.#listener.retryAt(result.nextRetryAt);
          this.#recorder.keep(result);
        },
        (err: unknown) => {
          this.#keel.log.error({ error: loggableError(err), deliveryId: row.id }, 'webhooks: attempt failed unexpectedly; the row is released');
          this.#recorder.release(row, false);
        },
      )
      .finally(() => {
        this.#attempts.delete(key);
        this.#inflight--;
        const left = (this.#perHook.get(row.webhookId) ?? 1) - 1;
        if (left > 0) this.#perHook.set(row.webhookId, left);
        else this.#perHook.delete(row.webhookId);
        this.#recorder.schedule();
        this.#startQueued(row.webhookId);
        if (this.#inflight < this.#opts.concurrency && this.#queuedCount > 0) for (const hook of this.#queued.keys()) this.#startQueued(hook);
        this.#listener.attemptEnded(row.webhookId);
      });
    this.#attempts.set(key, done);
  }

  #startQueued(webhookId: string): void {
    const queue = this.#queued.get(webhookId);
    while (queue && queue.length > 0 && !this.#stopping && this.#inflight < this.#opts.concurrency && (this.#perHook.get(webhookId) ?? 0) < this.capFor(webhookId)) {
      const row = queue.shift();
      if (!row) break;
      this.#queuedCount--;
      this.#queuedBytes -= row.body.length;
      // Too little lease left for a whole attempt: let it go rather than race another worker.
      if (row.leaseUntil - clock.nowMs() < this.#opts.timeoutMs + 5_000) this.#recorder.release(row);
      else this.#start(row);
    }
    if (queue && queue.length === 0) this.#queued.delete(webhookId);
  }

  /** No attempt starts from now on (the first step of a stop). */
  close(): void {
    this.#stopping = true;
  }

  /**
   * After `close`: queued rows are released (written with the next flush); `graceful` lets the
   * attempts in flight finish, otherwise they are cancelled. Resolves once they have ended.
   */
  async drain(graceful: boolean): Promise<void> {
    for (const [hook, list] of this.#queued) {
      for (const c of list) this.#recorder.release(c, false);
      this.#queued.delete(hook);
    }
    this.#queuedCount = 0;
    this.#queuedBytes = 0;
    if (!graceful) this.#cancel.abort();
    await Promise.all(this.#attempts.values());
  }
}

/** The one cancel signal of a start, listened to by every attempt in flight (so no listener-count warning). */
function cancellation(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}
