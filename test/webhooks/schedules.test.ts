import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { clock } from '../../src/platform/clock.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { createUser, login } from '../helpers/fixtures.js';
import { ROLE } from '../access/helpers.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { startReceiver, status, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, engineOf, publish, type WebhookWorld } from './setup.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

/**
 * Retry schedules (docs/decisions.md "Retry schedules"): the named `extended` schedule beside the
 * default and a custom policy, on the controllable clock; and what Keel does when it turns a webhook
 * off by itself: the organisation's other active webhooks get `webhook.disabled` (whatever they
 * subscribed to) and the people who may fix it get an email.
 */
describe.skipIf(!backendAvailable())('webhook retry schedules and the automatic turn-off', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  let ok: Receiver;
  let smtp: SmtpTestServer;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000' } });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
    ok = await startReceiver();
  });
  afterEach(() => {
    clock.reset();
    rx.behave(status(200, 'ok'));
  });
  afterAll(async () => {
    await rx?.close();
    await ok?.close();
    await app?.close();
    await smtp?.close();
  });

  it('takes retrySchedule on create and update, with retryPolicy only for custom, and reads it back', async () => {
    const extended = await createHook(app, w.admin, { url: rx.url, retrySchedule: 'extended' });
    expect(extended).toMatchObject({ retrySchedule: 'extended', retryPolicy: { maxRetries: 7 } });
    expect(extended.retryPolicy).not.toHaveProperty('schedule');
    const plain = await createHook(app, w.admin, { url: rx.url });
    expect(plain.retrySchedule).toBe('default');
    const custom = await createHook(app, w.admin, { url: rx.url, retryPolicy: { maxRetries: 2 } });
    expect(custom).toMatchObject({ retrySchedule: 'custom', retryPolicy: { maxRetries: 2 } });

    const both = await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'x', url: rx.url, events: ['alert.triggered'], retrySchedule: 'extended', retryPolicy: { maxRetries: 1 } } });
    expect(both.status).toBe(400);
    expect(both.body.details.fields).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'retryPolicy' })]));
    expect((await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'x', url: rx.url, events: ['alert.triggered'], retrySchedule: 'weekly' } })).status).toBe(400);
    const customAlone = await app.api('PATCH', `/webhooks/${plain.id}`, { token: w.admin, body: { retrySchedule: 'custom' } });
    expect(customAlone.status).toBe(400);
    expect(customAlone.body.details.fields).toEqual(expect.arrayContaining([expect.objectContaining({ path: 'retryPolicy' })]));

    const toExtended = await app.api('PATCH', `/webhooks/${custom.id}`, { token: w.admin, body: { retrySchedule: 'extended' } });
    expect(toExtended.body).toMatchObject({ retrySchedule: 'extended', retryPolicy: { maxRetries: 7 } });
    const toCustom = await app.api('PATCH', `/webhooks/${custom.id}`, { token: w.admin, body: { retryPolicy: { maxRetries: 4 } } });
    expect(toCustom.body).toMatchObject({ retrySchedule: 'custom', retryPolicy: { maxRetries: 4 } });
    const back = await app.api('PATCH', `/webhooks/${custom.id}`, { token: w.admin, body: { retrySchedule: 'default' } });
    expect(back.body).toMatchObject({ retrySchedule: 'default', retryPolicy: { maxRetries: 5, initialDelayMs: 1000 } });
  });

  it('the extended schedule retries 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h after each failure (±10 %), then dead-letters', async () => {
    const type = 'patch.failed';
    const hook = await createHook(app, w.admin, { url: rx.url, events: [type], retrySchedule: 'extended' });
    rx.behave(status(503));
    clock.freeze();
    await publish(app, w.eventsKey, type, { n: 1 });
    let [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].attempt === 1);
    const SCHEDULE = [5_000, 5 * 60_000, 30 * 60_000, 2 * 3600_000, 5 * 3600_000, 10 * 3600_000, 10 * 3600_000];
    const JITTER = 0.1;
    for (const [i, delay] of SCHEDULE.entries()) {
      expect(d.status, `after attempt ${i + 1}`).toBe('retrying');
      const wait = Date.parse(d.nextAttemptAt) - clock.now().getTime();
      expect(wait, `retry ${i + 1}`).toBeGreaterThanOrEqual(delay * (1 - JITTER) - 1);
      expect(wait, `retry ${i + 1}`).toBeLessThanOrEqual(delay * (1 + JITTER) + 1);
      // Not before it is due: a claim just before finds nothing.
      clock.advance(wait - 1_000);
      await engineOf(app).pumpNow();
      // Signed in again: the clock moved past the access token's lifetime.
      const admin = (await login(app, w.orgAdmin)).accessToken;
      expect((await app.api('GET', `/webhooks/${hook.id}/deliveries`, { token: admin })).body.data[0].attempt).toBe(i + 1);
      clock.advance(1_000);
      await engineOf(app).pumpNow();
      [d] = await deliveriesUntil(app, admin, hook.id, (l) => l[0].attempt === i + 2 && l[0].status !== 'pending');
    }
    expect(d).toMatchObject({ status: 'failed', attempt: 8, nextAttemptAt: null });
    expect(rx.received.filter((r) => r.headers['x-service-event-type'] === type)).toHaveLength(8);
  });

  it('turning a webhook off by itself tells the other active webhooks (subscribed or not) and emails who may fix it', async () => {
    const type = 'remote.session.ended';
    const failing = await createHook(app, w.admin, { name: 'Ticketing', url: rx.url, events: [type], retryPolicy: { maxRetries: 0 } });
    // Another active webhook of the organisation, subscribed to something else; one of another organisation.
    const sibling = await createHook(app, w.admin, { name: 'Chat', url: ok.url, events: ['alert.resolved'] });
    const otherAdmin = await createUser(app, { name: 'Other Admin', org: { orgId: w.otherOrgId, roleId: ROLE.orgAdmin } });
    const elsewhere = await app.api('POST', '/webhooks', { token: w.otherAdmin, body: { name: 'Elsewhere', url: ok.url, events: ['alert.resolved'] } });
    expect(elsewhere.status).toBe(201);
    // Who is told: the organisation's admin and a partner admin with access; not a read-only user.
    const reader = await createUser(app, { name: 'Reader', org: { orgId: w.orgId, roleId: ROLE.orgReadOnly } });
    rx.behave(status(500));
    clock.freeze();
    for (let i = 0; i < 10; i++) await publish(app, w.eventsKey, type, { i });
    await deliveriesUntil(app, w.admin, failing.id, (l) => l.length === 10 && l.every((d: any) => d.status === 'failed'));
    clock.advance(24 * 3600_000);
    const admin = (await login(app, w.orgAdmin)).accessToken;
    await publish(app, w.eventsKey, type, { i: 10 });
    await deliveriesUntil(app, admin, failing.id, (l) => l.length === 11 && l.every((d: any) => d.status === 'failed'));
    expect((await app.api('GET', `/webhooks/${failing.id}`, { token: admin })).body.status).toBe('failed');

    const [told] = await ok.waitFor(1, (r) => r.headers['x-service-event-type'] === 'webhook.disabled');
    const body = JSON.parse(told!.body);
    expect(body).toMatchObject({ type: 'webhook.disabled', orgId: w.orgId, data: { webhookId: failing.id, name: 'Ticketing', deadLettered: 11 } });
    // As the event catalogue publishes it.
    const catalogue = await app.api('GET', '/webhooks/event-types?include=schema', { token: admin });
    const validate = addFormats(new Ajv2020({ strict: false })).compile(catalogue.body.data.find((t: { type: string }) => t.type === 'webhook.disabled').schema);
    expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
    expect((await app.api('GET', `/webhooks/${sibling.id}/deliveries`, { token: admin })).body.data.map((d: any) => d.event)).toEqual(['webhook.disabled']);
    const other = (await login(app, otherAdmin)).accessToken;
    expect((await app.api('GET', `/webhooks/${elsewhere.body.id}/deliveries`, { token: other })).body.data).toEqual([]);
    // The failing webhook itself is not told (it is no longer active).
    expect((await app.api('GET', `/webhooks/${failing.id}/deliveries?limit=100`, { token: admin })).body.data.some((d: any) => d.event === 'webhook.disabled')).toBe(false);

    const mail = await smtp.waitFor((m) => m.to.includes(w.orgAdmin.email.toLowerCase()) && m.subject.includes('Ticketing'), 30_000);
    expect(mail.subject).toBe('Keel turned off the webhook "Ticketing"');
    expect(mail.text).toContain('11 in a row');
    expect(mail.urls).toContain(`${app.server.keel.config.publicUrl}/integrations/webhooks/${failing.id}`);
    await smtp.waitFor((m) => m.to.includes(w.partnerAdmin.email.toLowerCase()) && m.subject.includes('Ticketing'), 30_000);
    await identityOf(app.server.keel).deferred.idle();
    expect(smtp.messages.filter((m) => m.to.includes(reader.email.toLowerCase()))).toEqual([]);
  });
});
