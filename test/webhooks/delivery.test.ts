/**
 * Deliveries against real receivers: the exact body and headers over HTTPS,
 * both signature schemes checked independently and by the `standardwebhooks` verifier; rotation on
 * the controllable clock; the exact retry delays, `retrying` with `nextAttemptAt` between attempts,
 * exhaustion to `failed`, the dead-letter list in Redis, manual retry; held deliveries of a paused
 * webhook; the automatic move to `failed`.
 */
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { login } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { DLQ_LIST } from '../../src/modules/webhooks/engine.js';
import { routerStats } from '../../src/modules/webhooks/routing.js';
import { publishEvent } from '../../src/modules/webhooks/service.js';
import { makeCertificate, standardSignedBy, startReceiver, status, verifyServiceSignature, verifyStandard, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, engineOf, publish, type WebhookWorld } from './setup.js';
import { behindLock, raceTest } from '../helpers/race.js';

const SECRET = 'whsec-test-secret-0123456789abcdef';

describe.skipIf(!backendAvailable())('webhook deliveries', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;

  beforeAll(async () => {
    app = await startTestApp();
    const tls = await makeCertificate();
    // The receiver's own CA, trusted by this app's outbound policy only (before its first request).
    app.server.keel.outbound.ca = tls.cert;
    w = await createWebhookWorld(app);
    rx = await startReceiver({ tls });
  });
  afterEach(() => {
    clock.reset();
    rx.behave(status(200, 'ok'));
  });
  afterAll(async () => {
    await rx.close();
    await app.close();
  });

  it('sends the exact body and headers over HTTPS, signed in both schemes, custom headers after', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['alert.triggered'], headers: [{ key: 'X-Tenant', value: 'acme' }, { key: 'Authorization', value: 'Bearer r3ceiver' }] });
    const before = Date.now();
    const event = await publish(app, w.eventsKey, 'alert.triggered', { alertId: 'a-1', severity: 'critical', nested: { n: [1, 2] } });
    const [r] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === event.id);
    const got = r!;
    expect(got.method).toBe('POST');
    expect(got.path).toBe('/hook');
    // The body byte for byte: the keys of docs/specification.md "Webhooks: deliveries" in order, as JSON.stringify writes them.
    expect(got.body).toBe(JSON.stringify({ id: event.id, type: 'alert.triggered', timestamp: event.timestamp, orgId: w.orgId, data: { alertId: 'a-1', severity: 'critical', nested: { n: [1, 2] } } }));
    const [delivery] = await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 1 && d[0].status === 'delivered');
    expect(Object.keys(got.headers).sort()).toEqual(
      [
        'authorization', 'connection', 'content-length', 'content-type', 'host', 'user-agent', 'webhook-id', 'webhook-signature', 'webhook-timestamp',
        'x-service-delivery-id', 'x-service-event-id', 'x-service-event-type', 'x-service-signature', 'x-service-signature-timestamp', 'x-service-timestamp', 'x-tenant',
      ].sort(),
    );
    expect(got.headers).toMatchObject({
      'content-type': 'application/json',
      'user-agent': 'Service-Webhooks/1.0',
      'x-service-delivery-id': delivery.id,
      'x-service-event-id': event.id,
      'x-service-event-type': 'alert.triggered',
      'x-tenant': 'acme',
      authorization: 'Bearer r3ceiver',
      'webhook-id': event.id,
    });
    const ts = Number(got.headers['x-service-timestamp']);
    expect(ts).toBeGreaterThanOrEqual(before);
    expect(ts).toBeLessThanOrEqual(Date.now());
    expect(got.headers['x-service-signature-timestamp']).toBe(got.headers['x-service-timestamp']);
    expect(got.headers['webhook-timestamp']).toBe(String(Math.floor(ts / 1000)));
    expect(got.headers['x-service-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifyServiceSignature(SECRET, got)).toBe(true);
    expect(verifyServiceSignature('another-secret-entirely', got)).toBe(false);
    expect(verifyServiceSignature(SECRET, { ...got, body: `${got.body} ` })).toBe(false);
    expect(got.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(verifyStandard(SECRET, got)).toBe(true);
    expect(verifyStandard('another-secret-entirely', got)).toBe(false);
    expect(delivery).toMatchObject({ status: 'delivered', attempt: 1, responseStatus: 200, responseBody: 'ok', errorMessage: null, nextAttemptAt: null, event: 'alert.triggered', eventId: event.id });
    expect(delivery.deliveredAt).toEqual(expect.any(String));
    expect(delivery.payload).toEqual(JSON.parse(got.body));
    const read = await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin });
    expect(read.body).toMatchObject({ successCount: 1, failureCount: 0, lastDeliveryAt: expect.any(String), lastSuccessAt: expect.any(String) });
    expect(read.body.deliveryStats).toMatchObject({ total: 1, delivered: 1, pending: 0, failed: 0, retrying: 0, lastDeliveredAt: delivery.deliveredAt });
  });

  it('without a secret: no signature headers, the rest as always', async () => {
    await createHook(app, w.admin, { url: rx.url, events: ['alert.resolved'] });
    const event = await publish(app, w.eventsKey, 'alert.resolved', {});
    const [got] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === event.id);
    for (const h of ['x-service-signature', 'x-service-signature-timestamp', 'x-service-signature-previous', 'webhook-signature']) expect(got!.headers[h]).toBeUndefined();
    expect(got!.headers['webhook-id']).toBe(event.id);
  });

  it('rotation: both signatures for 24 hours on the clock, then only the new one; a generated secret is shown once; PATCH replaces at once', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['alert.escalated'] });
    const NEW = 'the-new-secret-after-rotation-42';
    clock.freeze();
    const rotated = await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: { secret: NEW } });
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).toBeUndefined();
    expect(new Date(rotated.body.previousSecretExpiresAt).getTime()).toBe(clock.nowMs() + 24 * 3600_000);

    const during = await publish(app, w.eventsKey, 'alert.escalated', { n: 1 });
    const [a] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === during.id);
    expect(verifyServiceSignature(NEW, a!)).toBe(true);
    expect(verifyServiceSignature(SECRET, a!, 'x-service-signature-previous')).toBe(true);
    expect(verifyServiceSignature(SECRET, a!)).toBe(false);
    expect(a!.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(standardSignedBy(NEW, a!) && standardSignedBy(SECRET, a!)).toBe(true);
    expect(verifyStandard(NEW, a!)).toBe(true);
    expect(verifyStandard(SECRET, a!)).toBe(true);

    clock.advance(24 * 3600_000 - 1);
    const stillDuring = await publish(app, w.eventsKey, 'alert.escalated', { n: 2 });
    const [b] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === stillDuring.id);
    expect(verifyServiceSignature(SECRET, b!, 'x-service-signature-previous')).toBe(true);

    clock.advance(1);
    const after = await publish(app, w.eventsKey, 'alert.escalated', { n: 3 });
    const [c] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === after.id);
    expect(verifyServiceSignature(NEW, c!)).toBe(true);
    expect(c!.headers['x-service-signature-previous']).toBeUndefined();
    expect(c!.headers['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(standardSignedBy(NEW, c!)).toBe(true);
    expect(standardSignedBy(SECRET, c!)).toBe(false);
    // (Access tokens live 15 minutes: a day later, sign in again.)
    const fresh = (await login(app, w.orgAdmin)).accessToken;
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: fresh })).body.previousSecretExpiresAt).toBeNull();
    clock.reset();

    const generated = await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin });
    expect(generated.status).toBe(200);
    expect(generated.body.secret).toMatch(/^whsk_[A-Za-z0-9_-]{43}$/);
    const read = await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin });
    expect(JSON.stringify(read.body)).not.toContain(generated.body.secret);
    const d = await publish(app, w.eventsKey, 'alert.escalated', { n: 4 });
    const [e] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === d.id);
    expect(verifyServiceSignature(generated.body.secret, e!)).toBe(true);
    expect(verifyServiceSignature(NEW, e!, 'x-service-signature-previous')).toBe(true);

    const REPLACED = 'replaced-at-once-by-patch-0001';
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { secret: REPLACED } });
    const f = await publish(app, w.eventsKey, 'alert.escalated', { n: 5 });
    const [g] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === f.id);
    expect(verifyServiceSignature(REPLACED, g!)).toBe(true);
    expect(g!.headers['x-service-signature-previous']).toBeUndefined();
    expect(verifyStandard(REPLACED, g!)).toBe(true);
    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, hook.id))).map((x) => x.action);
    expect(actions.filter((x) => x === 'webhook.secret.rotate')).toHaveLength(2);
  });

  it('an event routed where a worker runs is claimed by the routing statement and attempted there without a claim; a failing webhook\'s rows wait for a claim', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['script.completed'] });
    const engine = engineOf(app);
    const claimed = engine.stats.claimed;
    const routed = engine.stats.routedHere;
    const event = await publish(app, w.eventsKey, 'script.completed', { job: 'nightly' });
    const [got] = await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === event.id);
    expect(verifyServiceSignature(SECRET, got!)).toBe(true);
    await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 1 && d[0].status === 'delivered');
    expect(engine.stats.routedHere).toBe(routed + 1);
    expect(engine.stats.claimed).toBe(claimed);

    // Once an attempt of the webhook failed, its new rows are routed unclaimed (no pile of leased rows behind a failing receiver).
    rx.behave(status(500, 'down'));
    clock.freeze();
    await publish(app, w.eventsKey, 'script.completed', { job: 'second' });
    await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 2 && d[0].status === 'retrying');
    expect(engine.ticket()?.full).toContain(hook.id);
    await publish(app, w.eventsKey, 'script.completed', { job: 'third' });
    expect(engine.stats.routedHere).toBe(routed + 2);
    // Its row was woken for and taken by a claim (the second one's retry is not due on the frozen clock).
    await expect.poll(() => engine.stats.claimed, { timeout: 60_000 }).toBe(claimed + 1);
    // Its retries stay out of the next tests.
    expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin })).status).toBe(204);
  });

  it('events published at once share routing statements (group commit), and each is delivered once, with its own body, to each webhook', async () => {
    const hooks = [
      await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['patch.installed'] }),
      await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['patch.installed'] }),
    ];
    const stats = routerStats(app.server.keel);
    const before = { ...stats };
    const n = 40;
    // Published together (as POST /events does it; over HTTP how many arrive together depends on the sockets).
    const events = await Promise.all(Array.from({ length: n }, (_, i) => publishEvent(app.server.keel, w.orgId, 'patch.installed', { seq: i })));
    const ids = new Set(events.map((e) => e.id));
    const got = await rx.waitFor(2 * n, (x) => ids.has(x.headers['x-service-event-id'] as string));
    for (const [i, e] of events.entries()) {
      const arrived = got.filter((x) => x.headers['x-service-event-id'] === e.id);
      expect(arrived).toHaveLength(2);
      for (const a of arrived) {
        expect(JSON.parse(a.body)).toMatchObject({ id: e.id, type: 'patch.installed', data: { seq: i } });
        expect(verifyServiceSignature(SECRET, a)).toBe(true);
      }
    }
    expect(new Set(got.map((x) => x.headers['x-service-delivery-id'])).size).toBe(2 * n);
    expect(stats.batchedEvents - before.batchedEvents).toBe(n);
    // One statement: the publishers that reached routing in the same turn of the event loop went together.
    expect(stats.statements - before.statements).toBe(1);
    for (const hook of hooks) {
      await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === n && d.every((x) => x.status === 'delivered'));
      expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin })).status).toBe(204);
    }
  });

  it('retries on the exact default delays with retrying and nextAttemptAt visible, then failed, dead-lettered, and a manual retry delivers; the list and the read count deliveries and attempts alike', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, secret: SECRET, events: ['patch.failed'] });
    rx.behave(status(503, 'busy'));
    clock.freeze();
    const event = await publish(app, w.eventsKey, 'patch.failed', { kb: 'KB1' });
    const engine = engineOf(app);
    const expected = [1000, 2000, 4000, 8000, 16000];
    let last: any;
    for (let i = 0; i < expected.length; i++) {
      const [d] = await deliveriesUntil(app, w.admin, hook.id, (list) => list.length === 1 && list[0].attempt === i + 1 && list[0].status === 'retrying');
      last = d;
      expect(d.responseStatus).toBe(503);
      expect(d.responseBody).toBe('busy');
      expect(d.errorMessage).toBe('HTTP 503');
      // The attempt ran at the frozen instant: the gap to nextAttemptAt is the delay itself.
      expect(new Date(d.nextAttemptAt).getTime() - clock.nowMs()).toBe(expected[i]);
      const arrivals = rx.received.filter((x) => x.headers['x-service-event-id'] === event.id).length;
      expect(arrivals).toBe(i + 1);
      // One millisecond early: nothing is due, nothing claimed (so no request can follow).
      const claimed = engine.stats.claimed;
      clock.advance(expected[i]! - 1);
      await engine.pumpNow();
      expect(engine.stats.claimed).toBe(claimed);
      expect(rx.received.filter((x) => x.headers['x-service-event-id'] === event.id)).toHaveLength(i + 1);
      clock.advance(1);
      await engine.pumpNow();
      await rx.waitFor(i + 2, (x) => x.headers['x-service-event-id'] === event.id);
    }
    const [failed] = await deliveriesUntil(app, w.admin, hook.id, (list) => list[0].status === 'failed');
    expect(failed).toMatchObject({ status: 'failed', attempt: 6, nextAttemptAt: null, responseStatus: 503, id: last.id });
    // Every automatic retry carried the same delivery id.
    const arrivals = rx.received.filter((x) => x.headers['x-service-event-id'] === event.id);
    expect(arrivals).toHaveLength(6);
    expect(new Set(arrivals.map((x) => x.headers['x-service-delivery-id']))).toEqual(new Set([failed.id]));
    const read = await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin });
    expect(read.body).toMatchObject({ successCount: 0, failureCount: 6, lastSuccessAt: null });
    expect(read.body.deliveryStats).toMatchObject({ total: 1, failed: 1 });
    if (backend === 'postgres') {
      const dlq = await app.server.keel.redis!.lrange(DLQ_LIST, 0, -1);
      expect(dlq).toContain(failed.id);
    }

    // Manual retry: a new pending record with the same event, delivered; the original stays failed.
    rx.behave(status(200, 'thanks'));
    const delivered = await app.api('POST', `/webhooks/${hook.id}/retry/${failed.id}`, { token: w.admin });
    expect(delivered.status).toBe(202);
    expect(delivered.body.delivery).toMatchObject({ status: 'pending', attempt: 0, webhookId: hook.id, event: 'patch.failed' });
    expect(delivered.body.delivery.id).not.toBe(failed.id);
    const list = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 2 && l[0].status === 'delivered');
    expect(list[0]).toMatchObject({ id: delivered.body.delivery.id, eventId: event.id, attempt: 1, responseBody: 'thanks' });
    expect(list[1]).toMatchObject({ id: failed.id, status: 'failed' });
    // One definition of the numbers, in the read and in the list: 2 deliveries (1 failed, 1 delivered), and apart from them their 7 attempts.
    const after = await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin });
    expect(after.body.deliveryStats).toMatchObject({ total: 2, delivered: 1, failed: 1, pending: 0, retrying: 0, attempts: { succeeded: 1, failed: 6 } });
    expect(after.body).toMatchObject({ successCount: 1, failureCount: 6 });
    const listed = (await app.api('GET', '/webhooks?limit=100', { token: w.admin })).body.data.find((h: any) => h.id === hook.id);
    expect(listed.deliveryStats).toEqual(after.body.deliveryStats);
    const again = rx.received.filter((x) => x.headers['x-service-delivery-id'] === delivered.body.delivery.id);
    expect(again).toHaveLength(1);
    expect(again[0]!.body).toBe(arrivals[0]!.body);
    expect(verifyServiceSignature(SECRET, again[0]!)).toBe(true);
    const notFailed = await app.api('POST', `/webhooks/${hook.id}/retry/${delivered.body.delivery.id}`, { token: w.admin });
    expect(notFailed.status).toBe(409);
    expect(notFailed.body.code).toBe('delivery_not_failed');
    expect(notFailed.body.error).toBe('Only failed deliveries can be retried');
  });

  it('fencing: the late result of an attempt whose lease ran out is not recorded over the newer attempt', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['security.score_changed'] });
    const answers: ((code: number) => void)[] = [];
    rx.behave((_r, res) => {
      answers.push((code) => {
        res.writeHead(code);
        res.end(`answer ${code}`);
      });
    });
    clock.freeze();
    const event = await publish(app, w.eventsKey, 'security.score_changed', {});
    await rx.waitFor(1, (x) => x.headers['x-service-event-id'] === event.id);
    const engine = engineOf(app);
    const fencedBefore = engine.stats.fencedOut;
    // The first attempt hangs past its lease (2 × 30 s + 10 s): the row is claimed again, a second attempt made.
    clock.advance(70_001);
    await engine.pumpNow();
    await rx.waitFor(2, (x) => x.headers['x-service-event-id'] === event.id);
    answers[1]!(200);
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered');
    answers[0]!(500);
    await expect.poll(() => engine.stats.fencedOut, { timeout: 60_000 }).toBe(fencedBefore + 1);
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1);
    expect(d).toMatchObject({ status: 'delivered', attempt: 1, responseStatus: 200, responseBody: 'answer 200' });
  });

  it('a retryPolicy of its own sets the schedule (capped by maxDelayMs)', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['policy.violation'], retryPolicy: { maxRetries: 3, initialDelayMs: 500, backoffMultiplier: 3, maxDelayMs: 2000 } });
    rx.behave(status(500));
    clock.freeze();
    await publish(app, w.eventsKey, 'policy.violation', {});
    const engine = engineOf(app);
    for (const [i, delay] of [500, 1500, 2000].entries()) {
      const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].attempt === i + 1 && l[0].status === 'retrying');
      expect(new Date(d.nextAttemptAt).getTime() - clock.nowMs()).toBe(delay);
      clock.advance(delay);
      await engine.pumpNow();
    }
    await deliveriesUntil(app, w.admin, hook.id, (l) => l[0].status === 'failed' && l[0].attempt === 4);
  });

  it('holds the deliveries of a paused webhook and resumes them when it is active again', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['automation.failed'] });
    rx.behave(status(500));
    clock.freeze();
    const event = await publish(app, w.eventsKey, 'automation.failed', {});
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'retrying');
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { status: 'paused' } });
    rx.behave(status(200));
    clock.advance(60_000);
    await engineOf(app).pumpNow();
    // Even named by a hint (as another process's Redis hint would name it), a paused webhook's row is not taken.
    const claimedBefore = engineOf(app).stats.claimed;
    engineOf(app).wake([hook.id]);
    await engineOf(app).pumpNow();
    expect(engineOf(app).stats.claimed).toBe(claimedBefore);
    expect(rx.received.filter((x) => x.headers['x-service-event-id'] === event.id)).toHaveLength(1);
    const held = await app.api('GET', `/webhooks/${hook.id}/deliveries`, { token: w.admin });
    expect(held.body.data[0]).toMatchObject({ status: 'retrying', attempt: 1 });
    // Paused: a new event is not routed to it at all.
    const ignored = await publish(app, w.eventsKey, 'automation.failed', {});
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { status: 'active' } });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered' && l[0].attempt === 2);
    expect(rx.received.some((x) => x.headers['x-service-event-id'] === ignored.id)).toBe(false);
  });

  /** A webhook without retries whose first 10 deliveries were all dead-lettered, on a frozen clock: one more after 24 hours moves it to failed. */
  async function tenDeadLettered(type: string) {
    const hook = await createHook(app, w.admin, { url: rx.url, events: [type], retryPolicy: { maxRetries: 0 } });
    rx.behave(status(500));
    clock.freeze();
    for (let i = 0; i < 10; i++) await publish(app, w.eventsKey, type, { i });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 10 && l.every((d: any) => d.status === 'failed'));
    return hook;
  }

  it('the automatic move needs exactly 10 dead letters: 9 over 24 hours leave the webhook active, the 10th moves it', async () => {
    const type = 'remote.file.transferred';
    const hook = await createHook(app, w.admin, { url: rx.url, events: [type], retryPolicy: { maxRetries: 0 } });
    rx.behave(status(500));
    clock.freeze();
    for (let i = 0; i < 8; i++) await publish(app, w.eventsKey, type, { i });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 8 && l.every((d: any) => d.status === 'failed'));
    clock.advance(24 * 3600_000);
    const admin = (await login(app, w.orgAdmin)).accessToken;
    await publish(app, w.eventsKey, type, { i: 8 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.length === 9 && l.every((d: any) => d.status === 'failed'));
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: admin })).body.status).toBe('active');
    await publish(app, w.eventsKey, type, { i: 9 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.length === 10 && l.every((d: any) => d.status === 'failed'));
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: admin })).body.status).toBe('failed');
  });

  it('moves a webhook to failed after 24 hours in which every delivery (at least 10) was dead-lettered, audited', async () => {
    const hook = await tenDeadLettered('remote.session.ended');
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin })).body.status).toBe('active');
    clock.advance(24 * 3600_000);
    const admin = (await login(app, w.orgAdmin)).accessToken;
    await publish(app, w.eventsKey, 'remote.session.ended', { i: 10 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.length === 11 && l.every((d: any) => d.status === 'failed'));
    const read = await app.api('GET', `/webhooks/${hook.id}`, { token: admin });
    expect(read.body.status).toBe('failed');
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, hook.id));
    const auto = audit.find((a) => a.action === 'webhook.status.auto_failed');
    expect(auto).toMatchObject({ actorType: 'system', orgId: w.orgId, details: expect.objectContaining({ deadLettered: 11, status: 'failed' }) });
    // A success in between resets the window: re-activated by a person, it starts over.
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: admin, body: { status: 'active' } });
    await publish(app, w.eventsKey, 'remote.session.ended', { i: 11 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.length === 12 && l[0].status === 'failed');
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: admin })).body.status).toBe('active');
  });

  raceTest('the automatic move to failed and its audit entry commit together: no reader sees the status without the entry', async () => {
    const hook = await tenDeadLettered('remote.session.started');
    clock.advance(24 * 3600_000);
    // The engine's audit insert waits on the lock (publishing writes no audit entry, so it is the one
    // waiting); meanwhile another session reads the webhook. Recorded first and audited afterwards,
    // it read `error` here with no audit entry behind it.
    let seenMeanwhile = '';
    await behindLock(
      app.server.keel.config.DATABASE_URL!,
      'lock table audit_logs in share mode',
      1,
      () => publish(app, w.eventsKey, 'remote.session.started', { i: 10 }),
      async (client) => {
        const { rows } = await client.query<{ status: string }>('select status from webhooks where id = $1', [hook.id]);
        seenMeanwhile = rows[0]!.status;
      },
    );
    expect(seenMeanwhile).toBe('active');
    const admin = (await login(app, w.orgAdmin)).accessToken;
    await deliveriesUntil(app, admin, hook.id, (l) => l.length === 11 && l.every((d: any) => d.status === 'failed'));
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: admin })).body.status).toBe('failed');
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, hook.id));
    expect(audit.filter((a) => a.action === 'webhook.status.auto_failed')).toHaveLength(1);
  });
});
