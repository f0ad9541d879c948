/**
 * Per-webhook throttling and a receiver's 429 (docs/decisions.md "Webhook throttling and stats"),
 * against real receivers, timed by the controllable clock: each receiver notes `clock.nowMs()` as a
 * request arrives, and the clock stands still between the test's steps, so an arrival's clock second
 * is the second its permit was taken in.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import type { Keel } from '../../src/keel.js';
import { openKeel } from '../../src/compose.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { webhooksOf } from '../../src/modules/webhooks/runtime.js';
import { MAX_RATE_LIMITED_STREAK, databasePermits, retryAfterMs } from '../../src/modules/webhooks/throttle.js';
import { startReceiver, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, engineOf, publish, type WebhookWorld } from './setup.js';

/** A receiver answering 200 and noting each arrival's clock time. */
async function clockedReceiver(): Promise<Receiver & { arrivals: number[] }> {
  const rx = await startReceiver();
  const arrivals: number[] = [];
  rx.behave((_req, res: ServerResponse) => {
    arrivals.push(clock.nowMs());
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
  return Object.assign(rx, { arrivals });
}

const perSecond = (arrivals: number[]): Map<number, number> => {
  const m = new Map<number, number>();
  for (const a of arrivals) m.set(Math.floor(a / 1000), (m.get(Math.floor(a / 1000)) ?? 0) + 1);
  return m;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (real time) until `check` holds. */
async function until(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`never: ${what}`);
    await sleep(10);
  }
}

/** A whole clock second a little ahead of now (the clock is frozen there). */
const wholeSecond = () => Math.ceil(Date.now() / 1000) * 1000 + 1000;

describe.skipIf(!backendAvailable())('webhook throttling and 429 holds', () => {
  let app: TestApp;
  let w: WebhookWorld;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWebhookWorld(app);
  });
  afterEach(() => clock.reset());
  afterAll(async () => {
    await app?.close();
  });

  it('rateLimitPerSecond is taken on create and PATCH (1..1000 or null) and read back', async () => {
    const rx = await startReceiver();
    try {
      const hook = await createHook(app, w.admin, { url: rx.url, rateLimitPerSecond: 25 });
      expect(hook.rateLimitPerSecond).toBe(25);
      expect((await createHook(app, w.admin, { url: rx.url })).rateLimitPerSecond).toBeNull();
      for (const bad of [0, 1001, 2.5, '10']) {
        const res = await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'x', url: rx.url, events: ['alert.triggered'], rateLimitPerSecond: bad } });
        expect(res.status, String(bad)).toBe(400);
      }
      const patched = await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { rateLimitPerSecond: 1000 } });
      expect(patched.body.rateLimitPerSecond).toBe(1000);
      const cleared = await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { rateLimitPerSecond: null } });
      expect(cleared.body.rateLimitPerSecond).toBeNull();
      expect((await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin })).body.rateLimitPerSecond).toBeNull();
      const audit = await app.api('GET', `/audit-logs?targetId=${hook.id}`, { token: w.admin });
      expect(audit.body.data.some((e: any) => e.action === 'webhook.update' && (e.changes ?? []).includes('rateLimitPerSecond'))).toBe(true);
    } finally {
      await rx.close();
    }
  });

  it('a webhook throttled at 10/s never gets more than 10 in a clock second; an unthrottled one beside it is not held', async () => {
    const type = 'device.offline';
    const slow = await clockedReceiver();
    const fast = await clockedReceiver();
    try {
      const throttled = await createHook(app, w.admin, { name: 'throttled', url: slow.url, events: [type], rateLimitPerSecond: 10 });
      await createHook(app, w.admin, { name: 'free', url: fast.url, events: [type] });
      const t0 = wholeSecond();
      clock.freeze(t0);
      const N = 35;
      for (let i = 0; i < N; i++) await publish(app, w.eventsKey, type, { i });
      // The unthrottled webhook gets all of them while the clock has not moved.
      await until(() => fast.arrivals.length === N, 'all arrivals at the unthrottled receiver');
      expect(fast.arrivals.every((a) => a === t0)).toBe(true);
      // The throttled one: its first second's ten, and no more however long the second lasts.
      await until(() => slow.arrivals.length >= 10, 'ten arrivals in the first second');
      await sleep(300);
      await engineOf(app).pumpNow();
      await sleep(200);
      expect(slow.arrivals.length).toBe(10);
      for (let s = 1; slow.arrivals.length < N; s++) {
        expect(s, 'seconds needed').toBeLessThanOrEqual(6);
        clock.advance(1_000);
        await engineOf(app).pumpNow();
        await until(() => slow.arrivals.length >= Math.min(N, 10 * (s + 1)), `arrivals by second ${s}`);
        await sleep(100);
      }
      const seconds = perSecond(slow.arrivals);
      for (const [second, n] of seconds) expect(n, `arrivals in second ${second}`).toBeLessThanOrEqual(10);
      expect([...seconds.values()]).toEqual([10, 10, 10, 5]);
      // Held, not failed: one attempt each.
      const deliveries = await deliveriesUntil(app, w.admin, throttled.id, (l) => l.length === N && l.every((d: any) => d.status === 'delivered'));
      expect(deliveries.every((d: any) => d.attempt === 1)).toBe(true);
    } finally {
      await slow.close();
      await fast.close();
    }
  });

  it('a throttled backlog larger than the claim window is held, not claimed and released in a loop', async () => {
    const type = 'device.offline';
    const slow = await clockedReceiver();
    try {
      await createHook(app, w.admin, { name: 'one a second', url: slow.url, events: [type], rateLimitPerSecond: 1 });
      clock.freeze(wholeSecond());
      // 20 rows, far more than the 4 (window × one slot) this process may hold for a webhook at 1/s.
      for (let i = 0; i < 20; i++) await publish(app, w.eventsKey, type, { i });
      await until(() => slow.arrivals.length >= 1, 'the first second\'s one arrival');
      const engine = engineOf(app);
      const before = { claims: engine.stats.claims, released: engine.stats.released };
      await sleep(500);
      await engine.pumpNow();
      await sleep(300);
      // Held rows wait for their permits: a claim or two, no stream of claims and releases (it spun at 100 % CPU).
      expect(engine.stats.released - before.released).toBeLessThanOrEqual(2);
      expect(engine.stats.claims - before.claims).toBeLessThanOrEqual(4);
      expect(slow.arrivals.length).toBe(1);
    } finally {
      await slow.close();
    }
  });

  it('a 429 with Retry-After: 30 holds the webhook\'s deliveries until the clock passes it, without counting an attempt', async () => {
    const type = 'alert.resolved';
    const rx = await startReceiver();
    const arrivals: number[] = [];
    let answer = 429;
    rx.behave((_req, res) => {
      arrivals.push(clock.nowMs());
      res.writeHead(answer, { 'content-type': 'text/plain', ...(answer === 429 ? { 'retry-after': '30' } : {}) });
      res.end(answer === 429 ? 'slow down' : 'ok');
    });
    try {
      const hook = await createHook(app, w.admin, { url: rx.url, events: [type] });
      const t0 = wholeSecond();
      clock.freeze(t0);
      await publish(app, w.eventsKey, type, { n: 1 });
      const [held] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].responseStatus === 429);
      expect(held).toMatchObject({ status: 'pending', attempt: 0, nextAttemptAt: new Date(t0 + 30_000).toISOString() });
      expect(held.errorMessage).toContain('Retry-After');
      // A new event while held waits too.
      await publish(app, w.eventsKey, type, { n: 2 });
      await sleep(300);
      clock.advance(29_000);
      await engineOf(app).pumpNow();
      await sleep(300);
      expect(arrivals).toEqual([t0]);
      answer = 200;
      clock.advance(1_001);
      await engineOf(app).pumpNow();
      const done = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 2 && l.every((d: any) => d.status === 'delivered'));
      expect(done.map((d: any) => d.attempt)).toEqual([1, 1]);
      expect(arrivals.slice(1).every((a) => a >= t0 + 30_000)).toBe(true);
      const read = await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin });
      expect(read.body.failureCount).toBe(0);
    } finally {
      await rx.close();
    }
  });

  it(`after ${MAX_RATE_LIMITED_STREAK} holds in a row, the next 429 counts as a failed attempt`, async () => {
    const type = 'alert.acknowledged';
    const rx = await startReceiver();
    rx.behave((_req, res) => {
      res.writeHead(429, { 'retry-after': '2' });
      res.end('no');
    });
    try {
      const hook = await createHook(app, w.admin, { url: rx.url, events: [type], retryPolicy: { maxRetries: 3, initialDelayMs: 60_000 } });
      clock.freeze(wholeSecond());
      await publish(app, w.eventsKey, type, {});
      for (let i = 1; i <= MAX_RATE_LIMITED_STREAK; i++) {
        await rx.waitFor(i);
        await deliveriesUntil(app, w.admin, hook.id, (l) => l[0]?.responseStatus === 429 && l[0].attempt === 0 && Date.parse(l[0].nextAttemptAt) > clock.nowMs());
        clock.advance(2_001);
        await engineOf(app).pumpNow();
      }
      const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l[0]?.attempt === 1);
      expect(d).toMatchObject({ status: 'retrying', responseStatus: 429, errorMessage: 'HTTP 429' });
      expect(rx.received).toHaveLength(MAX_RATE_LIMITED_STREAK + 1);
    } finally {
      await rx.close();
    }
  });

  it('Retry-After is read as seconds or an HTTP date, at least 1 s and at most an hour; anything else is not a hold', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('30', now)).toBe(30_000);
    expect(retryAfterMs('0', now)).toBe(1_000);
    expect(retryAfterMs('86400', now)).toBe(3_600_000);
    expect(retryAfterMs('Thu, 01 Jan 2026 00:02:00 GMT', now)).toBe(120_000);
    expect(retryAfterMs('Wed, 31 Dec 2025 00:00:00 GMT', now)).toBe(1_000);
    for (const bad of [undefined, '', 'soon', '-5', '1.5', '2026-01-01']) expect(retryAfterMs(bad, now), String(bad)).toBeNull();
  });

  raceTest('twenty concurrent permit takes of one webhook and second share its limit of 5', async () => {
    const hook = await createHook(app, w.admin, { url: 'http://127.0.0.1:9/', rateLimitPerSecond: 5 });
    const permits = databasePermits(app.server.keel.db);
    const got = await together(20, () => permits.take(hook.id, 5, 1, 1_000_000));
    expect(got.reduce((a, b) => a + b, 0)).toBe(5);
    // The next second starts again.
    expect(await permits.take(hook.id, 5, 10, 1_000_001)).toBe(5);
  });

  describe.skipIf(backend !== 'postgres')('two processes', () => {
    let second: Keel | null = null;
    afterAll(async () => {
      await second?.close();
    });

    it('share the limit: two workers together never send more than 5 in a clock second', async () => {
      const keel = app.server.keel;
      const type = 'device.online';
      const rx = await clockedReceiver();
      try {
        const hook = await createHook(app, w.admin, { url: rx.url, events: [type], rateLimitPerSecond: 5 });
        await webhooksOf(keel).stopWorker();
        await transaction(keel.db, async (tx) => {
          for (let i = 0; i < 40; i++) await keel.events.publish(tx, type, w.orgId, { deviceId: `d-${i}`, hostname: `h-${i}` });
        });
        second = await openKeel({ config: { ...keel.config }, log: keel.log, skipMigrate: true });
        const a = webhooksOf(keel);
        const b = webhooksOf(second);
        clock.freeze(wholeSecond());
        await Promise.all([a.startWorker(), b.startWorker()]);
        await until(() => rx.arrivals.length >= 5, 'five arrivals');
        await sleep(300);
        expect(rx.arrivals, 'arrivals in the first second').toHaveLength(5);
        for (let s = 1; rx.arrivals.length < 40; s++) {
          expect(s, 'seconds needed').toBeLessThanOrEqual(10);
          await sleep(200);
          clock.advance(1_000);
          await Promise.all([a.engine.pumpNow(), b.engine.pumpNow()]);
          await until(() => rx.arrivals.length >= Math.min(40, 5 * (s + 1)), `arrivals by second ${s}`);
        }
        await sleep(200);
        const seconds = perSecond(rx.arrivals);
        for (const [sec, n] of seconds) expect(n, `arrivals in second ${sec}`).toBeLessThanOrEqual(5);
        expect(rx.arrivals).toHaveLength(40);
        expect(a.engine.stats.claimed).toBeGreaterThan(0);
        expect(b.engine.stats.claimed).toBeGreaterThan(0);
        await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 40 && l.every((d: any) => d.status === 'delivered' && d.attempt === 1));
        await b.stopWorker();
      } finally {
        await rx.close();
      }
    }, 120_000);
  });
});
