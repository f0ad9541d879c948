/**
 * A receiver's view (docs/decisions.md "Webhook throttling and stats"): `GET /webhooks/{id}/stats`
 * counts the last 24 hours' deliveries by hour and state, with their latency, on the controllable clock.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { ROLE } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { startReceiver, status, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from './setup.js';

const HOUR = 3_600_000;

describe.skipIf(!backendAvailable())('webhook stats', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterEach(() => clock.reset());
  afterAll(async () => {
    await rx?.close();
    await app?.close();
  });

  it('counts the last 24 hours by hour and outcome, with p50/p95 latency; older deliveries and other tenants stay out', async () => {
    const type = 'script.completed';
    const hook = await createHook(app, w.admin, { url: rx.url, events: [type], retryPolicy: { maxRetries: 0 } });
    const t0 = Math.floor(Date.now() / HOUR) * HOUR + 10 * 60_000;
    clock.freeze(t0);
    await publish(app, w.eventsKey, type, { n: 'old' });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered');
    clock.advance(24 * HOUR);
    let admin = (await login(app, w.orgAdmin)).accessToken;
    await publish(app, w.eventsKey, type, { n: 1 });
    await publish(app, w.eventsKey, type, { n: 2 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.filter((d: any) => d.status === 'delivered').length === 3);
    clock.advance(HOUR);
    admin = (await login(app, w.orgAdmin)).accessToken;
    rx.behave(status(500));
    await publish(app, w.eventsKey, type, { n: 3 });
    await deliveriesUntil(app, admin, hook.id, (l) => l.some((d: any) => d.status === 'failed'));

    const res = await app.api('GET', `/webhooks/${hook.id}/stats?window=24h`, { token: admin });
    expect(res.status).toBe(200);
    const s = res.body;
    expect(s.window).toBe('24h');
    expect(s.hours).toHaveLength(24);
    expect(s.from).toBe(new Date(Math.floor(t0 / HOUR) * HOUR + 2 * HOUR).toISOString());
    expect(s.totals).toEqual({ delivered: 2, failed: 1, retrying: 0, pending: 0 });
    expect(s.capped).toBe(false);
    const [h22, h23] = [s.hours[22], s.hours[23]];
    expect(h22).toMatchObject({ hour: new Date(Math.floor(t0 / HOUR) * HOUR + 24 * HOUR).toISOString(), delivered: 2, failed: 0 });
    expect(h23).toMatchObject({ delivered: 0, failed: 1 });
    expect(typeof h22.p50Ms).toBe('number');
    expect(h22.p95Ms).toBeGreaterThanOrEqual(h22.p50Ms);
    expect(s.hours[0]).toMatchObject({ delivered: 0, failed: 0, p50Ms: null, p95Ms: null });

    // The audit of its changes, through the audit list's target filter.
    const audit = await app.api('GET', `/audit-logs?targetType=webhook&targetId=${hook.id}`, { token: admin });
    expect(audit.status).toBe(200);
    expect(audit.body.data.map((e: any) => e.action)).toContain('webhook.create');

    // Another organisation's admin: the webhook does not exist for them.
    const otherUser = await createUser(app, { name: 'Other Org Admin 2', org: { orgId: w.otherOrgId, roleId: ROLE.orgAdmin } });
    const other = await app.api('GET', `/webhooks/${hook.id}/stats`, { token: (await login(app, otherUser)).accessToken });
    expect(other.status).toBe(404);
    expect((await app.api('GET', `/webhooks/${hook.id}/stats?window=7d`, { token: admin })).status).toBe(400);
  });
});
