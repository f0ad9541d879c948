import type { RetryPolicy } from './schema.js';
import { retryDelayMs } from './model.js';

/**
 * What happens after an attempt, decided without I/O: the outcome the dispatcher classified, the
 * attempt's number and the webhook's retry policy in; delivered, retry at a time, dead letter, or
 * release out. The record statement (queue.ts) writes the decision; the automatic move of a webhook
 * to `error` is the rule `webhookAfter` states, applied in that same statement (docs/decisions.md
 * "Webhooks").
 */

/** What one attempt came to. `cancelled`: a stop that was not graceful cut it; it is not counted. */
export type AttemptOutcome =
  | { kind: 'answered'; status: number }
  | { kind: 'unreachable'; error: string }
  | { kind: 'cancelled' };

/** Why an answer failed the attempt, or null when it delivered (2xx). Redirects are never followed. */
export function answerFailure(status: number): string | null {
  if (status >= 200 && status < 300) return null;
  if (status >= 300 && status < 400) return `HTTP ${status}: redirects are not followed`;
  return `HTTP ${status}`;
}

export type RetryDecision =
  | { status: 'delivered'; error: null }
  | { status: 'retrying'; error: string; nextRetryAt: number }
  /** The last attempt failed: the delivery is dead-lettered. */
  | { status: 'failed'; error: string }
  /** No attempt happened (cancelled): the row goes back to the queue as it was. */
  | { status: 'released' };

/**
 * The decision for attempt number `attempt` (1 for the first) that ended at `attemptedAt` (epoch ms).
 * Every failure is treated alike, whatever the status (410 included; a 429 with Retry-After is
 * held instead before it gets here, throttle.ts, until its bound): retry n (n = 1 after the first attempt) is due `retryDelayMs(policy, n - 1)` after it, up
 * to `policy.maxRetries` retries; the failure after the last one is a dead letter. `random` draws
 * the extended schedule's jitter.
 */
export function decideRetry(outcome: AttemptOutcome, attempt: number, policy: RetryPolicy, attemptedAt: number, random: () => number = Math.random): RetryDecision {
  if (outcome.kind === 'cancelled') return { status: 'released' };
  const error = outcome.kind === 'answered' ? answerFailure(outcome.status) : outcome.error;
  if (error === null) return { status: 'delivered', error: null };
  if (attempt <= policy.maxRetries) return { status: 'retrying', error, nextRetryAt: attemptedAt + retryDelayMs(policy, attempt - 1, random) };
  return { status: 'failed', error };
}

/** The automatic move to `error`: at least this many dead-lettered deliveries in a row… */
export const AUTO_FAIL_MIN_DEAD = 10;
/** …and none delivered for this long since the first of them. */
export const AUTO_FAIL_WINDOW_MS = 24 * 60 * 60 * 1000;

/** A webhook's failure state, as the `webhooks` row keeps it. */
export interface FailureState {
  active: boolean;
  /** Dead letters since the last delivered attempt. */
  streak: number;
  /** The first dead letter since the last delivered attempt (epoch ms), or null. */
  failingSince: number | null;
}

/**
 * A webhook's failure state after a batch of its recorded results (`delivered` of them delivered,
 * `dead` dead-lettered), and whether the batch moves it to `error`: any delivery clears the streak;
 * otherwise dead letters add to it, and an active webhook whose streak reaches AUTO_FAIL_MIN_DEAD
 * with its first dead letter AUTO_FAIL_WINDOW_MS ago or more moves. The record statement's `decide`
 * step is this rule in SQL, given these constants.
 */
export function webhookAfter(prev: FailureState, batch: { delivered: number; dead: number }, nowMs: number): FailureState & { autoFail: boolean } {
  if (batch.delivered > 0) return { active: prev.active, streak: 0, failingSince: null, autoFail: false };
  const streak = prev.streak + batch.dead;
  const failingSince = batch.dead > 0 ? (prev.failingSince ?? nowMs) : prev.failingSince;
  const autoFail = prev.active && batch.dead > 0 && streak >= AUTO_FAIL_MIN_DEAD && failingSince !== null && failingSince <= nowMs - AUTO_FAIL_WINDOW_MS;
  return { active: prev.active && !autoFail, streak, failingSince, autoFail };
}
