/**
 * Waiting for something another process, worker or socket does, when no event tells the test.
 *
 * `waitUntil` asks again (paced) until the answer is what the test waits for. Its bound is a safety
 * net for a loaded machine, never an assertion on speed: generous (15 s by default, inside the
 * suite's 30 s per test), and when it runs out the test fails naming what it waited for and the last
 * answer, instead of a loop ending quietly and a later assertion failing without the reason.
 */
export interface WaitOptions {
  /** Give up after this long (default 15 s). */
  timeoutMs?: number;
  /** Pause between two asks (default 20 ms). */
  everyMs?: number;
}

/** Asks `probe` until `done(answer)` holds and returns that answer; throws `timed out waiting for <what>` after the bound. */
export async function waitUntil<T>(what: string, probe: () => T | Promise<T>, done: (answer: T) => boolean = Boolean, options: WaitOptions = {}): Promise<T> {
  const { timeoutMs = 15_000, everyMs = 20 } = options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await probe();
    if (done(answer)) return answer;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last answer: ${describeAnswer(answer)}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function describeAnswer(answer: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(answer) ?? String(answer);
  } catch {
    text = String(answer);
  }
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}
