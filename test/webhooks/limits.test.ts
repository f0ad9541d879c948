/**
 * Receivers that misbehave: a hung receiver, a trickling one, a 3xx, a
 * connection reset and a 10 MB answer are each handled within the limits (one overall deadline per
 * attempt, a small read cap, redirects never followed); a slow receiver never holds up another
 * webhook's deliveries. The attempt deadline is WEBHOOK_TIMEOUT_MS (30 s by default, 1.5 s here).
 */
import type { ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { loadConfig } from '../../src/config.js';
import { RESPONSE_BODY_CHARS } from '../../src/modules/webhooks/engine.js';
import { startReceiver, status, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from './setup.js';

const TIMEOUT_MS = 1_500;

describe.skipIf(!backendAvailable())('webhook delivery limits', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let other: Receiver;
  const open = new Set<ServerResponse>();

  beforeAll(async () => {
    app = await startTestApp({ env: { WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS) } });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
    other = await startReceiver();
  });
  afterEach(() => {
    for (const res of open) res.destroy();
    open.clear();
    rx.behave(status(200));
  });
  afterAll(async () => {
    await rx.close();
    await other.close();
    await app.close();
  });

  const oneShot = (event: string) => createHook(app, w.admin, { url: rx.url, events: [event], retryPolicy: { maxRetries: 0 } });

  it('the default attempt deadline is 30,000 ms', () => {
    expect(loadConfig({}).WEBHOOK_TIMEOUT_MS).toBe(30_000);
  });

  it('a hung receiver: the attempt ends at the deadline as a failure', async () => {
    const hook = await oneShot('device.offline');
    rx.behave((_r, res) => {
      open.add(res); // never answers
    });
    await publish(app, w.eventsKey, 'device.offline', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'failed');
    expect(d.errorMessage).toBe(`Timed out: no complete answer within ${TIMEOUT_MS} ms`);
    expect(d.responseStatus).toBeNull();
    // Not cut short (Keel's own measure); the message above says the deadline ended it (no wall-clock upper bound:
    // a loaded machine may run the timer late).
    expect(d.responseTimeMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
  });

  it('a trickling receiver (headers, then a byte every 100 ms) cannot hold an attempt past the deadline', async () => {
    const hook = await oneShot('device.updated');
    // The trickle never ends by itself: a connection that closes while it is still writing was cut by Keel.
    let cut: (stillWriting: boolean) => void = () => undefined;
    const closed = new Promise<boolean>((resolve) => (cut = resolve));
    rx.behave((_r, res) => {
      open.add(res);
      res.writeHead(200, { 'content-type': 'text/plain' });
      const t = setInterval(() => (res.destroyed ? clearInterval(t) : res.write('.')), 100);
      res.on('close', () => {
        clearInterval(t);
        cut(!res.writableEnded);
      });
    });
    await publish(app, w.eventsKey, 'device.updated', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'failed');
    expect(d.errorMessage).toBe(`Timed out: no complete answer within ${TIMEOUT_MS} ms`);
    expect(await closed).toBe(true);
  });

  it('a 3xx is a failed attempt: the redirect is not followed', async () => {
    const hook = await oneShot('device.enrolled');
    rx.behave(status(302, 'moved', { location: other.url }));
    await publish(app, w.eventsKey, 'device.enrolled', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'failed');
    expect(d).toMatchObject({ responseStatus: 302, errorMessage: 'HTTP 302: redirects are not followed', responseBody: 'moved' });
    expect(other.received).toHaveLength(0);
  });

  it('a connection reset is a failed attempt (network error), retried', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['device.decommissioned'] });
    rx.behave((_r, _res, raw) => {
      raw.socket.destroy();
    });
    await publish(app, w.eventsKey, 'device.decommissioned', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'retrying');
    expect(d.errorMessage).toMatch(/^Network error: /);
    expect(d.responseStatus).toBeNull();
    expect(d.nextAttemptAt).toEqual(expect.any(String));
  });

  it('a 10 MB answer: delivered, 1,000 characters kept, the rest never read', async () => {
    const hook = await oneShot('alert.acknowledged');
    let finished: boolean | null = null;
    const closed = new Promise<void>((resolve) => {
      rx.behave((_r, res) => {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(10 * 1024 * 1024) });
        const chunk = Buffer.alloc(64 * 1024, 'x');
        let sent = 0;
        const pump = (): void => {
          while (sent < 10 * 1024 * 1024) {
            sent += chunk.length;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          res.end();
        };
        res.on('close', () => {
          finished = res.writableFinished;
          resolve();
        });
        pump();
      });
    });
    await publish(app, w.eventsKey, 'alert.acknowledged', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered');
    expect(d.responseStatus).toBe(200);
    expect(d.responseBody).toBe('x'.repeat(RESPONSE_BODY_CHARS));
    await closed;
    // Keel closed the connection long before the receiver could write 10 MB.
    expect(finished).toBe(false);
  });

  it('one hung receiver never holds up another webhook', async () => {
    const slow = await createHook(app, w.admin, { url: rx.url, events: ['script.started'] });
    const fast = await createHook(app, w.admin, { url: other.url, events: ['script.started'] });
    let hanging = 0;
    rx.behave((r, res) => {
      if (r.headers['x-service-event-type'] === 'script.started') hanging++;
      open.add(res);
    });
    const events = [];
    for (let i = 0; i < 30; i++) events.push(await publish(app, w.eventsKey, 'script.started', { i }));
    // Every event reaches the fast receiver while the slow one still holds its requests open.
    await other.waitFor(30, (r) => r.headers['x-service-event-type'] === 'script.started', 10_000);
    expect(hanging).toBeGreaterThan(0);
    expect(hanging).toBeLessThanOrEqual(8); // WEBHOOK_CONCURRENCY_PER_WEBHOOK
    const fastDone = await deliveriesUntil(app, w.admin, fast.id, (l) => l.length === 30 && l.every((d: any) => d.status === 'delivered'));
    expect(fastDone).toHaveLength(30);
    const slowNow = await app.api('GET', `/webhooks/${slow.id}/deliveries?limit=100`, { token: w.admin });
    expect(slowNow.body.data.filter((d: any) => d.status === 'delivered')).toHaveLength(0);
    expect(events).toHaveLength(30);
  });
});
