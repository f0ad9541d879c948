/**
 * The one source of time. Everything that decides by time (token lifetimes, single-use records,
 * backoff) asks this clock, so tests can move it forward instead of sleeping.
 */
let offsetMs = 0;
let frozenAt: number | null = null;

export const clock = {
  nowMs(): number {
    return frozenAt ?? Date.now() + offsetMs;
  },
  now(): Date {
    return new Date(clock.nowMs());
  },
  nowSeconds(): number {
    return Math.floor(clock.nowMs() / 1000);
  },
  /** Tests: move time forward (or back) by ms. */
  advance(ms: number): void {
    if (frozenAt !== null) frozenAt += ms;
    else offsetMs += ms;
  },
  /** Tests: stop time at a given instant (default: now). */
  freeze(at: Date | number = clock.nowMs()): void {
    frozenAt = typeof at === 'number' ? at : at.getTime();
  },
  /** Tests: back to real time. */
  reset(): void {
    offsetMs = 0;
    frozenAt = null;
  },
};
