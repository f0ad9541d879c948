import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { clock } from '../../src/platform/clock.js';
import { login } from '../helpers/fixtures.js';
import { advanceReplays } from '../../src/modules/webhooks/replay.js';
import { sweepDeliveries } from '../../src/modules/webhooks/retention.js';
import { webhookPayloads } from '../../src/modules/webhooks/schema.js';
import { raceTest, together, expectOneWinner } from '../helpers/race.js';
import { ok, startReceiver, status, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, engineOf, publish, type WebhookWorld } from './setup.js';

const CAP = 6;

/**
 * Replay (docs/decisions.md "Webhook replay and partner-wide webhooks"): after a receiver outage
 * longer than the retries, every event of the window that the webhook subscribes to arrives once
 * more with its own id, oldest first; bounded by the retention, WEBHOOK_REPLAY_MAX_EVENTS and one
 * running replay per webhook; another tenant's webhook is 404. The `webhooks.replay` job is stopped
 * here: the test advances replays itself (`advanceReplays`, what the job runs).
 */
describe.skipIf(!backendAvailable())('webhook replay', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let otherKey: string;

  beforeAll(async () => {
    app = await startTestApp({ env: { WEBHOOK_REPLAY_MAX_EVENTS: String(CAP), LOGIN_LIMIT: '1000' } });
    await app.server.keel.modules.jobs().find((j) => j.name === 'webhooks.replay')?.stop({ graceful: true });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
    const key = await app.api('POST', '/api-keys', { token: w.otherAdmin, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } });
    otherKey = key.body.key;
  });
  afterEach(() => {
    clock.reset();
    rx.behave(ok);
  });
  afterAll(async () => {
    await rx?.close();
    await app?.close();
  });

  const since = (msAgo: number) => new Date(clock.nowMs() - msAgo).toISOString();
  const replay = (token: string, id: string, body: Record<string, unknown>) => app.api('POST', `/webhooks/${id}/replay`, { token, body });

  it('after an outage longer than the retries, re-sends every subscribed event of the organisation once, with its own id, in order', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['device.offline', 'alert.triggered'], retryPolicy: { maxRetries: 1, initialDelayMs: 60_000, maxDelayMs: 60_000 } });
    // Another organisation's webhook to the same receiver, subscribed to the same type.
    const elsewhere = await createHook(app, w.otherAdmin, { url: `${rx.url}?org=b`, events: ['device.offline'] });
    const mine = (r: { path: string }) => r.path === '/hook';
    // Another webhook of the organisation subscribes to alert.resolved: that event is stored, and still not replayed to this one.
    await createHook(app, w.admin, { url: `${rx.url}?resolved`, events: ['alert.resolved'] });
    const start = clock.nowMs();
    clock.freeze();
    rx.behave(status(503));
    const published = [
      await publish(app, w.eventsKey, 'device.offline', { n: 1 }),
      await publish(app, w.eventsKey, 'alert.triggered', { n: 2 }),
      await publish(app, w.eventsKey, 'device.offline', { n: 3 }),
    ];
    // Not subscribed: never replayed; another organisation's: never replayed to this webhook.
    await publish(app, w.eventsKey, 'alert.resolved', { n: 4 });
    const foreign = await publish(app, otherKey, 'device.offline', { n: 5 });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 3 && l.every((d) => d.attempt === 1));
    expect((await app.api('GET', `/webhooks/${elsewhere.id}/deliveries`, { token: w.otherAdmin })).body.data.map((d: any) => d.eventId)).toEqual([foreign.id]);
    // The retry a minute later fails too: every delivery is dead-lettered.
    clock.advance(61_000);
    await engineOf(app).pumpNow();
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 3 && l.every((d) => d.status === 'failed'));

    // The receiver is back an hour later.
    rx.behave(ok);
    clock.advance(3600_000);
    const admin = (await login(app, w.orgAdmin)).accessToken;
    const before = rx.received.filter(mine).length;
    const started = await replay(admin, hook.id, { since: new Date(start - 1000).toISOString() });
    expect(started.status).toBe(202);
    expect(started.body).toMatchObject({ status: 'running', total: 3, sent: 0 });
    expect(Object.keys(started.body)).toEqual(expect.arrayContaining(['id', 'status', 'total', 'sent']));
    // Queued by the job, not by the request.
    expect((await app.api('GET', `/webhooks/${hook.id}/deliveries?limit=100`, { token: admin })).body.data).toHaveLength(3);
    await advanceReplays(app.server.keel);
    const progress = await app.api('GET', `/webhooks/${hook.id}/replays/${started.body.id}`, { token: admin });
    expect(progress.status).toBe(200);
    expect(progress.body).toMatchObject({ id: started.body.id, status: 'complete', total: 3, sent: 3 });
    expect(progress.body.finishedAt).not.toBeNull();
    await engineOf(app).pumpNow();
    await rx.waitFor(before + 3, mine);
    const again = rx.received.filter(mine).slice(before);
    expect(again.map((r) => r.headers['webhook-id'])).toEqual(published.map((e) => e.id));
    expect(again.map((r) => JSON.parse(r.body).id)).toEqual(published.map((e) => e.id));
    expect(again.every((r) => JSON.parse(r.body).orgId === w.orgId)).toBe(true);
    const deliveries = await deliveriesUntil(app, admin, hook.id, (l) => l.length === 6 && l.filter((d) => d.status === 'delivered').length === 3);
    expect(deliveries.filter((d) => d.status === 'delivered').map((d) => d.eventId).sort()).toEqual(published.map((e) => e.id).sort());
    expect(rx.received.filter(mine).some((r) => r.headers['webhook-id'] === foreign.id)).toBe(false);

    const audit = await app.api('GET', `/audit-logs?action=webhook.replay`, { token: admin });
    expect(audit.body.data.map((e: any) => e.details?.replayId)).toContain(started.body.id);
  });

  it('a replay reaches events sent while the webhook was failed or paused (the event is kept though nothing was delivered)', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['patch.failed'] });
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { status: 'paused' } });
    const start = clock.nowMs();
    const held = await publish(app, w.eventsKey, 'patch.failed', { n: 1 });
    expect((await app.api('GET', `/webhooks/${hook.id}/deliveries`, { token: w.admin })).body.data).toEqual([]);
    const paused = await replay(w.admin, hook.id, { since: new Date(start - 1000).toISOString() });
    expect(paused.status).toBe(409);
    expect(paused.body.code).toBe('webhook_not_active');
    await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { status: 'active' } });
    const started = await replay(w.admin, hook.id, { since: new Date(start - 1000).toISOString() });
    expect(started.body).toMatchObject({ total: 1 });
    await advanceReplays(app.server.keel);
    const [r] = await rx.waitFor(1, (x) => x.headers['webhook-id'] === held.id);
    expect(JSON.parse(r!.body)).toMatchObject({ id: held.id, type: 'patch.failed', orgId: w.orgId });
  });

  it('bounds a replay: the retention window, the event cap, subscribed types only, one running per webhook', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] });
    const outside = await replay(w.admin, hook.id, { since: since(31 * 24 * 3600_000) });
    expect(outside.status).toBe(400);
    expect(outside.body.details.fields[0].path).toBe('since');
    const backwards = await replay(w.admin, hook.id, { since: since(60_000), until: since(120_000) });
    expect(backwards.status).toBe(400);
    const unsubscribed = await replay(w.admin, hook.id, { since: since(60_000), eventTypes: ['alert.triggered'] });
    expect(unsubscribed.status).toBe(400);
    expect(unsubscribed.body.details.fields[0].path).toBe('eventTypes');

    const start = clock.nowMs();
    for (let i = 0; i <= CAP; i++) await publish(app, w.eventsKey, 'script.completed', { i });
    const tooMany = await replay(w.admin, hook.id, { since: new Date(start - 1000).toISOString() });
    expect(tooMany.status).toBe(400);
    expect(tooMany.body).toMatchObject({ code: 'replay_too_large', details: { limit: CAP } });

    // A window within the cap (another type of the webhook's).
    const small = await createHook(app, w.admin, { url: rx.url, events: ['script.started'] });
    await publish(app, w.eventsKey, 'script.started', {});
    const window = { since: new Date(start - 1000).toISOString() };
    const first = await replay(w.admin, small.id, window);
    expect(first.body).toMatchObject({ status: 'running', total: 1 });
    const second = await replay(w.admin, small.id, window);
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ code: 'replay_running', details: { replayId: first.body.id } });
    await advanceReplays(app.server.keel);
    const third = await replay(w.admin, small.id, window);
    expect(third.status).toBe(202);
    await advanceReplays(app.server.keel);
  });

  it('another tenant\'s webhook and replay are 404; a reader may follow a replay but not start one', async () => {
    const theirs = await createHook(app, w.otherAdmin, { url: rx.url, events: ['device.online'] });
    const mine = await createHook(app, w.admin, { url: rx.url, events: ['device.online'] });
    const started = await replay(w.otherAdmin, theirs.id, { since: since(60_000) });
    expect(started.status).toBe(202);
    expect((await replay(w.admin, theirs.id, { since: since(60_000) })).status).toBe(404);
    expect((await app.api('GET', `/webhooks/${theirs.id}/replays/${started.body.id}`, { token: w.admin })).status).toBe(404);
    // Their replay through my webhook's path: not mine either.
    expect((await app.api('GET', `/webhooks/${mine.id}/replays/${started.body.id}`, { token: w.admin })).status).toBe(404);
    const reader = (await login(app, w.orgReadOnly)).accessToken;
    const own = await replay(w.admin, mine.id, { since: since(60_000) });
    expect((await app.api('GET', `/webhooks/${mine.id}/replays/${own.body.id}`, { token: reader })).status).toBe(200);
    expect((await replay(reader, mine.id, { since: since(60_000) })).status).toBe(403);
  });

  it('events are kept WEBHOOK_EVENT_RETENTION_DAYS for a replay, then swept', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['policy.violation'] });
    const event = await publish(app, w.eventsKey, 'policy.violation', {});
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered');
    await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.admin });
    const db = app.server.keel.db;
    const stored = async () => (await db.select().from(webhookPayloads).where(eq(webhookPayloads.eventType, 'policy.violation'))).map((p) => (p.body as { id: string }).id);
    clock.advance(29 * 24 * 3600_000);
    await sweepDeliveries(app.server.keel);
    expect(await stored()).toEqual([event.id]);
    clock.advance(2 * 24 * 3600_000);
    await sweepDeliveries(app.server.keel);
    expect(await stored()).toEqual([]);
  });

  raceTest('two replays of one webhook at once: one starts, the other is 409', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['remote.session.started'] });
    await publish(app, w.eventsKey, 'remote.session.started', {});
    const answers = await together(2, () => replay(w.admin, hook.id, { since: since(60_000) }));
    const won = expectOneWinner(answers, 202, [409]);
    expect(answers.find((a) => a !== won)).toMatchObject({ status: 409, body: { code: 'replay_running' } });
    await advanceReplays(app.server.keel);
  });
});
