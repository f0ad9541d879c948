/**
 * PostgreSQL is the queue: two Keel instances on one PostgreSQL never make the same
 * attempt twice (5,000 deliveries, every arrival counted), and a flushed Redis loses nothing (its
 * lists only hint; the rows are the truth). PostgreSQL project only: PGlite has one session, so a race
 * there cannot fail.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { flushRedis } from '../helpers/backends.js';
import { raceTest } from '../helpers/race.js';
import type { Keel } from '../../src/keel.js';
import { openKeel } from '../../src/compose.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { DELIVERY_LIST } from '../../src/modules/webhooks/engine.js';
import { webhooksOf } from '../../src/modules/webhooks/runtime.js';
import { startReceiver, status, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from './setup.js';

describe.skipIf(!backendAvailable() || backend !== 'postgres')('race: the delivery queue on PostgreSQL', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let second: Keel | null = null;

  beforeAll(async () => {
    app = await startTestApp();
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await second?.close();
    await rx.close();
    await app.close();
  });

  raceTest('two workers never make the same attempt twice: 5,000 deliveries, 5,000 arrivals', async () => {
    const keel = app.server.keel;
    const hooks = [];
    for (let i = 0; i < 10; i++) hooks.push(await createHook(app, w.admin, { url: rx.url, events: ['device.online'], name: `fan-${i}` }));
    await webhooksOf(keel).stopWorker();
    // 500 events × 10 webhooks, committed while no worker runs.
    await transaction(keel.db, async (tx) => {
      for (let i = 0; i < 500; i++) await keel.events.publish(tx, 'device.online', w.orgId, { deviceId: `d-${i}`, hostname: `host-${i}` });
    });
    const [{ n }] = (await keel.database.query<{ n: number }>(`select count(*)::int as n from webhook_deliveries where event_type = 'device.online'`)) as [{ n: number }];
    expect(n).toBe(5_000);

    second = await openKeel({ config: { ...keel.config }, log: keel.log, skipMigrate: true });
    const a = webhooksOf(keel);
    const b = webhooksOf(second);
    await Promise.all([a.startWorker(), b.startWorker()]);
    const deadline = Date.now() + 90_000;
    for (;;) {
      const [row] = await keel.database.query<{ left: number }>(`select count(*)::int as left from webhook_deliveries where event_type = 'device.online' and status <> 'delivered'`);
      if (row?.left === 0) break;
      if (Date.now() > deadline) throw new Error(`${row?.left} deliveries not delivered; ${rx.received.length} arrivals`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // Every row is delivered and holds no lease: no attempt can still be on its way.
    const arrivals = rx.received.filter((r) => r.headers['x-service-event-type'] === 'device.online');
    const ids = arrivals.map((r) => r.headers['x-service-delivery-id']);
    expect(arrivals).toHaveLength(5_000);
    expect(new Set(ids).size).toBe(5_000);
    const attempts = await keel.database.query<{ attempts: number; n: number }>(
      `select attempts, count(*)::int as n from webhook_deliveries where event_type = 'device.online' group by attempts`,
    );
    expect(attempts).toEqual([{ attempts: 1, n: 5_000 }]);
    // Both took part.
    expect(a.engine.stats.attempted).toBeGreaterThan(0);
    expect(b.engine.stats.attempted).toBeGreaterThan(0);
    expect(a.engine.stats.attempted + b.engine.stats.attempted).toBe(5_000);
    const counters = await keel.db.execute(sql`select sum(success_count)::int as ok from webhooks where name like 'fan-%'`);
    expect((counters as { rows: { ok: number }[] }).rows[0]!.ok).toBe(5_000);
    expect(hooks).toHaveLength(10);
    await b.stopWorker();
  }, 150_000);

  it('a Redis hint wakes another process\'s worker, which looks its deliveries up; a worker does not look up its own hints', async () => {
    const keel = app.server.keel;
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['remote.session.started'] });
    const other = await openKeel({ config: { ...keel.config }, log: keel.log, skipMigrate: true });
    try {
      const mine = webhooksOf(keel);
      const theirs = webhooksOf(other);
      await mine.stopWorker();
      await theirs.startWorker();
      // No worker here: the rows are routed unclaimed and announced through Redis; the other process delivers.
      const looked = theirs.engine.stats.hintLookups;
      const first = await publish(app, w.eventsKey, 'remote.session.started', { n: 1 });
      await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === first.id);
      expect(theirs.engine.stats.hintLookups).toBeGreaterThan(looked);
      await theirs.stopWorker();

      // Only this worker, its webhook failing (so new rows are routed unclaimed and announced): it pops its own hints and looks nothing up.
      await mine.startWorker();
      rx.behave(status(500, 'down'));
      await publish(app, w.eventsKey, 'remote.session.started', { n: 2 });
      await deliveriesUntil(app, w.admin, hook.id, (l) => l.some((d: any) => d.status === 'retrying'));
      const mineLooked = mine.engine.stats.hintLookups;
      const third = await publish(app, w.eventsKey, 'remote.session.started', { n: 3 });
      await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === third.id);
      // The hint was pushed and popped (the list is empty again) without a lookup.
      await expect.poll(() => keel.redis!.llen(DELIVERY_LIST), { timeout: 60_000 }).toBe(0);
      expect(mine.engine.stats.hintLookups).toBe(mineLooked);
    } finally {
      rx.behave(status(200, 'ok'));
      await other.close();
      await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin });
    }
  });

  it('a flushed Redis loses nothing: the rows are the queue', async () => {
    const keel = app.server.keel;
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['session.login'] });
    await webhooksOf(keel).stopWorker();
    const events = [];
    for (let i = 0; i < 20; i++) events.push((await publish(app, w.eventsKey, 'session.login', { i })).id as string);
    expect(await keel.redis!.llen(DELIVERY_LIST)).toBeGreaterThan(0);
    await flushRedis();
    expect(await keel.redis!.llen(DELIVERY_LIST)).toBe(0);
    await webhooksOf(keel).startWorker();
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 20 && l.every((d: any) => d.status === 'delivered'));
    for (const id of events) expect(rx.received.filter((r) => r.headers['x-service-event-id'] === id)).toHaveLength(1);
  });
});
