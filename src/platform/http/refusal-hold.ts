import { clock } from '../clock.js';

/**
 * Pacing of refusals per source (docs/decisions.md "Speed: embedded backend and floods").
 *
 * A refusal answered at once invites the next request at once: a flood on keep-alive connections
 * sends its next login as soon as its 503 arrives, and each refusal still costs the server the HTTP
 * parse and the answer's write (~50 µs of the main thread), thousands a second. So past
 * `REFUSAL_HOLD_AFTER` refusals of one source in one second (the refusal log's count), a refusal's
 * answer is held until that second is over, then sent as it would have been (503 `overloaded`,
 * `Retry-After: 1`), spread over the next second (a tenth of them per 100-ms tick). A client that
 * honours Retry-After never gets there; a flood gets at most one answer per connection and second
 * past the allowance, so its connections wait instead of costing.
 *
 * Bounded: at most `max` answers are held at once (past it a refusal is answered at once), and the
 * held answers are sent when the process stops. The second is the controllable clock's (clock.ts);
 * a 100-ms timer, running only while something is held, sends what is due.
 */

/** The 100-ms ticks over which a second's held answers are sent. */
const SPREAD_TICKS = 10;

export class RefusalHold {
  readonly #after: number;
  readonly #max: number;
  readonly #held: { second: number; send: () => void }[] = [];
  #timer: NodeJS.Timeout | null = null;
  /** The second whose tick last set `#perTick`, and how many due answers each tick of it sends. */
  #spreadSecond = -1;
  #perTick = 1;

  /** `after`: refusals of one source in a second answered at once (0: none held); `max`: answers held at once. */
  constructor(after: number, max = 10_000) {
    this.#after = after;
    this.#max = max;
  }

  /** How many answers are held now. */
  get held(): number {
    return this.#held.length;
  }

  /** The answer of a refusal that was the `count`th of its source in this second: at once, or when the second is over. */
  answer<T>(count: number, answer: () => T): T | Promise<T> {
    if (this.#after === 0 || count <= this.#after || this.#held.length >= this.#max) return answer();
    const second = clock.nowSeconds();
    return new Promise<T>((resolve, reject) => {
      this.#held.push({
        second,
        send: () => {
          try {
            resolve(answer());
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        },
      });
      this.#arm();
    });
  }

  /** Sends every held answer (the process is stopping). */
  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    for (const h of this.#held.splice(0)) h.send();
  }

  #arm(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => this.#sendDue(), 100);
    this.#timer.unref();
  }

  /**
   * Sends answers held for a second that is over (held in order, so from the front; a clock set back
   * ends the second too), spread over the next second: the first tick of a second counts what is due
   * and each tick sends a tenth of it. Sent in one burst, every connection of a flood got its answer
   * in the same millisecond and sent its next request at once: each second began with hundreds of
   * parses and writes in a row, and reads beside the flood waited behind them.
   */
  #sendDue(): void {
    const now = clock.nowSeconds();
    let due = 0;
    while (due < this.#held.length && (this.#held[due]?.second ?? now) !== now) due++;
    if (now !== this.#spreadSecond) {
      this.#spreadSecond = now;
      this.#perTick = Math.max(1, Math.ceil(due / SPREAD_TICKS));
    }
    for (const h of this.#held.splice(0, Math.min(due, this.#perTick))) h.send();
    if (this.#held.length === 0 && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = null;
    }
  }
}
