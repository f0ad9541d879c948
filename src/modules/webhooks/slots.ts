import { setMaxListeners } from 'node:events';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { loggableError } from '../../platform/safe-error.js';
import type { ClaimedDelivery, RouteTicket } from './model.js';
import { leaseMsFor, type AttemptResult } from './queue.js';
import type { Recorder } from './recorder.js';
import type { Permits } from './throttle.js';

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
 *
 * A throttled webhook (`rateLimitPerSecond`, throttle.ts) has at most its limit of slots, and its rows
 * start only with a permit of the current clock second: they wait in its queue, asking again at the
 * next second. A held webhook (a receiver's 429) starts nothing: its rows go back to the queue, due
 * for a claim once the hold ends.
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
  readonly #permits: Permits;
  /** Throttled webhooks seen here and their limits (from their rows: as of their claim). */
  readonly #limits = new Map<string, number>();
  /** Webhooks held by a receiver's 429, until when (epoch ms). */
  readonly #holds = new Map<string, number>();
  /** Throttled webhooks asking for permits now; asked again once that answers. */
  readonly #taking = new Set<string>();
  readonly #takeAgain = new Set<string>();
  /** The clock second whose permits a throttled webhook used up (no asking again before the next). */
  readonly #spent = new Map<string, number>();
  readonly #permitTimers = new Map<string, NodeJS.Timeout>();

  constructor(keel: Keel, opts: SlotOptions, recorder: Recorder, run: RunAttempt, permits: Permits) {
    this.#keel = keel;
    this.#permits = permits;
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
    const cap = this.#failing.has(webhookId) ? Math.min(FAILING_WEBHOOK_SLOTS, this.#opts.perWebhook) : this.#opts.perWebhook;
    const limit = this.#limits.get(webhookId);
    return limit === undefined ? cap : Math.min(cap, limit);
  }

  /** Rows this process holds for a webhook: in flight and queued behind them. */
  held(webhookId: string): number {
    return (this.#perHook.get(webhookId) ?? 0) + (this.#queued.get(webhookId)?.length ?? 0);
  }

  /** A claim for rows routed here, or null when this process holds all it may (see `DeliveryEngine.ticket`). */
  ticket(): RouteTicket | null {
    if (this.#inflight + this.#queuedCount >= this.#opts.concurrency * this.#routeWindow || this.#queuedBytes >= ROUTE_MAX_QUEUED_BYTES) return null;
    // Throttled and held webhooks too: their rows wait for a claim, which takes only what they may send soon.
    const full = new Set<string>([...this.#failing, ...this.#limits.keys(), ...this.#holds.keys()]);
    for (const id of this.#queued.keys()) if (this.held(id) >= this.#routeWindow * this.capFor(id)) full.add(id);
    return { claimId: newId(), leaseUntil: clock.nowMs() + this.#leaseMs, full: [...full] };
  }

  /** Whether this webhook's rows wait for a receiver's 429 (and when that ends), forgetting a hold that ended. */
  #heldUntil(row: ClaimedDelivery): number | null {
    const local = this.#holds.get(row.webhookId) ?? null;
    const until = Math.max(local ?? 0, row.holdUntil ?? 0);
    if (until > clock.nowMs()) return until;
    if (local !== null) this.#holds.delete(row.webhookId);
    return null;
  }

  /** A receiver's 429 holds this webhook until `untilMs`: its queued rows go back to the queue, and the claimer looks again then. */
  hold(webhookId: string, untilMs: number): void {
    this.#holds.set(webhookId, Math.max(untilMs, this.#holds.get(webhookId) ?? 0));
    const queue = this.#queued.get(webhookId) ?? [];
    this.#queued.delete(webhookId);
    for (const row of queue) {
      this.#queuedCount--;
      this.#queuedBytes -= row.body.length;
      this.#recorder.release(row);
    }
    this.#listener.retryAt(untilMs);
  }

  /** Throttled webhooks with queued rows ask for permits now (tests, after moving the clock). */
  kick(): void {
    for (const id of this.#queued.keys()) if (this.#limits.has(id)) this.#askPermits(id);
  }

  /**
   * Permits of the current clock second for a throttled webhook's queued rows, as many as it has free
   * slots: the rows granted start, the rest wait for the next second (a timer asks again then).
   */
  #askPermits(webhookId: string): void {
    if (this.#stopping) return;
    if (this.#taking.has(webhookId)) {
      this.#takeAgain.add(webhookId);
      return;
    }
    const queue = this.#queued.get(webhookId);
    const limit = this.#limits.get(webhookId);
    if (!queue || queue.length === 0 || limit === undefined) return;
    const second = clock.nowSeconds();
    if (this.#spent.get(webhookId) === second) return this.#askAtNextSecond(webhookId);
    const want = Math.min(queue.length, this.capFor(webhookId) - (this.#perHook.get(webhookId) ?? 0), this.#opts.concurrency - this.#inflight);
    if (want <= 0) return;
    this.#taking.add(webhookId);
    this.#permits
      .take(webhookId, limit, want, second)
      .then(
        (granted) => {
          if (granted < want) this.#spent.set(webhookId, second);
          const q = this.#queued.get(webhookId) ?? [];
          for (let i = 0; i < granted && q.length > 0 && !this.#stopping; i++) this.#startFromQueue(webhookId, q);
          if (q.length === 0) this.#queued.delete(webhookId);
        },
        (err: unknown) => {
          this.#keel.log.warn({ error: loggableError(err), webhookId }, 'webhooks: taking send permits failed; asking again at the next second');
          this.#spent.set(webhookId, second);
        },
      )
      .finally(() => {
        this.#taking.delete(webhookId);
        if (this.#takeAgain.delete(webhookId) || this.#spent.get(webhookId) === second) this.#askPermits(webhookId);
      });
  }

  #askAtNextSecond(webhookId: string): void {
    if (this.#permitTimers.has(webhookId) || this.#stopping) return;
    const now = clock.nowMs();
    const timer = setTimeout(() => {
      this.#permitTimers.delete(webhookId);
      this.#askPermits(webhookId);
    }, Math.max(20, 1_000 - (now % 1_000) + 1));
    this.#permitTimers.set(webhookId, timer);
  }

  /** Starts the next queued row of a webhook, or releases it when too little of its lease is left. */
  #startFromQueue(webhookId: string, queue: ClaimedDelivery[]): void {
    const row = queue.shift();
    if (!row) return;
    this.#queuedCount--;
    this.#queuedBytes -= row.body.length;
    // Too little lease left for a whole attempt: let it go rather than race another worker.
    if (row.leaseUntil - clock.nowMs() < this.#opts.timeoutMs + 5_000) this.#recorder.release(row);
    else this.#start(row);
  }

  /** Starts a held row, or queues it behind its webhook's attempts; `routed`: it came with a ticket (its window is the route window). */
  dispatch(row: ClaimedDelivery, routed = false): void {
    if (row.rateLimitPerSecond === null) this.#limits.delete(row.webhookId);
    else this.#limits.set(row.webhookId, row.rateLimitPerSecond);
    const until = this.#heldUntil(row);
    if (until !== null) {
      this.#recorder.release(row);
      this.#listener.retryAt(until);
      return;
    }
    const throttled = row.rateLimitPerSecond !== null;
    const cap = this.capFor(row.webhookId);
    if (!throttled && (this.#perHook.get(row.webhookId) ?? 0) < cap && this.#inflight < this.#opts.concurrency) return this.#start(row);
    const queue = this.#queued.get(row.webhookId) ?? [];
    // A throttled webhook queues rows while its slots are free (they wait for permits), so its bound
    // counts what runs too: the claimer tops a webhook up to WINDOW × cap held (scheduler.ts `#pump`),
    // and a bound below that would release each claimed row and claim it again, in a loop.
    const bound = throttled ? WINDOW * cap - (this.#perHook.get(row.webhookId) ?? 0) : ((routed ? this.#routeWindow : WINDOW) - 1) * cap;
    if (queue.length >= bound) {
      // More than this process should hold for one webhook: back to the queue for anyone.
      this.#recorder.release(row);
      // A throttled webhook's routed rows were never a claim's candidates: look for them once released.
      if (throttled) this.#listener.retryAt(clock.nowMs() + 250);
      return;
    }
    queue.push(row);
    this.#queued.set(row.webhookId, queue);
    this.#queuedCount++;
    this.#queuedBytes += row.body.length;
    if (throttled) this.#askPermits(row.webhookId);
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
    if (this.#limits.has(webhookId)) return this.#askPermits(webhookId);
    const queue = this.#queued.get(webhookId);
    while (queue && queue.length > 0 && !this.#stopping && this.#inflight < this.#opts.concurrency && (this.#perHook.get(webhookId) ?? 0) < this.capFor(webhookId)) {
      this.#startFromQueue(webhookId, queue);
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
    for (const timer of this.#permitTimers.values()) clearTimeout(timer);
    this.#permitTimers.clear();
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
