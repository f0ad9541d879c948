/**
 * Publishing under load stores the event; routing follows (docs/decisions.md "Publishing under load
 * stores the event; routing follows"). While the API is saturated (requests wait and the event loop
 * has no time to spare), `POST /events` answers once its event is stored in the inbox, and the router
 * routes the inbox a few events at a time until it is not; each event is routed once, whichever
 * process takes it.
 */
import type { Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { raceTest } from '../helpers/race.js';
import { holdRequests, saturate } from '../helpers/load.js';
import type { Keel } from '../../src/keel.js';
import { openKeel } from '../../src/compose.js';
import { clock } from '../../src/platform/clock.js';
import { RequestLoad } from '../../src/platform/http/load.js';
import { BUSY_ROUTE_EVENTS, BUSY_ROUTE_INTERVAL_MS } from '../../src/modules/webhooks/inbox.js';
import { routeInbox, routerStats } from '../../src/modules/webhooks/routing.js';
import { webhooksOf } from '../../src/modules/webhooks/runtime.js';
import { startReceiver, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, publish, type WebhookWorld } from './setup.js';

const SCRAPE_TOKEN = 'scrape-token-0123456789abcdef';

/** The inbox gauge as a scraper reads it. */
async function inboxGauge(app: TestApp): Promise<number> {
  const res = await app.request<string>('GET', '/metrics', { headers: { authorization: `Bearer ${SCRAPE_TOKEN}` } });
  expect(res.status).toBe(200);
  const line = res.body.split('\n').find((l) => l.startsWith('keel_webhook_inbox_depth '));
  return Number(line?.split(' ')[1]);
}

async function inboxCount(keel: Keel): Promise<number> {
  const [row] = await keel.database.query<{ n: number }>('select count(*)::int as n from webhook_inbox');
  return row?.n ?? 0;
}

async function deliveryCount(keel: Keel, eventIds: string[]): Promise<number> {
  const [row] = await keel.database.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where event_id in (${eventIds.map((id) => `'${id}'`).join(', ')})`);
  return row?.n ?? 0;
}

describe.skipIf(!backendAvailable())('publishing under load', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let held: Socket[] = [];
  let unsaturate = (): void => undefined;

  beforeAll(async () => {
    app = await startTestApp({ env: { METRICS_ENABLED: 'true', METRICS_TOKEN: SCRAPE_TOKEN } });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterEach(() => {
    unsaturate();
    for (const s of held) s.destroy();
    held = [];
    clock.reset();
  });
  afterAll(async () => {
    await rx?.close();
    await app?.close();
  });

  it('answers 202 once the event is stored while the API is saturated; the router takes a few events per interval until it is not, then the rest; each arrives once', async () => {
    const keel = app.server.keel;
    const hooks = [await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] }), await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] })];
    const router = webhooksOf(keel).router.router;
    const stats = routerStats(keel);
    const before = { ...stats };
    clock.freeze();
    held = await holdRequests(app, RequestLoad.BUSY_AT, '/events', { Authorization: `Bearer ${w.eventsKey}` });
    unsaturate = saturate();
    await expect.poll(() => keel.requests.saturated, { timeout: 20_000 }).toBe(true);

    // With the router stopped, the publishes are still answered: their events are stored, nothing is routed.
    await router.stop();
    const n = 20;
    const events = await Promise.all(Array.from({ length: n }, (_, i) => publish(app, w.eventsKey, 'script.completed', { seq: i })));
    const ids = events.map((e) => e.id as string);
    expect(await inboxCount(keel)).toBe(n);
    expect(await inboxGauge(app)).toBe(n);
    expect(await deliveryCount(keel, ids)).toBe(0);
    expect(stats.inboxStatements).toBeGreaterThan(before.inboxStatements);
    expect(stats.batchedEvents - before.batchedEvents).toBe(n);

    // Started while the requests wait, on a frozen clock: one small statement, then it waits for the interval.
    router.start();
    await expect.poll(() => inboxCount(keel)).toBe(n - BUSY_ROUTE_EVENTS);
    expect(await deliveryCount(keel, ids)).toBe(BUSY_ROUTE_EVENTS * hooks.length);
    // The oldest first.
    const routed = await keel.database.query<{ event_id: string }>(`select distinct event_id from webhook_deliveries where event_id in (${ids.map((id) => `'${id}'`).join(', ')})`);
    expect(routed.map((r) => r.event_id).sort()).toEqual(ids.slice(0, BUSY_ROUTE_EVENTS).sort());
    clock.advance(BUSY_ROUTE_INTERVAL_MS);
    await expect.poll(() => inboxCount(keel)).toBe(n - 2 * BUSY_ROUTE_EVENTS);

    // A publish meanwhile is stored too (the router is woken, and waits like the rest).
    const late = await publish(app, w.eventsKey, 'script.completed', { seq: n });
    ids.push(late.id as string);
    expect(await inboxCount(keel)).toBe(n + 1 - 2 * BUSY_ROUTE_EVENTS);

    // The flood ends: the rest is routed at once, and every event arrives once at each webhook.
    unsaturate();
    for (const s of held) s.destroy();
    held = [];
    await expect.poll(() => keel.requests.active).toBe(0);
    await expect.poll(() => inboxCount(keel)).toBe(0);
    expect(await inboxGauge(app)).toBe(0);
    expect(await deliveryCount(keel, ids)).toBe(ids.length * hooks.length);
    clock.reset();
    const got = await rx.waitFor(ids.length * hooks.length, (x) => ids.includes(x.headers['x-service-event-id'] as string));
    expect(new Set(got.map((x) => x.headers['x-service-delivery-id'])).size).toBe(ids.length * hooks.length);
    for (const [i, id] of ids.entries()) {
      const arrived = got.filter((g) => g.headers['x-service-event-id'] === id);
      expect(arrived).toHaveLength(hooks.length);
      for (const x of arrived) expect(JSON.parse(x.body)).toMatchObject({ id, type: 'script.completed', orgId: w.orgId, data: { seq: i } });
    }

    // Quiet again: a publish is routed before its 202.
    await expect.poll(() => keel.requests.saturated, { timeout: 20_000 }).toBe(false);
    const quiet = await publish(app, w.eventsKey, 'script.completed', { seq: 'quiet' });
    expect(await deliveryCount(keel, [quiet.id as string])).toBe(hooks.length);
    for (const hook of hooks) expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin })).status).toBe(204);
  });

  it('a busy event loop with few requests waiting is not saturation: a publish is still routed before its 202', async () => {
    const keel = app.server.keel;
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] });
    // The steady trickle beside background work (200 events/s to ten webhooks runs the loop 70-85 % busy).
    await expect.poll(() => keel.requests.busy, { timeout: 20_000 }).toBe(false);
    held = await holdRequests(app, RequestLoad.BUSY_AT - 2, '/events', { Authorization: `Bearer ${w.eventsKey}` });
    unsaturate = saturate();
    await expect.poll(() => keel.requests.utilization(), { timeout: 20_000 }).toBeGreaterThanOrEqual(RequestLoad.SATURATED_AT);
    expect(keel.requests.saturated).toBe(false);
    const event = await publish(app, w.eventsKey, 'script.completed', { seq: 'trickle' });
    expect(await deliveryCount(keel, [event.id as string])).toBe(1);
    unsaturate();
    expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin })).status).toBe(204);
  });

  it('counts every request until its answer is sent or its connection closes, refused and unknown ones too', async () => {
    const keel = app.server.keel;
    await expect.poll(() => keel.requests.active).toBe(0);
    const answers = await Promise.all([
      app.api('GET', '/users/me', { token: w.admin }),
      app.api('GET', '/no-such-route', { token: w.admin }),
      app.api('POST', '/events', { token: w.eventsKey, body: { type: 'script.exploded', data: {} } }),
      app.api('GET', '/users/me'),
    ]);
    expect(answers.map((a) => a.status)).toEqual([200, 404, 400, 401]);
    held = await holdRequests(app, 2, '/events', { Authorization: `Bearer ${w.eventsKey}` });
    for (const s of held) s.destroy();
    held = [];
    await expect.poll(() => keel.requests.active).toBe(0);
  });
});

describe.skipIf(!backendAvailable() || backend !== 'postgres')('race: routing the inbox from two processes', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let second: Keel | null = null;
  let held: Socket[] = [];

  beforeAll(async () => {
    app = await startTestApp();
    w = await createWebhookWorld(app);
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    await second?.close();
    await app.close();
  });

  raceTest('two processes routing one inbox at once route each event exactly once', async () => {
    const keel = app.server.keel;
    // Receivers are not needed: the engines do not run, the rows wait for a claim.
    const hooks = [await createHook(app, w.admin, { url: 'http://127.0.0.1:9/a', events: ['device.online'] }), await createHook(app, w.admin, { url: 'http://127.0.0.1:9/b', events: ['device.online'] })];
    await webhooksOf(keel).stopWorker();
    second = await openKeel({ config: { ...keel.config }, log: keel.log, skipMigrate: true });
    await webhooksOf(keel).router.router.stop();
    await webhooksOf(second).router.router.stop();
    const n = 300;
    held = await holdRequests(app, RequestLoad.BUSY_AT, '/events', { Authorization: `Bearer ${w.eventsKey}` });
    const unsaturate = saturate();
    await expect.poll(() => keel.requests.saturated, { timeout: 20_000 }).toBe(true);
    const events = await Promise.all(Array.from({ length: n }, (_, i) => publish(app, w.eventsKey, 'device.online', { deviceId: `d-${i}`, hostname: `h-${i}` })));
    unsaturate();
    for (const s of held) s.destroy();
    expect(await inboxCount(keel)).toBe(n);

    // Both processes take 7 at a time, 30 statements in flight each, until the inbox is empty.
    const take = async (k: Keel): Promise<number> => {
      let total = 0;
      for (;;) {
        const taken = await routeInbox(k, 7);
        total += taken;
        if (taken === 0) return total;
      }
    };
    const totals = await Promise.all([...Array.from({ length: 30 }, () => take(keel)), ...Array.from({ length: 30 }, () => take(second as Keel))]);
    expect(totals.reduce((a, b) => a + b, 0)).toBe(n);
    expect(await inboxCount(keel)).toBe(0);
    const rows = await keel.database.query<{ event_id: string; webhook_id: string; n: number }>(
      `select event_id, webhook_id, count(*)::int as n from webhook_deliveries where event_type = 'device.online' group by event_id, webhook_id`,
    );
    expect(rows).toHaveLength(n * hooks.length);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(new Set(rows.map((r) => r.event_id))).toEqual(new Set(events.map((e) => e.id as string)));
    const [payloads] = await keel.database.query<{ n: number }>(`select count(*)::int as n from webhook_payloads where event_type = 'device.online'`);
    expect(payloads?.n).toBe(n);
  });
});
