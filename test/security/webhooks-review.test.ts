/**
 * The webhooks review (docs/security.md "Webhooks: secrets, amplification, rotation, test
 * deliveries"), each finding reproduced through HTTP: header values are write-only and a URL with
 * userinfo is refused; test deliveries are marked and a real event type needs events:publish;
 * rotations are serialised and every rotated-out secret keeps its own overlap; limits (webhooks per
 * organisation, 429 on publishing, tests and retries), one retry per failed delivery, the payload
 * stored once per event, retention of finished deliveries; site-restricted callers see no delivery
 * of a site they cannot see, and webhook writes are organisation-wide.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, backendAvailable, type TestApp } from '../helpers/app.js';
import { login } from '../helpers/fixtures.js';
import { insertRole, orgUserWithRole, ROLE } from '../access/helpers.js';
import { standardSignedBy, startReceiver, status, verifyServiceSignature, verifyStandard, type Receiver } from '../webhooks/receiver.js';
import { behindLock, expectOneWinner, raceTest, together } from '../helpers/race.js';
import { eq } from 'drizzle-orm';
import { enroll, enrollmentKey } from '../agents/helpers.js';
import { webhookDeliveries, webhookPayloads } from '../../src/modules/webhooks/schema.js';
import { sweepDeliveries } from '../../src/modules/webhooks/retention.js';
import { enqueueDeliveries } from '../../src/modules/webhooks/service.js';
import { newId } from '../../src/platform/db/columns.js';
import { clock } from '../../src/platform/clock.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from '../webhooks/setup.js';

describe.skipIf(!backendAvailable())('webhooks review', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let reader: string;

  beforeAll(async () => {
    app = await startTestApp({ env: { EVENTS_PUBLISH_LIMIT: '20', WEBHOOK_MANUAL_LIMIT: '5', WEBHOOK_MANUAL_CALLER_LIMIT: '15' } });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
    reader = (await login(app, w.orgReadOnly)).accessToken;
  });
  afterAll(async () => {
    await rx.close();
    await app.close();
  });

  describe('write-only secrets', () => {
    it('a header value is never in a read (GET one, list, PATCH answer); a PATCH entry without value keeps sending the stored one', async () => {
      const credential = 'Bearer receiver-credential-XYZ';
      const created = await app.api('POST', '/webhooks', {
        token: w.admin,
        body: { name: 'creds', url: rx.url, events: ['alert.triggered'], headers: [{ key: 'Authorization', value: credential }, { key: 'X-Tenant', value: 'tenant-7' }] },
      });
      expect(created.status).toBe(201);
      expect(created.body.headers).toEqual([{ key: 'Authorization', valueSet: true }, { key: 'X-Tenant', valueSet: true }]);
      const one = await app.api('GET', `/webhooks/${created.body.id}`, { token: reader });
      expect(one.status).toBe(200);
      expect(one.body.headers).toEqual([{ key: 'Authorization', valueSet: true }, { key: 'X-Tenant', valueSet: true }]);
      const list = await app.api('GET', '/webhooks?limit=100', { token: reader });
      expect(list.status).toBe(200);
      for (const body of [created.body, one.body, list.body]) expect(JSON.stringify(body)).not.toContain('receiver-credential-XYZ');

      // Keep Authorization (no value), replace X-Tenant, add X-New.
      const patched = await app.api('PATCH', `/webhooks/${created.body.id}`, {
        token: w.admin,
        body: { headers: [{ key: 'authorization' }, { key: 'X-Tenant', value: 'tenant-8' }, { key: 'X-New', value: 'n' }] },
      });
      expect(patched.status).toBe(200);
      expect(patched.body.headers).toEqual([{ key: 'authorization', valueSet: true }, { key: 'X-Tenant', valueSet: true }, { key: 'X-New', valueSet: true }]);
      expect(JSON.stringify(patched.body)).not.toContain('receiver-credential-XYZ');
      const test = await app.api('POST', `/webhooks/${created.body.id}/test`, { token: w.admin });
      expect(test.status).toBe(202);
      const [got] = await rx.waitFor(1, (r) => r.headers['x-service-delivery-id'] === test.body.delivery.id);
      expect(got!.headers.authorization).toBe(credential);
      expect(got!.headers['x-tenant']).toBe('tenant-8');
      expect(got!.headers['x-new']).toBe('n');

      // An entry without value for a header that has none stored: 400 naming the entry; nothing changed.
      const unknown = await app.api('PATCH', `/webhooks/${created.body.id}`, { token: w.admin, body: { headers: [{ key: 'X-Unknown' }] } });
      expect(unknown.status).toBe(400);
      expect(unknown.body.code).toBe('validation_failed');
      expect(unknown.body.details.fields).toEqual([{ path: 'headers.0.value', message: expect.any(String) }]);
      expect((await app.api('GET', `/webhooks/${created.body.id}`, { token: w.admin })).body.headers).toHaveLength(3);
      // Left out: removed.
      const removed = await app.api('PATCH', `/webhooks/${created.body.id}`, { token: w.admin, body: { headers: [] } });
      expect(removed.body.headers).toEqual([]);
    });

    it('a URL with userinfo is refused at create and update: 400 invalid_webhook_url naming url', async () => {
      const withUser = rx.url.replace('http://', 'http://alice:pw@');
      const create = await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'u', url: withUser, events: ['alert.triggered'] } });
      expect(create.status).toBe(400);
      expect(create.body.code).toBe('invalid_webhook_url');
      expect(create.body.details.fields).toEqual([{ path: 'url', message: expect.stringMatching(/credentials/) }]);
      const hook = await createHook(app, w.admin, { url: rx.url });
      const update = await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { url: rx.url.replace('http://', 'http://bob@') } });
      expect(update.status).toBe(400);
      expect(update.body.code).toBe('invalid_webhook_url');
      expect(update.body.details.fields[0].path).toBe('url');
    });
  });

  describe('test deliveries', () => {
    it('a test delivery is marked in a header and in the signed body; naming a real event type needs events:publish', async () => {
      const secret = 'test-marking-secret-0123456789';
      const hook = await createHook(app, w.admin, { url: rx.url, secret, events: ['device.decommissioned'] });
      // webhooks:read + webhooks:write only: the default test event is allowed, a real event type is not.
      const role = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Hook Writer', perms: ['webhooks:read', 'webhooks:write'] });
      const { token: writer } = await orgUserWithRole(app, w.orgId, role);
      const forged = await app.api('POST', `/webhooks/${hook.id}/test`, { token: writer, body: { event: 'device.decommissioned', payload: { deviceId: 'd-1' } } });
      expect(forged.status).toBe(403);
      expect(forged.body.code).toBe('permission_denied');
      expect(forged.body.details).toEqual({ required: 'events:publish' });
      const plain = await app.api('POST', `/webhooks/${hook.id}/test`, { token: writer });
      expect(plain.status).toBe(202);
      const [got] = await rx.waitFor(1, (r) => r.headers['x-service-delivery-id'] === plain.body.delivery.id);
      expect(got!.headers['x-service-test']).toBe('true');
      expect(JSON.parse(got!.body)).toMatchObject({ type: 'webhook.test', test: true });
      expect(verifyServiceSignature(secret, got!)).toBe(true);
      expect(verifyStandard(secret, got!)).toBe(true);

      // With events:publish (the Organisation Admin holds it) a real event type goes, marked as a test.
      const named = await app.api('POST', `/webhooks/${hook.id}/test`, { token: w.admin, body: { event: 'device.decommissioned', payload: { deviceId: 'd-1' } } });
      expect(named.status).toBe(202);
      const [real] = await rx.waitFor(1, (r) => r.headers['x-service-delivery-id'] === named.body.delivery.id);
      expect(real!.headers['x-service-event-type']).toBe('device.decommissioned');
      expect(real!.headers['x-service-test']).toBe('true');
      expect(JSON.parse(real!.body)).toEqual(expect.objectContaining({ type: 'device.decommissioned', test: true, data: { deviceId: 'd-1' } }));

      // A real event whose data says "test": true is not marked.
      const event = await publish(app, w.eventsKey, 'device.decommissioned', { test: true, deviceId: 'd-2' });
      const [published] = await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === event.id);
      expect(published!.headers['x-service-test']).toBeUndefined();
      expect(JSON.parse(published!.body).test).toBeUndefined();
    });
  });

  describe('rotation', () => {
    const A = 'rotation-secret-A-0123456789';
    const B = 'rotation-secret-B-0123456789';
    const C = 'rotation-secret-C-0123456789';

    it('A→B→C: every rotated-out secret signs until its own expiry (A is not cut short by C)', async () => {
      const hook = await createHook(app, w.admin, { url: rx.url, secret: A, events: ['script.started'] });
      try {
        expect((await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: { secret: B } })).status).toBe(200);
        clock.advance(60 * 60_000);
        const admin = (await login(app, w.orgAdmin)).accessToken;
        const third = await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: admin, body: { secret: C } });
        expect(third.status).toBe(200);
        const signedBy = async () => {
          const event = await publish(app, w.eventsKey, 'script.started', { n: Math.random() });
          const [got] = await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === event.id);
          return {
            got: got!,
            all: [A, B, C].filter((s) => standardSignedBy(s, got!)),
          };
        };
        const first = await signedBy();
        expect(first.all).toEqual([A, B, C]);
        expect(verifyServiceSignature(C, first.got)).toBe(true);
        expect(verifyServiceSignature(B, first.got, 'x-service-signature-previous')).toBe(true);
        expect(first.got.headers['webhook-signature']!.split(' ')).toHaveLength(3);

        // 23 h later (24 h after A's rotation, plus a minute): A has had its 24 hours; B keeps its own.
        clock.advance(23 * 60 * 60_000 + 60_000);
        expect((await signedBy()).all).toEqual([B, C]);
        clock.advance(60 * 60_000);
        expect((await signedBy()).all).toEqual([C]);
      } finally {
        clock.reset();
      }
    });

    it('at most three rotated-out secrets sign beside the current one: the next rotation within their overlap is 409 too_many_rotations', async () => {
      const hook = await createHook(app, w.admin, { url: rx.url, secret: A });
      for (const s of [B, C, 'rotation-secret-D-0123456789']) expect((await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: { secret: s } })).status).toBe(200);
      const refused = await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: {} });
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('too_many_rotations');
      expect(refused.body.details.nextRotationAt).toEqual(expect.any(String));
      // A PATCH of the secret replaces every secret at once; rotations are possible again.
      expect((await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.admin, body: { secret: 'rotation-secret-E-0123456789' } })).status).toBe(200);
      expect((await app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: {} })).status).toBe(200);
    });

    raceTest('two rotations at once are serialised: both secrets (and the one before) sign', async () => {
      const hook = await createHook(app, w.admin, { url: rx.url, secret: A, events: ['script.failed'] });
      // Both requests wait behind a lock on the table, so they meet: without serialisation both read the
      // same secret as their previous one and the first's new secret is lost.
      const answers = await behindLock(app.server.keel.config.DATABASE_URL!, 'lock table webhooks in exclusive mode', 2, () =>
        together(2, () => app.api('POST', `/webhooks/${hook.id}/rotate-secret`, { token: w.admin, body: {} })),
      );
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      const [s1, s2] = answers.map((a) => a.body.secret as string);
      expect(s1).not.toBe(s2);
      const event = await publish(app, w.eventsKey, 'script.failed', {});
      const [got] = await rx.waitFor(1, (r) => r.headers['x-service-event-id'] === event.id);
      for (const s of [A, s1!, s2!]) expect(standardSignedBy(s, got!), s).toBe(true);
    });
  });

  describe('limits and retries', () => {
    let failing: Receiver;
    beforeAll(async () => {
      failing = await startReceiver();
      failing.behave(status(500));
    });
    afterAll(async () => {
      await failing.close();
    });

    /** A webhook without retries whose test delivery was dead-lettered, and that delivery. */
    async function failedDelivery(token: string): Promise<{ hook: any; delivery: any }> {
      const hook = await createHook(app, token, { url: failing.url, retryPolicy: { maxRetries: 0 } });
      expect((await app.api('POST', `/webhooks/${hook.id}/test`, { token })).status).toBe(202);
      const [delivery] = await deliveriesUntil(app, token, hook.id, (d) => d.length === 1 && d[0].status === 'failed');
      return { hook, delivery };
    }

    it('webhooks per organisation are capped (WEBHOOKS_PER_ORG_LIMIT, default 25): 409 webhook_limit_reached at 26, room again after a delete', async () => {
      const made: string[] = [];
      for (let i = 0; i < 25; i++) made.push((await createHook(app, w.otherAdmin, { name: `cap-${i}`, url: rx.url })).id);
      const refused = await app.api('POST', '/webhooks', { token: w.otherAdmin, body: { name: 'cap-26', url: rx.url, events: ['alert.triggered'] } });
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('webhook_limit_reached');
      expect(refused.body.details).toEqual({ limit: 25 });
      expect((await app.api('GET', '/webhooks?limit=100', { token: w.otherAdmin })).body.pagination.total).toBe(25);
      // One deleted: room for one more.
      expect((await app.api('DELETE', `/webhooks/${made[0]}`, { token: w.otherAdmin })).status).toBe(204);
      expect((await app.api('POST', '/webhooks', { token: w.otherAdmin, body: { name: 'cap-again', url: rx.url, events: ['alert.triggered'] } })).status).toBe(201);
      for (const id of made.slice(1)) await app.api('DELETE', `/webhooks/${id}`, { token: w.otherAdmin });
    });

    it('POST /events is limited per API key: 429 with Retry-After (EVENTS_PUBLISH_LIMIT a minute)', async () => {
      const key = (await app.api('POST', '/api-keys', { token: w.admin, body: { name: 'burst', permissions: [{ resource: 'events', action: 'publish' }] } })).body.key as string;
      for (let i = 0; i < 20; i++) expect((await app.api('POST', '/events', { token: key, body: { type: 'alert.resolved', data: {} } })).status).toBe(202);
      const refused = await app.api('POST', '/events', { token: key, body: { type: 'alert.resolved', data: {} } });
      expect(refused.status).toBe(429);
      expect(refused.body.code).toBe('rate_limited');
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
      // Another key is not held by this one's limit.
      expect((await app.api('POST', '/events', { token: w.eventsKey, body: { type: 'alert.resolved', data: {} } })).status).toBe(202);
    });

    it('parallel publishes of one API key: exactly EVENTS_PUBLISH_LIMIT are accepted, the rest 429', async () => {
      const key = (await app.api('POST', '/api-keys', { token: w.admin, body: { name: 'parallel', permissions: [{ resource: 'events', action: 'publish' }] } })).body.key as string;
      const answers = await Promise.all(Array.from({ length: 30 }, () => app.api('POST', '/events', { token: key, body: { type: 'alert.resolved', data: {} } })));
      expect(answers.filter((a) => a.status === 202)).toHaveLength(20);
      const refused = answers.filter((a) => a.status !== 202);
      expect(refused).toHaveLength(10);
      for (const r of refused) expect([r.status, r.body.code, Number(r.headers.get('retry-after')) > 0]).toEqual([429, 'rate_limited', true]);
    });

    it('tests and retries are limited per webhook and per caller: 429 with Retry-After', async () => {
      const { token } = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
      const hooks = [];
      for (let i = 0; i < 3; i++) hooks.push(await createHook(app, w.admin, { url: rx.url }));
      const test = (hook: any, t = token) => app.api('POST', `/webhooks/${hook.id}/test`, { token: t });
      for (let i = 0; i < 5; i++) expect((await test(hooks[0])).status).toBe(202);
      const perHook = await test(hooks[0]);
      expect(perHook.status).toBe(429);
      expect(Number(perHook.headers.get('retry-after'))).toBeGreaterThan(0);
      // The caller has spent 6 of 15: 5 + 4 more pass on other webhooks, the 16th is refused as the caller's.
      for (let i = 0; i < 5; i++) expect((await test(hooks[1])).status).toBe(202);
      for (let i = 0; i < 4; i++) expect((await test(hooks[2])).status).toBe(202);
      const perCaller = await test(hooks[2]);
      expect(perCaller.status).toBe(429);
      expect(perCaller.headers.get('retry-after')).toMatch(/^\d+$/);
      // Another caller still tests that webhook (it has 1 of its 5 left).
      expect((await test(hooks[2], w.admin)).status).toBe(202);
      // A retry spends the same points: this caller is out of them.
      const { hook, delivery } = await failedDelivery(w.admin);
      const retry = await app.api('POST', `/webhooks/${hook.id}/retry/${delivery.id}`, { token });
      expect(retry.status).toBe(429);
    });

    it('a failed delivery is retried once: the retry names it (retryOf); a second retry is 409 already_retried', async () => {
      const { hook, delivery } = await failedDelivery(w.admin);
      const first = await app.api('POST', `/webhooks/${hook.id}/retry/${delivery.id}`, { token: w.admin });
      expect(first.status).toBe(202);
      const second = await app.api('POST', `/webhooks/${hook.id}/retry/${delivery.id}`, { token: w.admin });
      expect(second.status).toBe(409);
      expect(second.body.code).toBe('already_retried');
      expect(second.body.details).toEqual({ retryDeliveryId: first.body.delivery.id });
      const list = await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 2 && d.every((x: any) => x.status === 'failed'));
      expect(list.find((d: any) => d.id === first.body.delivery.id).retryOf).toBe(delivery.id);
      // The retry itself failed: it may be retried in turn, once.
      expect((await app.api('POST', `/webhooks/${hook.id}/retry/${first.body.delivery.id}`, { token: w.admin })).status).toBe(202);
    });

    it('a retry of another tenant\'s delivery through one\'s own webhook is 404', async () => {
      const mine = await createHook(app, w.admin, { url: rx.url });
      const { delivery: foreign } = await failedDelivery(w.otherAdmin);
      const res = await app.api('POST', `/webhooks/${mine.id}/retry/${foreign.id}`, { token: w.admin });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('not_found');
    });

    raceTest('10 parallel retries of one failed delivery make exactly one new delivery', async () => {
      const { hook, delivery } = await failedDelivery(w.admin);
      const { token } = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin);
      const answers = await together(10, () => app.api('POST', `/webhooks/${hook.id}/retry/${delivery.id}`, { token }));
      expectOneWinner(answers, 202, [409, 429]);
      const rows = await app.server.keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.webhookId, hook.id));
      expect(rows).toHaveLength(2);
      expect(rows.filter((r) => r.retryOf === delivery.id)).toHaveLength(1);
    });
  });

  describe('site restriction', () => {
    it('a caller restricted to site S1a sees no delivery of an S1b event (payload siteId, or the device\'s), nor events without placement, in the history or in the numbers', async () => {
      const site = async (name: string) => {
        const res = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.admin, body: { name } });
        expect(res.status).toBe(201);
        return res.body.id as string;
      };
      const [s1a, s1b] = [await site('S1a'), await site('S1b')];
      const hook = await createHook(app, w.admin, { url: rx.url, events: ['device.enrolled', 'device.offline', 'webhook.test'] });
      const inA = await enroll(app, await enrollmentKey(app, w.admin, w.orgId, { name: 'a', siteId: s1a }));
      const inB = await enroll(app, await enrollmentKey(app, w.admin, w.orgId, { name: 'b', siteId: s1b }));
      // Placed through the device the data names (no siteId in the data).
      await publish(app, w.eventsKey, 'device.offline', { deviceId: inA.deviceId });
      await publish(app, w.eventsKey, 'device.offline', { deviceId: inB.deviceId });
      await publish(app, w.eventsKey, 'device.offline', { deviceId: 'not-a-uuid' });
      expect((await app.api('POST', `/webhooks/${hook.id}/test`, { token: w.admin })).status).toBe(202);
      // Settled (delivered), so the reads below see the same numbers whenever they run.
      const all = await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 6 && d.every((x: any) => x.status === 'delivered'));

      const { token: restrictedReader } = await orgUserWithRole(app, w.orgId, ROLE.orgReadOnly, { siteIds: [s1a] });
      const seen = await app.api('GET', `/webhooks/${hook.id}/deliveries?limit=100`, { token: restrictedReader });
      expect(seen.status).toBe(200);
      const mine = all.filter((d: any) => d.payload.data.deviceId === inA.deviceId).map((d: any) => d.id).sort();
      expect(mine).toHaveLength(2);
      expect(seen.body.data.map((d: any) => d.id).sort()).toEqual(mine);
      expect(seen.body.pagination.total).toBe(2);
      expect(JSON.stringify(seen.body)).not.toContain(inB.deviceId);
      expect(JSON.stringify(seen.body)).not.toContain(s1b);
      // Restricted by device group (it has none): nothing placed passes.
      const { token: groupReader } = await orgUserWithRole(app, w.orgId, ROLE.orgReadOnly, { deviceGroupIds: [] });
      expect((await app.api('GET', `/webhooks/${hook.id}/deliveries`, { token: groupReader })).body.data).toEqual([]);

      // The numbers of the read and of the list count the same deliveries as the history: S1a's two.
      const one = await app.api('GET', `/webhooks/${hook.id}`, { token: restrictedReader });
      expect(one.status).toBe(200);
      expect(one.body.deliveryStats.total).toBe(2);
      expect(one.body.successCount).toBe(one.body.deliveryStats.attempts.succeeded);
      expect(one.body.failureCount).toBe(one.body.deliveryStats.attempts.failed);
      const listed = (await app.api('GET', '/webhooks?limit=100', { token: restrictedReader })).body.data.find((h: any) => h.id === hook.id);
      expect(listed.deliveryStats).toEqual(one.body.deliveryStats);
      expect((await app.api('GET', `/webhooks/${hook.id}`, { token: groupReader })).body.deliveryStats.total).toBe(0);
      expect((await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin })).body.deliveryStats.total).toBe(6);
    });

    it('webhook writes are organisation-wide: a site-restricted administrator gets 403 whole_org_access_required', async () => {
      const res = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.admin, body: { name: 'S-writes' } });
      const { token } = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin, { siteIds: [res.body.id] });
      const hook = await createHook(app, w.admin, { url: rx.url });
      const calls: [string, string, unknown?][] = [
        ['POST', '/webhooks', { name: 'x', url: rx.url, events: ['alert.triggered'] }],
        ['PATCH', `/webhooks/${hook.id}`, { name: 'y' }],
        ['POST', `/webhooks/${hook.id}/test`],
        ['POST', `/webhooks/${hook.id}/retry/${hook.id}`],
        ['POST', `/webhooks/${hook.id}/rotate-secret`, {}],
        ['DELETE', `/webhooks/${hook.id}`],
      ];
      for (const [method, path, body] of calls) {
        const answer = await app.api(method, path, { token, ...(body ? { body } : {}) });
        expect(answer.status, `${method} ${path}`).toBe(403);
        expect(answer.body.code).toBe('whole_org_access_required');
      }
      expect((await app.api('GET', `/webhooks/${hook.id}`, { token: w.admin })).body.name).toBe('hook');
    });
  });

  describe('bounded growth', () => {
    it('an event fanned out to 5 webhooks stores its payload once; every delivery sends it', async () => {
      const hooks = [];
      for (let i = 0; i < 5; i++) hooks.push(await createHook(app, w.admin, { url: rx.url, events: ['patch.failed'] }));
      const big = 'x'.repeat(64 * 1024);
      const event = await publish(app, w.eventsKey, 'patch.failed', { big });
      const got = await rx.waitFor(5, (r) => r.headers['x-service-event-id'] === event.id);
      for (const r of got) expect(JSON.parse(r.body).data.big).toBe(big);
      const db = app.server.keel.db;
      const rows = await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.eventId, event.id));
      expect(rows.map((r) => r.webhookId).sort()).toEqual(hooks.map((h) => h.id).sort());
      expect(new Set(rows.map((r) => r.payloadId)).size).toBe(1);
      const payloads = await db.select().from(webhookPayloads).where(eq(webhookPayloads.id, rows[0]!.payloadId));
      expect(payloads).toHaveLength(1);
    });

    it('retention: finished deliveries older than the period are swept with their orphaned payloads; pending and retrying ones are kept', async () => {
      const db = app.server.keel.db;
      const done = await createHook(app, w.admin, { url: rx.url, events: ['automation.completed'] });
      const slow = await startReceiver();
      slow.behave(status(503));
      const retrying = await createHook(app, w.admin, { url: slow.url, events: ['automation.completed'], retryPolicy: { initialDelayMs: 3_600_000, maxDelayMs: 3_600_000 } });
      const held = await createHook(app, w.admin, { url: rx.url, events: ['automation.failed'] });
      await app.api('PATCH', `/webhooks/${held.id}`, { token: w.admin, body: { status: 'paused' } });
      try {
        const finished = await publish(app, w.eventsKey, 'automation.completed', { n: 1 });
        // A paused webhook's delivery stays pending (arranged: routing skips paused webhooks).
        const pending = { id: newId() };
        await enqueueDeliveries(db, [held.id], w.orgId, 'automation.failed', pending.id, JSON.stringify({ id: pending.id, type: 'automation.failed', timestamp: clock.now().toISOString(), orgId: w.orgId, data: {} }));
        await deliveriesUntil(app, w.admin, done.id, (d) => d.some((x: any) => x.eventId === finished.id && x.status === 'delivered'));
        await deliveriesUntil(app, w.admin, retrying.id, (d) => d.some((x: any) => x.eventId === finished.id && x.status === 'retrying'));
        const payloadOf = async (eventId: string) => (await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.eventId, eventId)))[0]!.payloadId;
        const finishedPayload = await payloadOf(finished.id);
        // An event whose webhook is deleted leaves an orphaned payload behind.
        const gone = await createHook(app, w.admin, { url: rx.url, events: ['automation.started'] });
        const orphanEvent = await publish(app, w.eventsKey, 'automation.started', {});
        await deliveriesUntil(app, w.admin, gone.id, (d) => d.length === 1 && d[0].status === 'delivered');
        const orphanPayload = await payloadOf(orphanEvent.id);
        await app.api('DELETE', `/webhooks/${gone.id}`, { token: w.admin });

        // 29 days on: nothing is old enough (the orphan is an event, kept WEBHOOK_EVENT_RETENTION_DAYS for a replay).
        clock.advance(29 * 24 * 3600_000);
        expect(await sweepDeliveries(app.server.keel)).toMatchObject({ deliveries: 0 });
        expect(await db.select().from(webhookPayloads).where(eq(webhookPayloads.id, orphanPayload))).toHaveLength(1);
        // Past 30 days: the delivered one goes; the retrying and the pending ones stay, with the payloads they refer to.
        clock.advance(2 * 24 * 3600_000);
        const swept = await sweepDeliveries(app.server.keel);
        expect(swept.deliveries).toBeGreaterThanOrEqual(1);
        expect(await db.select().from(webhookPayloads).where(eq(webhookPayloads.id, orphanPayload))).toHaveLength(0);
        const admin = (await login(app, w.orgAdmin)).accessToken;
        const list = async (id: string) => (await app.api('GET', `/webhooks/${id}/deliveries?limit=100`, { token: admin })).body.data as any[];
        expect((await list(done.id)).filter((d) => d.eventId === finished.id)).toEqual([]);
        expect((await list(retrying.id)).map((d) => [d.eventId, d.status])).toEqual([[finished.id, 'retrying']]);
        expect((await list(held.id)).map((d) => [d.eventId, d.status])).toEqual([[pending.id, 'pending']]);
        expect(await db.select().from(webhookPayloads).where(eq(webhookPayloads.id, finishedPayload))).toHaveLength(1);
        // Once the retrying one is gone too (its webhook deleted), its payload is an orphan and is swept.
        await app.api('DELETE', `/webhooks/${retrying.id}`, { token: admin });
        await sweepDeliveries(app.server.keel);
        expect(await db.select().from(webhookPayloads).where(eq(webhookPayloads.id, finishedPayload))).toHaveLength(0);
      } finally {
        clock.reset();
        await slow.close();
      }
    });
  });

  describe('tenancy', () => {
    it('the webhook list is filtered by organisation: exactly the organisation\'s own webhooks, while another has some', async () => {
      const t = await createWebhookWorld(app);
      const a1 = await createHook(app, t.admin, { name: 'a1', url: rx.url });
      const a2 = await createHook(app, t.admin, { name: 'a2', url: rx.url });
      const b1 = await createHook(app, t.otherAdmin, { name: 'b1', url: rx.url });
      const listA = await app.api('GET', '/webhooks?limit=100', { token: t.admin });
      expect(listA.body.data.map((h: any) => h.id).sort()).toEqual([a1.id, a2.id].sort());
      expect(listA.body.pagination.total).toBe(2);
      const listB = await app.api('GET', '/webhooks?limit=100', { token: t.otherAdmin });
      expect(listB.body.data.map((h: any) => h.id)).toEqual([b1.id]);
    });
  });
});
