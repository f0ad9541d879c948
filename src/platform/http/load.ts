import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/**
 * The requests this process is answering now (counted by `requestContext`: from the moment a request
 * is admitted until its answer is sent or its connection closes). Background work that shares the
 * event loop with them (the webhook router, modules/webhooks/inbox.ts) asks `busy` and yields while
 * requests wait: the API answers first (docs/decisions.md "Publishing under load stores the event;
 * routing follows").
 */
export class RequestLoad {
  /** At least this many requests in flight means the API is under load (a lone client, or a steady trickle, is not). */
  static readonly BUSY_AT = 16;
  /**
   * Busy lasts this long (real time) after the count last reached BUSY_AT: clients that send their
   * next request as soon as they are answered leave the count near zero between two answers and the
   * next requests, and that moment is not quiet.
   */
  static readonly BUSY_LINGER_MS = 250;

  /** The event loop busy at least this share of the last sample's time, with requests waiting: saturated. */
  static readonly SATURATED_AT = 0.9;
  /** The shortest time one utilization sample covers. */
  static readonly SAMPLE_MS = 50;
  /**
   * The utilization is averaged with this time constant: a burst of background work (a routing
   * statement and its deliveries) fills a sample or two, not the average; a flood fills it within
   * half a second.
   */
  static readonly AVERAGE_MS = 250;

  active = 0;
  #busyAt = Number.NEGATIVE_INFINITY;
  #sampledAt = performance.now();
  #elu: EventLoopUtilization = performance.eventLoopUtilization();
  #utilization = 0;

  started(): void {
    if (++this.active >= RequestLoad.BUSY_AT) this.#busyAt = performance.now();
  }

  ended(): void {
    this.active--;
  }

  /** Requests wait (now, or within BUSY_LINGER_MS). */
  get busy(): boolean {
    return this.active >= RequestLoad.BUSY_AT || performance.now() - this.#busyAt < RequestLoad.BUSY_LINGER_MS;
  }

  /** The share of the time the event loop was busy, averaged over about AVERAGE_MS (samples of at least SAMPLE_MS, taken when asked). */
  utilization(): number {
    const now = performance.now();
    const elapsed = now - this.#sampledAt;
    if (elapsed >= RequestLoad.SAMPLE_MS) {
      const elu = performance.eventLoopUtilization();
      const sample = performance.eventLoopUtilization(elu, this.#elu).utilization;
      this.#utilization += (sample - this.#utilization) * Math.min(1, elapsed / RequestLoad.AVERAGE_MS);
      this.#elu = elu;
      this.#sampledAt = now;
    }
    return this.#utilization;
  }

  /**
   * Requests wait and the event loop has no time to spare: work that can wait should (a steady trickle
   * of requests beside background work is not saturation, however many are in flight at a moment).
   */
  get saturated(): boolean {
    return this.busy && this.utilization() >= RequestLoad.SATURATED_AT;
  }
}
