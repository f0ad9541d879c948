/**
 * Webhook endpoints of docs/specification.md "Webhooks: subscriptions" and what Keel adds: exact fields, validation, sealing at
 * rest, the redacted URL, audit entries, POST /events, the bus subscriber in the publisher's
 * transaction, and the cross-tenant rules (another organisation's webhook, deliveries, test and retry
 * are 404).
 */
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { login } from '../helpers/fixtures.js';
import { createWorld, type World } from '../access/helpers.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { webhookDeliveries, webhooks } from '../../src/modules/webhooks/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { startReceiver, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from './setup.js';

describe.skipIf(!backendAvailable())('webhook endpoints', () => {
  const resolved: string[] = [];
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;

  beforeAll(async () => {
    app = await startTestApp();
    // No name is resolved through the system resolver (no DNS query leaves loopback): every name is unknown.
    app.server.keel.outbound.resolve = (host) => {
      resolved.push(host);
      return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
    };
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx.close();
    await app.close();
  });

  it('creates a webhook: 201, status active, hasSecret, never the secret; URL and secret sealed at rest; audited', async () => {
    const url = `${rx.url}?token=abc123&keep=1`;
    const res = await app.api('POST', '/webhooks', {
      token: w.admin,
      body: { name: 'PSA', url, secret: 'a-very-secret-signing-key', events: ['alert.triggered', 'device.offline'], headers: [{ key: 'X-Tenant', value: 'tenant-value-77' }] },
    });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(
      ['createdAt', 'createdBy', 'events', 'failureCount', 'hasSecret', 'headers', 'id', 'lastDeliveryAt', 'lastSuccessAt', 'name', 'orgId', 'partnerId', 'previousSecretExpiresAt', 'rateLimitPerSecond', 'retryPolicy', 'retrySchedule', 'status', 'successCount', 'updatedAt', 'url'].sort(),
    );
    expect(res.body).toMatchObject({ name: 'PSA', orgId: w.orgId, status: 'active', hasSecret: true, events: ['alert.triggered', 'device.offline'], headers: [{ key: 'X-Tenant', valueSet: true }], lastDeliveryAt: null });
    expect(res.body.retrySchedule).toBe('default');
    expect(res.body.retryPolicy).toEqual({ maxRetries: 5, initialDelayMs: 1000, backoffMultiplier: 2, maxDelayMs: 300000 });
    expect(res.body.url).toBe(`${rx.url}?token=REDACTED&keep=1`);
    expect(JSON.stringify(res.body)).not.toContain('a-very-secret-signing-key');
    expect(JSON.stringify(res.body)).not.toContain('tenant-value-77');

    const [row] = await app.server.keel.db.select().from(webhooks).where(eq(webhooks.id, res.body.id));
    expect(row!.urlSealed).toMatch(/^v1\./);
    expect(row!.secretSealed).toMatch(/^v1\./);
    expect(row!.headersSealed).toMatch(/^v1\./);
    expect(JSON.stringify(row)).not.toContain('a-very-secret-signing-key');
    expect(JSON.stringify(row)).not.toContain('abc123');

    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, res.body.id));
    expect(audit.map((a) => a.action)).toEqual(['webhook.create']);
    expect(JSON.stringify(audit)).not.toContain('a-very-secret-signing-key');

    const read = await app.api('GET', `/webhooks/${res.body.id}`, { token: w.admin });
    expect(read.status).toBe(200);
    expect(read.body.deliveryStats).toEqual({ total: 0, pending: 0, delivered: 0, failed: 0, retrying: 0, lastDeliveredAt: null, attempts: { succeeded: 0, failed: 0 } });
    expect(read.body.url).toBe(res.body.url);
  });

  it('refuses what is not valid: event types, custom headers, URLs, policy bounds', async () => {
    const bad = async (body: Record<string, unknown>, code = 'validation_failed') => {
      const res = await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'x', url: rx.url, events: ['alert.triggered'], ...body } });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code, JSON.stringify(body)).toBe(code);
      return res.body;
    };
    await bad({ events: ['alert.exploded'] });
    await bad({ events: [] });
    for (const key of ['Content-Type', 'user-agent', 'X-Service-Signature', 'x-service-anything', 'webhook-signature', 'Webhook-Id', 'Host', 'Content-Length', 'Transfer-Encoding', 'Bad Header', 'X-A\r\nX-B']) {
      await bad({ headers: [{ key, value: 'v' }] });
    }
    await bad({ headers: [{ key: 'X-Ok', value: 'a\r\nX-Injected: 1' }] });
    await bad({ headers: [{ key: 'X-Ok', value: 'a\nb' }] });
    await bad({ headers: [{ key: 'X-Dup', value: '1' }, { key: 'x-dup', value: '2' }] });
    await bad({ headers: Array.from({ length: 21 }, (_, i) => ({ key: `X-H${i}`, value: 'v' })) });
    await bad({ headers: Array.from({ length: 5 }, (_, i) => ({ key: `X-Big${i}`, value: 'v'.repeat(1_900) })) });
    await bad({ secret: 'short' });
    await bad({ retryPolicy: { maxRetries: 11 } });
    await bad({ retryPolicy: { initialDelayMs: 10 } });
    await bad({ retryPolicy: { initialDelayMs: 5000, maxDelayMs: 1000 } });
    const urlError = await bad({ url: 'ftp://example.com/hook' }, 'invalid_webhook_url');
    expect(urlError.error).toMatch(/^Invalid webhook URL/);
    await bad({ url: 'not a url' }, 'invalid_webhook_url');
    await bad({ url: 'https://nowhere.invalid/hook' }, 'invalid_webhook_url');
    expect(resolved).toContain('nowhere.invalid');
    const userinfo = await bad({ url: rx.url.replace('http://', 'http://user:pa55@') }, 'invalid_webhook_url');
    expect(userinfo.details.fields).toEqual([{ path: 'url', message: expect.stringMatching(/credentials/) }]);
  });

  it('lists with pagination and filters, patches every field, deletes with its deliveries; limit over 100 is 400', async () => {
    const a = await createHook(app, w.admin, { name: 'list-a', url: rx.url });
    const b = await createHook(app, w.admin, { name: 'list-b', url: rx.url });
    const list = await app.api('GET', '/webhooks?limit=1&page=1', { token: w.admin });
    expect(list.status).toBe(200);
    expect(list.body.data).toHaveLength(1);
    expect(list.body.pagination).toMatchObject({ page: 1, limit: 1 });
    expect(list.body.pagination.total).toBeGreaterThanOrEqual(2);

    const patched = await app.api('PATCH', `/webhooks/${b.id}`, {
      token: w.admin,
      body: { name: 'renamed', url: `${rx.url}/v2`, secret: 'another-secret-0123456789', events: ['device.online'], headers: [{ key: 'Authorization', value: 'Bearer xyz' }], status: 'paused', retryPolicy: { maxRetries: 2 } },
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ name: 'renamed', url: `${rx.url}/v2`, hasSecret: true, events: ['device.online'], headers: [{ key: 'Authorization', valueSet: true }], status: 'paused' });
    expect(JSON.stringify(patched.body)).not.toContain('Bearer xyz');
    expect(patched.body.retryPolicy).toEqual({ maxRetries: 2, initialDelayMs: 1000, backoffMultiplier: 2, maxDelayMs: 300000 });
    const paused = await app.api('GET', '/webhooks?status=paused', { token: w.admin });
    expect(paused.body.data.map((h: any) => h.id)).toEqual([b.id]);
    const [stored] = await app.server.keel.db.select().from(webhooks).where(eq(webhooks.id, b.id));
    expect(stored!.status).toBe('disabled');
    const failed = await app.api('PATCH', `/webhooks/${b.id}`, { token: w.admin, body: { status: 'failed' } });
    expect(failed.body.status).toBe('failed');
    const [stored2] = await app.server.keel.db.select().from(webhooks).where(eq(webhooks.id, b.id));
    expect(stored2!.status).toBe('error');
    const noSecret = await app.api('PATCH', `/webhooks/${b.id}`, { token: w.admin, body: { secret: null } });
    expect(noSecret.body.hasSecret).toBe(false);

    const test = await app.api('POST', `/webhooks/${a.id}/test`, { token: w.admin });
    expect(test.status).toBe(202);
    await deliveriesUntil(app, w.admin, a.id, (d) => d.length === 1 && d[0].status === 'delivered');
    expect((await app.api('GET', `/webhooks/${a.id}/deliveries?limit=101`, { token: w.admin })).status).toBe(400);
    expect((await app.api('GET', `/webhooks/${a.id}/deliveries?status=exploded`, { token: w.admin })).status).toBe(400);

    const del = await app.api('DELETE', `/webhooks/${a.id}`, { token: w.admin });
    expect(del.status).toBe(204);
    expect(await app.server.keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.webhookId, a.id))).toHaveLength(0);
    expect((await app.api('GET', `/webhooks/${a.id}`, { token: w.admin })).status).toBe(404);
    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, b.id))).map((x) => x.action);
    expect(actions).toEqual(expect.arrayContaining(['webhook.create', 'webhook.update']));
    expect((await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, a.id))).map((x) => x.action).sort()).toEqual(['webhook.create', 'webhook.delete', 'webhook.test']);
  });

  it('test answers 202 with the delivery, webhook.test by default; 409 when the webhook is not active', async () => {
    const h = await createHook(app, w.admin, { url: rx.url });
    const res = await app.api('POST', `/webhooks/${h.id}/test`, { token: w.admin });
    expect(res.status).toBe(202);
    expect(res.body.message).toEqual(expect.any(String));
    expect(res.body.delivery).toMatchObject({ webhookId: h.id, status: 'pending', event: 'webhook.test', attempt: 0 });
    const [got] = await rx.waitFor(1, (r) => r.headers['x-service-delivery-id'] === res.body.delivery.id);
    const body = JSON.parse(got!.body);
    expect(body.type).toBe('webhook.test');
    expect(body.data).toMatchObject({ webhookId: h.id, message: expect.any(String), timestamp: expect.any(String) });
    await app.api('PATCH', `/webhooks/${h.id}`, { token: w.admin, body: { status: 'paused' } });
    const refused = await app.api('POST', `/webhooks/${h.id}/test`, { token: w.admin });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('webhook_not_active');
  });

  it('POST /events: API keys with events:publish only; routes to active subscribed webhooks of the organisation', async () => {
    const sub = await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] });
    const unsub = await createHook(app, w.admin, { url: rx.url, events: ['script.failed'] });
    const paused = await createHook(app, w.admin, { url: rx.url, events: ['script.completed'] });
    await app.api('PATCH', `/webhooks/${paused.id}`, { token: w.admin, body: { status: 'paused' } });
    const otherOrg = await createHook(app, w.otherAdmin, { url: rx.url, events: ['script.completed'] });

    expect((await app.api('POST', '/events', { token: w.admin, body: { type: 'script.completed', data: {} } })).body.code).toBe('api_key_required');
    const noPerm = await app.api('POST', '/api-keys', { token: w.admin, body: { name: 'reader', permissions: [{ resource: 'webhooks', action: 'read' }] } });
    const denied = await app.api('POST', '/events', { token: noPerm.body.key, body: { type: 'script.completed', data: {} } });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('permission_denied');
    const badType = await app.api('POST', '/events', { token: w.eventsKey, body: { type: 'script.exploded', data: {} } });
    expect(badType.status).toBe(400);
    const foreign = await app.api('POST', '/events', { token: w.eventsKey, body: { type: 'script.completed', orgId: w.otherOrgId, data: {} } });
    expect(foreign.status).toBe(404);

    const event = await publish(app, w.eventsKey, 'script.completed', { scriptId: 's-1', exitCode: 0 });
    expect(event).toMatchObject({ type: 'script.completed', orgId: w.orgId, id: expect.any(String), timestamp: expect.any(String) });
    const [got] = await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === event.id);
    expect(JSON.parse(got!.body)).toEqual({ id: event.id, type: 'script.completed', timestamp: event.timestamp, orgId: w.orgId, data: { scriptId: 's-1', exitCode: 0 } });
    const rows = await app.server.keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.eventId, event.id));
    expect(rows.map((r) => r.webhookId)).toEqual([sub.id]);
    for (const id of [unsub.id, paused.id, otherOrg.id]) expect(rows.some((r) => r.webhookId === id)).toBe(false);

    // One event to several webhooks: one row each, with distinct time-ordered ids (UUIDv7).
    const more = await Promise.all([1, 2, 3].map(() => createHook(app, w.admin, { url: rx.url, events: ['script.started'] })));
    const fanned = await publish(app, w.eventsKey, 'script.started', { scriptId: 's-2' });
    const fannedRows = await app.server.keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.eventId, fanned.id));
    expect(fannedRows.map((r) => r.webhookId).sort()).toEqual(more.map((h) => h.id).sort());
    expect(new Set(fannedRows.map((r) => r.id)).size).toBe(3);
    for (const r of fannedRows) expect(r.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const stamp = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    for (const r of fannedRows) expect(Math.abs(stamp(r.id) - Date.parse(fanned.timestamp))).toBeLessThan(60_000);
    await rx.waitFor(3, (r) => r.headers['x-service-event-id'] === fanned.id);
  });

  it('user.login and user.logout of an organisation user reach its webhooks through the bus', async () => {
    const h = await createHook(app, w.admin, { url: rx.url, events: ['user.login', 'user.logout'] });
    const signedIn = await login(app, w.orgTechnician);
    const [got] = await rx.waitFor(1, (r) => r.headers['x-service-event-type'] === 'user.login' && JSON.parse(r.body).data.email === w.orgTechnician.email);
    expect(JSON.parse(got!.body)).toMatchObject({ type: 'user.login', orgId: w.orgId, data: { userId: w.orgTechnician.id, method: 'password' } });
    await app.api('POST', '/auth/logout', { token: signedIn.accessToken, body: { refreshToken: signedIn.refreshToken } });
    await rx.waitFor(1, (r) => r.headers['x-service-event-type'] === 'user.logout' && JSON.parse(r.body).data.userId === w.orgTechnician.id);
    await deliveriesUntil(app, w.admin, h.id, (d) => d.length >= 2 && d.every((x: any) => x.status === 'delivered'));
  });

  it('an event whose transaction rolls back delivers nothing; the committed one is delivered', async () => {
    const h = await createHook(app, w.admin, { url: rx.url, events: ['patch.installed'] });
    const keel = app.server.keel;
    let rolledBackId = '';
    await expect(
      transaction(keel.db, async (tx) => {
        rolledBackId = (await keel.events.publish(tx, 'patch.installed', w.orgId, { kb: 'rolled-back' })).id;
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');
    const committed = await transaction(keel.db, (tx) => keel.events.publish(tx, 'patch.installed', w.orgId, { kb: 'committed' }));
    await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === committed.id);
    const deliveries = await deliveriesUntil(app, w.admin, h.id, (d) => d.length === 1 && d[0].status === 'delivered');
    expect(deliveries[0].eventId).toBe(committed.id);
    expect(rx.received.some((r) => r.headers['x-service-event-id'] === rolledBackId)).toBe(false);
    expect(await keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.eventId, rolledBackId))).toHaveLength(0);
  });
});

