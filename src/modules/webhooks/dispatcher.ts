import { performance } from 'node:perf_hooks';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { OutboundError, UNSAFE_TARGET_CODES, outboundRequest } from '../../platform/outbound.js';
import { aad, effectivePolicy, type ClaimedDelivery, type CustomHeader, type PreviousSecret } from './model.js';
import type { AttemptResult } from './queue.js';
import { decideRetry, type AttemptOutcome } from './retry.js';
import { deliveryHeaders } from './signing.js';
import { retryAfterMs } from './throttle.js';

export const RESPONSE_BODY_CHARS = 1_000;
/** The most of an answer ever read: 1,000 characters of UTF-8 fit in 4,000 bytes. */
export const RESPONSE_READ_BYTES = 4_096;

/** One attempt as it happened: the classified outcome and what the history shows of it. */
export interface Attempt {
  outcome: AttemptOutcome;
  responseStatus: number | null;
  responseBody: string | null;
  responseTimeMs: number;
  /** When it ended (epoch ms, on the clock). */
  attemptedAt: number;
  /** A 429's Retry-After, as a wait in ms (throttle.ts `retryAfterMs`); null otherwise. */
  retryAfterMs?: number | null;
}

/**
 * One attempt of one held row, in stages: prepare (open the webhook's sealed URL, secrets and
 * headers, sign), send (through `outboundRequest`: the URL is vetted again and only vetted addresses
 * are dialled; one overall deadline; at most RESPONSE_READ_BYTES of the answer read; redirects never
 * followed) and classify (an answer's status, or why there was none). What follows an attempt is
 * retry.ts's decision; `settle` joins the two into the result the queue records.
 */
export class Dispatcher {
  readonly #keel: Keel;
  readonly #timeoutMs: number;
  readonly #stats: { attempted: number };
  /** Opened sealed values by context and ciphertext (a webhook's values are opened once, not per attempt). */
  readonly #opened = new Map<string, string>();

  constructor(keel: Keel, timeoutMs: number, stats: { attempted: number }) {
    this.#keel = keel;
    this.#timeoutMs = timeoutMs;
    this.#stats = stats;
  }

  #open(sealed: string, context: string): string {
    const key = `${context}|${sealed}`;
    let plain = this.#opened.get(key);
    if (plain === undefined) {
      plain = this.#keel.secrets.sealer.open(sealed, context);
      if (this.#opened.size >= 10_000) this.#opened.clear();
      this.#opened.set(key, plain);
    }
    return plain;
  }

  /** The URL and signed headers of an attempt made at `nowMs`: every secret still in its overlap signs. */
  #prepare(row: ClaimedDelivery, nowMs: number): { url: string; headers: Record<string, string> } {
    const secrets: string[] = [];
    if (row.secretSealed) secrets.push(this.#open(row.secretSealed, aad(row.webhookId, 'secret')));
    if (row.previousSecretSealed && row.previousSecretExpiresAt !== null && row.previousSecretExpiresAt > nowMs) {
      secrets.push(this.#open(row.previousSecretSealed, aad(row.webhookId, 'previous_secret')));
    }
    // Older rotated-out secrets, each until its own expiry (service.ts rotateSecret).
    if (row.olderSecretsSealed) {
      for (const s of JSON.parse(this.#open(row.olderSecretsSealed, aad(row.webhookId, 'older_secrets'))) as PreviousSecret[]) if (s.expiresAt > nowMs) secrets.push(s.secret);
    }
    const custom = row.headersSealed ? (JSON.parse(this.#open(row.headersSealed, aad(row.webhookId, 'headers'))) as CustomHeader[]) : [];
    const url = this.#open(row.urlSealed, aad(row.webhookId, 'url'));
    return { url, headers: deliveryHeaders({ deliveryId: row.id, eventId: row.eventId, eventType: row.eventType, body: row.body, secrets, nowMs, custom }) };
  }

  /** Makes one attempt; `signal` cancels it (the outcome is then `cancelled`). */
  async attempt(row: ClaimedDelivery, signal: AbortSignal): Promise<Attempt> {
    const { url, headers } = this.#prepare(row, clock.nowMs());
    this.#stats.attempted++;
    const started = performance.now();
    let outcome: AttemptOutcome;
    let responseStatus: number | null = null;
    let responseBody: string | null = null;
    let retryAfter: number | null = null;
    try {
      const res = await outboundRequest(
        url,
        { method: 'POST', headers, body: row.body, timeoutMs: this.#timeoutMs, maxResponseBytes: RESPONSE_READ_BYTES, truncate: true, signal },
        this.#keel.outbound,
      );
      responseStatus = res.status;
      responseBody = res.body.toString('utf8').slice(0, RESPONSE_BODY_CHARS);
      outcome = { kind: 'answered', status: res.status };
      if (res.status === 429) retryAfter = retryAfterMs(res.headers['retry-after'], clock.nowMs());
    } catch (err) {
      outcome = err instanceof OutboundError && err.code === 'aborted' ? { kind: 'cancelled' } : { kind: 'unreachable', error: describeFailure(err, this.#timeoutMs) };
    }
    return { outcome, responseStatus, responseBody, responseTimeMs: Math.round(performance.now() - started), attemptedAt: clock.nowMs(), retryAfterMs: retryAfter };
  }
}

/** The result to record for an attempt of `row` (retry.ts decides its status), or null when none happened (cancelled: the row is released). */
export function settle(row: ClaimedDelivery, attempt: Attempt): AttemptResult | null {
  const decision = decideRetry(attempt.outcome, row.attempts + 1, effectivePolicy(row.retryPolicy), attempt.attemptedAt);
  if (decision.status === 'released') return null;
  return {
    id: row.id,
    claimId: row.claimId,
    webhookId: row.webhookId,
    status: decision.status,
    nextRetryAt: decision.status === 'retrying' ? decision.nextRetryAt : null,
    responseStatus: attempt.responseStatus,
    responseBody: attempt.responseBody,
    responseTimeMs: attempt.responseTimeMs,
    errorMessage: decision.error,
    deliveredAt: decision.status === 'delivered' ? attempt.attemptedAt : null,
    attemptedAt: attempt.attemptedAt,
  };
}

/** Why no answer came, as the delivery's history shows it. */
function describeFailure(err: unknown, timeoutMs: number): string {
  if (err instanceof OutboundError) {
    // An unsafe URL at delivery fails the attempt without an HTTP request (docs/specification.md "Outbound targets").
    if (UNSAFE_TARGET_CODES.has(err.code)) return `Unsafe webhook URL: ${err.message}`;
    if (err.code === 'unresolvable') return `Unsafe webhook URL: it could not be validated (${err.message})`;
    if (err.code === 'timeout') return `Timed out: no complete answer within ${timeoutMs} ms`;
    return `Network error: ${err.message}`;
  }
  return `Network error: ${err instanceof Error ? err.message : String(err)}`;
}
