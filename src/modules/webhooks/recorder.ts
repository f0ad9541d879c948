import { announceAutoFailed } from './operational.js';
import { performance } from 'node:perf_hooks';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { loggableError } from '../../platform/safe-error.js';
import { writeDeadLetters } from './dead-letter.js';
import { recordResults, releaseHeld, type AttemptResult, type HeldRow } from './queue.js';

/** The counter of attempt results (README "Operating"). */
export const DELIVERY_ATTEMPTS_METRIC = 'keel_webhook_delivery_attempts_total';

const FLUSH_BATCH = 1_000;
/** How long a finished attempt's result may wait to be written with others. */
const FLUSH_DELAY_MS = 100;

/** The engine's counters this part moves. */
export interface RecorderStats {
  recorded: number;
  fencedOut: number;
  released: number;
  records: number;
  recordMs: number;
}

/** Where the engine is: while it stops, results are written at once; once it stopped, a failing write is given up (the leases run out). */
export interface RecorderState {
  stopping(): boolean;
  stopped(): boolean;
}

/**
 * Writes attempt results and releases in batches: at once from FLUSH_BATCH, else FLUSH_DELAY_MS after
 * the first (an arrival at the receiver is never delayed by it), one statement each per batch, one
 * flush at a time. A batch that fails to be written is kept and tried again; if the process dies
 * first, the lease runs out and the attempt is made again.
 */
export class Recorder {
  readonly #keel: Keel;
  readonly #stats: RecorderStats;
  readonly #state: RecorderState;
  #results: AttemptResult[] = [];
  #releases: HeldRow[] = [];
  #flushing: Promise<void> | null = null;
  #flushTimer: NodeJS.Timeout | null = null;

  constructor(keel: Keel, stats: RecorderStats, state: RecorderState) {
    this.#keel = keel;
    this.#stats = stats;
    this.#state = state;
  }

  /** A finished attempt's result, written with the next flush (`schedule` one). */
  keep(result: AttemptResult): void {
    this.#results.push(result);
  }

  /** A held row given back to the queue as it was; `schedule: false` leaves the write to the next flush. */
  release(row: HeldRow, schedule = true): void {
    this.#releases.push({ id: row.id, claimId: row.claimId });
    if (schedule) this.schedule();
  }

  schedule(): void {
    if (this.#results.length + this.#releases.length >= FLUSH_BATCH || this.#state.stopping()) {
      this.cancelTimer();
      void this.flush();
      return;
    }
    this.#flushTimer ??= setTimeout(() => {
      this.#flushTimer = null;
      void this.flush();
    }, FLUSH_DELAY_MS);
  }

  cancelTimer(): void {
    if (this.#flushTimer) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
  }

  /** Writes everything buffered; serialised, resolves once the buffer is empty (or given up). */
  async flush(): Promise<void> {
    while (this.#flushing) await this.#flushing;
    if (this.#results.length === 0 && this.#releases.length === 0) return;
    this.#flushing = this.#flushOnce().finally(() => {
      this.#flushing = null;
    });
    await this.#flushing;
    if (this.#results.length > 0 || this.#releases.length > 0) await this.flush();
  }

  async #flushOnce(): Promise<void> {
    const releases = this.#releases.splice(0);
    if (releases.length > 0) {
      try {
        await releaseHeld(this.#keel.db, releases);
        this.#stats.released += releases.length;
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
        if (this.#state.stopped()) return;
      }
    }
  }

  /** One batch: the record statement (queue.ts), then the metrics, the log of fenced-out results and the dead-letter list. */
  async #record(batch: AttemptResult[]): Promise<void> {
    const t0 = performance.now();
    const { recorded, dead, autoFailed } = await recordResults(this.#keel.db, batch, clock.now().toISOString(), (tx, moved) => announceAutoFailed(this.#keel, tx, moved));
    this.#stats.records++;
    this.#stats.recordMs += performance.now() - t0;
    this.#stats.recorded += recorded;
    if (this.#keel.metrics.enabled) {
      const attempts = this.#keel.metrics.counter(DELIVERY_ATTEMPTS_METRIC, 'Webhook delivery attempts by result: delivered, retrying (will be tried again), failed (dead-lettered), fenced_out (a late result of an expired lease, not recorded)', ['outcome']);
      if (recorded === batch.length) for (const r of batch) attempts.inc({ outcome: r.status });
      else attempts.inc({ outcome: 'fenced_out' }, batch.length - recorded);
    }
    if (recorded < batch.length) {
      this.#stats.fencedOut += batch.length - recorded;
      this.#keel.log.warn({ dropped: batch.length - recorded }, 'webhooks: late results of expired leases were not recorded');
    }
    if (dead.length > 0) await writeDeadLetters(this.#keel, dead);
    for (const hook of autoFailed) {
      this.#keel.log.warn({ webhookId: hook.id, orgId: hook.orgId, deadLettered: hook.streak }, 'webhooks: webhook moved to failed (every delivery dead-lettered for 24 hours)');
    }
  }
}