describe.skipIf(!backendAvailable())('webhook access across tenants', () => {
  let app: TestApp;
  let world: World;
  let w: WebhookWorld;
  let rx: Receiver;

  beforeAll(async () => {
    app = await startTestApp();
    world = await createWorld(app);
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx.close();
    await app.close();
  });

  it('another organisation or partner gets 404 for the webhook, its deliveries, test, retry, update, rotation and delete', async () => {
    const h = await createHook(app, w.admin, { url: rx.url, events: ['alert.triggered'] });
    rx.behave((_r, res) => {
      res.writeHead(500);
      res.end();
    });
    await app.api('PATCH', `/webhooks/${h.id}`, { token: w.admin, body: { retryPolicy: { maxRetries: 0 } } });
    await app.api('POST', `/webhooks/${h.id}/test`, { token: w.admin });
    const [failed] = await deliveriesUntil(app, w.admin, h.id, (d) => d.length === 1 && d[0].status === 'failed');
    // A user of another organisation of the same partner, a user of another partner, an organisation
    // user naming another organisation, and a partner user without access to the organisation.
    const callers: [string, string, string][] = [
      ['otherOrgAdmin', w.otherAdmin, ''],
      ['otherPartnerOrgAdmin', world.tokens.orgAdmin, ''],
      ['otherPartnerUser', world.tokens.partnerFull, ''],
      ['platformAdminNamingAnotherOrg', world.tokens.platformAdmin, `?orgId=${world.orgId}`],
      ['partnerUserNamingItsOwnOrg', world.tokens.partnerFull, `?orgId=${world.orgId}`],
    ];
    const routes: [string, string, unknown?][] = [
      ['GET', `/webhooks/${h.id}`],
      ['GET', `/webhooks/${h.id}/deliveries`],
      ['POST', `/webhooks/${h.id}/test`],
      ['POST', `/webhooks/${h.id}/retry/${failed.id}`],
      ['PATCH', `/webhooks/${h.id}`, { name: 'taken' }],
      ['POST', `/webhooks/${h.id}/rotate-secret`],
      ['DELETE', `/webhooks/${h.id}`],
    ];
    expect(routes).toHaveLength(7);
    for (const [name, token, query] of callers) {
      for (const [method, path, body] of routes) {
        const res = await app.api(method, `${path}${query}`, { token, ...(body ? { body } : {}) });
        expect(res.status, `${name} ${method} ${path}`).toBe(404);
        expect(res.body.code).toBe('not_found');
      }
    }
    const ownNamed = await app.api('GET', `/webhooks/${h.id}?orgId=${w.otherOrgId}`, { token: w.admin });
    expect(ownNamed.status).toBe(404);
    // Still there, untouched, for its owner.
    const mine = await app.api('GET', `/webhooks/${h.id}`, { token: w.admin });
    expect(mine.status).toBe(200);
    expect(mine.body.name).toBe('hook');
    rx.behave((_r, res) => {
      res.end('ok');
    });
  });

  it('partner and system callers name the organisation with orgId (400 org_required without); organisation users cannot name another', async () => {
    const partnerAdmin = world.tokens.partnerFull;
    const noOrg = await app.api('GET', '/webhooks', { token: partnerAdmin });
    expect(noOrg.status).toBe(400);
    expect(noOrg.body.code).toBe('org_required');
    expect(noOrg.body.error).toMatch(/Organization context is required/);
    const create = await app.api('POST', '/webhooks', { token: world.tokens.platformAdmin, body: { name: 'x', url: rx.url, events: ['alert.triggered'] } });
    expect(create.status).toBe(400);
    expect(create.body.code).toBe('org_required');
    const named = await app.api('POST', '/webhooks', { token: partnerAdmin, body: { name: 'p', url: rx.url, events: ['alert.triggered'], orgId: world.orgId } });
    expect(named.status).toBe(201);
    expect(named.body.orgId).toBe(world.orgId);
    const list = await app.api('GET', `/webhooks?orgId=${world.orgId}`, { token: partnerAdmin });
    expect(list.body.data.map((x: any) => x.id)).toContain(named.body.id);
    expect((await app.api('GET', `/webhooks?orgId=${w.orgId}`, { token: partnerAdmin })).status).toBe(404);
    expect((await app.api('GET', `/webhooks?orgId=${w.otherOrgId}`, { token: w.admin })).status).toBe(404);
    const readOnly = await app.api('POST', '/webhooks', { token: world.tokens.orgReadOnly, body: { name: 'x', url: rx.url, events: ['alert.triggered'] } });
    expect(readOnly.status).toBe(403);
    expect(readOnly.body.code).toBe('permission_denied');
    expect((await app.api('GET', '/webhooks', { token: world.tokens.orgReadOnly })).status).toBe(200);
  });
});
