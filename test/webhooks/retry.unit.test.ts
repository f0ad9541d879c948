/**
 * What follows an attempt (src/modules/webhooks/retry.ts), without a database or a receiver: the
 * schedule per attempt under the default and a webhook's own policy, the last attempt as a dead
 * letter, every failure status alike, a cancelled attempt released uncounted, and the automatic move
 * of a webhook to `error` (at least 10 dead letters over 24 hours).
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY_POLICY, effectivePolicy } from '../../src/modules/webhooks/model.js';
import { AUTO_FAIL_MIN_DEAD, AUTO_FAIL_WINDOW_MS, answerFailure, decideRetry, webhookAfter, type AttemptOutcome } from '../../src/modules/webhooks/retry.js';

const AT = Date.parse('2026-05-01T12:00:00.000Z');
const HOUR = 60 * 60 * 1000;
const answered = (status: number): AttemptOutcome => ({ kind: 'answered', status });
const REFUSED = 'Network error: connect ECONNREFUSED 127.0.0.1:9';
const down: AttemptOutcome = { kind: 'unreachable', error: REFUSED };

describe('retry decision', () => {
  it('a 2xx delivers, on any attempt, the last one included', () => {
    for (const status of [200, 201, 204, 299]) expect(decideRetry(answered(status), 1, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'delivered', error: null });
    expect(decideRetry(answered(200), DEFAULT_RETRY_POLICY.maxRetries + 1, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'delivered', error: null });
  });

  it('the default schedule: retries 1 s, 2 s, 4 s, 8 s, 16 s after attempts 1 to 5; the 6th failure is a dead letter', () => {
    const next = [1, 2, 3, 4, 5].map((attempt) => {
      const d = decideRetry(down, attempt, DEFAULT_RETRY_POLICY, AT);
      expect(d.status).toBe('retrying');
      return d.status === 'retrying' ? d.nextRetryAt - AT : null;
    });
    expect(next).toEqual([1_000, 2_000, 4_000, 8_000, 16_000]);
    expect(decideRetry(down, 6, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'failed', error: REFUSED });
  });

  it("a webhook's own policy: its multiplier, capped by maxDelayMs; maxRetries 0 dead-letters the first failure", () => {
    const policy = effectivePolicy({ maxRetries: 4, initialDelayMs: 500, backoffMultiplier: 3, maxDelayMs: 5_000 });
    const next = [1, 2, 3, 4].map((attempt) => {
      const d = decideRetry(answered(500), attempt, policy, AT);
      return d.status === 'retrying' ? d.nextRetryAt - AT : d.status;
    });
    expect(next).toEqual([500, 1_500, 4_500, 5_000]);
    expect(decideRetry(answered(500), 5, policy, AT).status).toBe('failed');
    expect(decideRetry(answered(500), 1, effectivePolicy({ maxRetries: 0 }), AT)).toEqual({ status: 'failed', error: 'HTTP 500' });
  });

  it('the extended schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, each within ±10 % by its random draw; the 8th failure is a dead letter', () => {
    const extended = effectivePolicy({ schedule: 'extended' });
    const base = [5_000, 5 * 60_000, 30 * 60_000, 2 * HOUR, 5 * HOUR, 10 * HOUR, 10 * HOUR];
    for (const [i, delay] of base.entries()) {
      const at = (draw: number) => decideRetry(answered(503), i + 1, extended, AT, () => draw);
      expect(at(0)).toEqual({ status: 'retrying', error: 'HTTP 503', nextRetryAt: AT + Math.round(delay * 0.9) });
      expect(at(0.5)).toMatchObject({ nextRetryAt: AT + delay });
      expect(at(0.999999)).toMatchObject({ nextRetryAt: AT + Math.round(delay * 1.1 - delay * 0.2 * 0.000001) });
    }
    expect(decideRetry(answered(503), 8, extended, AT, () => 0.5)).toEqual({ status: 'failed', error: 'HTTP 503' });
    // Named, it ignores any number stored beside it.
    expect(effectivePolicy({ schedule: 'extended', maxRetries: 1 }).maxRetries).toBe(7);
  });

  it('every failure status is retried alike (410, 429 and 503 included; Retry-After is not read); a 3xx is a failure, never followed', () => {
    for (const status of [400, 404, 410, 429, 500, 503]) {
      expect(decideRetry(answered(status), 2, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'retrying', error: `HTTP ${status}`, nextRetryAt: AT + 2_000 });
    }
    expect(decideRetry(answered(301), 1, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'retrying', error: 'HTTP 301: redirects are not followed', nextRetryAt: AT + 1_000 });
    expect(answerFailure(100)).toBe('HTTP 100');
    expect(answerFailure(204)).toBeNull();
  });

  it('a cancelled attempt is released: no status, no retry, whatever its number', () => {
    expect(decideRetry({ kind: 'cancelled' }, 1, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'released' });
    expect(decideRetry({ kind: 'cancelled' }, 99, DEFAULT_RETRY_POLICY, AT)).toEqual({ status: 'released' });
  });
});

describe('automatic move to error', () => {
  const active = { active: true, streak: 0, failingSince: null };

  it('is 10 dead letters over 24 hours', () => {
    expect(AUTO_FAIL_MIN_DEAD).toBe(10);
    expect(AUTO_FAIL_WINDOW_MS).toBe(24 * HOUR);
  });

  it('the first dead letter starts the window; the streak counts dead letters; a delivery clears both', () => {
    const first = webhookAfter(active, { delivered: 0, dead: 1 }, AT);
    expect(first).toEqual({ active: true, streak: 1, failingSince: AT, autoFail: false });
    const later = webhookAfter(first, { delivered: 0, dead: 3 }, AT + HOUR);
    expect(later).toEqual({ active: true, streak: 4, failingSince: AT, autoFail: false });
    // Retries that are not dead letters leave the state as it was.
    expect(webhookAfter(later, { delivered: 0, dead: 0 }, AT + 2 * HOUR)).toEqual({ ...later, autoFail: false });
    expect(webhookAfter(later, { delivered: 1, dead: 5 }, AT + 2 * HOUR)).toEqual({ active: true, streak: 0, failingSince: null, autoFail: false });
  });

  it('needs exactly 10: 9 dead letters 24 hours on stay active, the 10th moves it', () => {
    const nine = { active: true, streak: 8, failingSince: AT };
    const ninth = webhookAfter(nine, { delivered: 0, dead: 1 }, AT + 24 * HOUR);
    expect(ninth).toMatchObject({ streak: 9, autoFail: false, active: true });
    expect(webhookAfter(ninth, { delivered: 0, dead: 1 }, AT + 24 * HOUR)).toEqual({ active: false, streak: 10, failingSince: AT, autoFail: true });
  });

  it('needs the whole 24 hours: 10 or more dead letters within them stay active', () => {
    const many = { active: true, streak: 50, failingSince: AT };
    expect(webhookAfter(many, { delivered: 0, dead: 1 }, AT + 24 * HOUR - 1).autoFail).toBe(false);
    expect(webhookAfter(many, { delivered: 0, dead: 1 }, AT + 24 * HOUR).autoFail).toBe(true);
  });

  it('moves only an active webhook, and only on a batch with a dead letter', () => {
    const old = { streak: 20, failingSince: AT - 48 * HOUR };
    expect(webhookAfter({ ...old, active: false }, { delivered: 0, dead: 1 }, AT).autoFail).toBe(false);
    expect(webhookAfter({ ...old, active: true }, { delivered: 0, dead: 0 }, AT).autoFail).toBe(false);
    expect(webhookAfter({ ...old, active: true }, { delivered: 0, dead: 1 }, AT).autoFail).toBe(true);
  });
});
