import { clock } from '../clock.js';

/**
 * Pacing of refusals per source (docs/decisions.md "Speed: embedded backend and floods").
 *
 * A refusal answered at once invites the next request at once: a flood on keep-alive connections
 * sends its next login as soon as its 503 arrives, and each refusal still costs the server the HTTP
 * parse and the answer's write (~50 µs of the main thread), thousands a second. So past
 * `REFUSAL_HOLD_AFTER` refusals of one source in one second (the refusal log's count), a refusal's
 * answer is held until that second is over, then sent as it would have been (503 `overloaded`,
 * `Retry-After: 1`). A client that honours Retry-After never gets there; a flood gets at most one
 * answer per connection and second past the allowance, so its connections wait instead of costing.
 *
 * Bounded: at most `max` answers are held at once (past it a refusal is answered at once), and the
 * held answers are sent when the process stops. The second is the controllable clock's (clock.ts);
 * a 100-ms timer, running only while something is held, sends what is due.
 */
export class RefusalHold {
  readonly #after: number;
  readonly #max: number;
  readonly #held: { second: number; send: () => void }[] = [];
  #timer: NodeJS.Timeout | null = null;

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

  /** Sends the answers held for a second that is over (held in order, so from the front; a clock set back ends the second too). */
  #sendDue(): void {
    const now = clock.nowSeconds();
    let due = 0;
    while (due < this.#held.length && (this.#held[due]?.second ?? now) !== now) due++;
    for (const h of this.#held.splice(0, due)) h.send();
    if (this.#held.length === 0 && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = null;
    }
  }
}
