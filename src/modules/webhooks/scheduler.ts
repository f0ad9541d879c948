import { performance } from 'node:perf_hooks';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { loggableError } from '../../platform/safe-error.js';
import type { ClaimedDelivery, RouteTicket } from './model.js';
import { claimDue, discoverDue, releaseAll, webhooksOfDeliveries } from './queue.js';
import type { Recorder } from './recorder.js';
import { WINDOW, type Slots } from './slots.js';

/** The safety sweep: how long a due row can wait when every wake-up was lost. */
export const SWEEP_MS = 5_000;

/** The engine's counters this part moves. */
export interface SchedulerStats {
  routedHere: number;
  hintLookups: number;
  claimed: number;
  claims: number;
  claimMs: number;
}

/**
 * When to claim. Claims are per webhook: the scheduler keeps the webhooks that may have due rows
 * (candidates: from wake-ups naming them, hints looked up to their webhooks, and a discovery query at
 * start, on the safety sweep, when a retry this process scheduled falls due or on a wake-up without
 * ids) and claims for those with room in the slots, in few large claims. No busy polling: a tick
 * coalesces wake-ups, a timer runs to the earliest retry this process scheduled, and the sweep
 * (SWEEP_MS) catches anything else. Start and stop (with drain) are sequenced here.
 */
export class Scheduler {
  readonly #keel: Keel;
  readonly #slots: Slots;
  readonly #recorder: Recorder;
  readonly #stats: SchedulerStats;
  #running = false;
  #stopping = false;
  #pumping = false;
  #pumpAgain = false;
  #wakeScheduled = false;
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
  readonly #stopHooks: (() => Promise<void> | void)[] = [];

  constructor(keel: Keel, slots: Slots, recorder: Recorder, stats: SchedulerStats) {
    this.#keel = keel;
    this.#slots = slots;
    this.#recorder = recorder;
    this.#stats = stats;
    slots.listen({
      attemptEnded: (webhookId) => {
        if (this.#candidates.has(webhookId) && slots.held(webhookId) <= (WINDOW / 2) * slots.capFor(webhookId)) this.#schedulePump();
      },
      retryAt: (atMs) => this.#dueSoon(atMs),
    });
  }

  get running(): boolean {
    return this.#running && !this.#stopping;
  }

  /** Stopping, or stopped (until the next start). */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** A stop has finished. */
  get stopped(): boolean {
    return this.#stopping && !this.#running;
  }

  async start(): Promise<void> {
    if (this.#running) return;
    if (this.#keel.database.kind === 'pglite') await releaseAll(this.#keel.db);
    this.#running = true;
    this.#stopping = false;
    this.#slots.open();
    this.#discover = true;
    this.#sweep = setInterval(() => this.wake(), SWEEP_MS);
    this.#schedulePump();
  }

  async pumpNow(): Promise<void> {
    this.#discover = true;
    await this.#pump();
    while (this.#pumping) await new Promise((r) => setTimeout(r, 2));
  }

  onStop(fn: () => Promise<void> | void): void {
    this.#stopHooks.push(fn);
  }

  wake(webhookIds?: Iterable<string>): void {
    if (webhookIds) {
      for (const id of webhookIds) {
        this.#candidates.add(id);
        if (this.#claimingFor?.has(id)) this.#rehinted.add(id);
      }
    } else this.#discover = true;
    this.#schedulePump();
  }

  async hinted(deliveryIds: string[]): Promise<void> {
    const ids = deliveryIds.filter((id) => /^[0-9a-f-]{36}$/i.test(id));
    if (ids.length === 0) return this.wake();
    this.#stats.hintLookups++;
    try {
      this.wake(await webhooksOfDeliveries(this.#keel.db, ids));
    } catch {
      this.wake();
    }
  }

  ticket(): RouteTicket | null {
    return this.running ? this.#slots.ticket() : null;
  }

  accept(rows: ClaimedDelivery[]): void {
    this.#stats.routedHere += rows.length;
    for (const row of rows) {
      if (!this.running) this.#recorder.release(row);
      else this.#slots.dispatch(row, true);
    }
  }

  async stop(graceful: boolean): Promise<void> {
    if (!this.#running || this.#stopping) return;
    this.#stopping = true;
    this.#slots.close();
    if (this.#sweep) clearInterval(this.#sweep);
    if (this.#dueTimer) clearTimeout(this.#dueTimer);
    this.#recorder.cancelTimer();
    for (const fn of this.#stopHooks.splice(0)) {
      try {
        await fn();
      } catch {
        // a wake-up channel that fails to close holds nothing
      }
    }
    await this.#slots.drain(graceful);
    while (this.#pumping) await new Promise((r) => setTimeout(r, 5));
    await this.#recorder.flush();
    this.#running = false;
  }

  #schedulePump(): void {
    if (!this.#running || this.#stopping || this.#wakeScheduled) return;
    this.#wakeScheduled = true;
    setImmediate(() => {
      this.#wakeScheduled = false;
      void this.#pump();
    });
  }

  /** Whether a wake-up arrived while claiming (read through a method: it changes across awaits). */
  #again(): boolean {
    return this.#pumpAgain;
  }

  #active(): boolean {
    return this.#running && !this.#stopping;
  }

  /**
   * Claims while some candidate webhook has room. A webhook holds at most WINDOW times its slots (in
   * flight, and queued behind them, started without another claim as attempts finish) and is claimed
   * for again once it has drained to half; the process holds at most WINDOW × WEBHOOK_CONCURRENCY. So
   * a busy engine claims in batches, never once per finished attempt, and one webhook's backlog never
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
          for (const id of await discoverDue(this.#keel.db, clock.now().toISOString())) this.#candidates.add(id);
        }
        while (this.#active()) {
          let free = this.#slots.free;
          const want: { id: string; room: number }[] = [];
          for (const id of this.#candidates) {
            const cap = this.#slots.capFor(id);
            const held = this.#slots.held(id);
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
            this.#slots.dispatch(row);
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
    this.#claimingFor = new Set(want.map((w) => w.id));
    const t0 = performance.now();
    const rows = await claimDue(this.#keel.db, want, now, now + this.#slots.leaseMs).finally(() => {
      this.#claimingFor = null;
    });
    this.#stats.claims++;
    this.#stats.claimMs += performance.now() - t0;
    this.#stats.claimed += rows.length;
    return rows;
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
}
