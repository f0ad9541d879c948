import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { clock } from '../../src/platform/clock.js';
import { login } from '../helpers/fixtures.js';
import { createWorld, insertRole, partnerUserWithRole, type World } from '../access/helpers.js';
import { ok, startReceiver, status, type Receiver } from './receiver.js';
import { deliveriesUntil, publish } from './setup.js';

/**
 * Partner-wide webhooks (docs/decisions.md "Webhook replay and partner-wide webhooks"): a webhook
 * with `partnerId` receives the events of every organisation of the partner, new ones included, each
 * body naming its organisation; only partner users with access to every organisation of it (and
 * system callers) manage it; an organisation's users never see it.
 */
describe.skipIf(!backendAvailable())('partner-wide webhooks', () => {
  let app: TestApp;
  let w: World;
  let sibling: World;
  let rx: Receiver;
  let key: string;
  let siblingKey: string;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    sibling = await createWorld(app);
    rx = await startReceiver();
    const mk = async (token: string) => (await app.api('POST', '/api-keys', { token, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } })).body.key as string;
    key = await mk(w.tokens.partnerFull);
    siblingKey = await mk(sibling.tokens.partnerFull);
  });
  afterEach(() => {
    clock.reset();
    rx.behave(ok);
  });
  afterAll(async () => {
    await rx?.close();
    await app?.close();
  });

  const create = (token: string, body: Record<string, unknown>) =>
    app.api('POST', '/webhooks', { token, body: { name: 'PSA', url: rx.url, events: ['alert.triggered'], ...body } });

  it('receives the events of every organisation of the partner, one created after it included; not a sibling partner\'s', async () => {
    const made = await create(w.tokens.partnerFull, { partnerId: w.partnerId });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ partnerId: w.partnerId, orgId: null, status: 'active' });
    const hook = made.body;
    const newOrg = await app.api('POST', '/orgs', { token: w.tokens.partnerFull, body: { name: 'Org C' } });
    expect(newOrg.status).toBe(201);
    const foreign = await publish(app, siblingKey, 'alert.triggered', { n: 0 }, sibling.orgId);
    const inA = await publish(app, key, 'alert.triggered', { n: 1 }, w.orgId);
    const inC = await publish(app, key, 'alert.triggered', { n: 2 }, newOrg.body.id);
    const deliveries = await deliveriesUntil(app, w.tokens.partnerFull, hook.id, (l) => l.length === 2 && l.every((d) => d.status === 'delivered'));
    expect(deliveries.map((d) => [d.eventId, d.orgId]).sort()).toEqual([[inA.id, w.orgId], [inC.id, newOrg.body.id]].sort());
    const bodies = (await rx.waitFor(2, (r) => [inA.id, inC.id].includes(r.headers['webhook-id'] ?? ''))).map((r) => JSON.parse(r.body));
    expect(bodies.map((b) => [b.id, b.orgId]).sort()).toEqual([[inA.id, w.orgId], [inC.id, newOrg.body.id]].sort());
    expect(rx.received.some((r) => r.headers['webhook-id'] === foreign.id)).toBe(false);

    // Listed with ?partnerId=, never among an organisation's webhooks.
    const listed = await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: w.tokens.partnerFull });
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((x: any) => x.id)).toEqual([hook.id]);
    const ofOrg = await app.api('GET', `/webhooks?orgId=${w.orgId}`, { token: w.tokens.partnerFull });
    expect(ofOrg.body.data.map((x: any) => x.id)).not.toContain(hook.id);
    // Naming one of its organisations does not hide it from who manages the partner's webhooks.
    expect((await app.api('GET', `/webhooks/${hook.id}?orgId=${w.orgId}`, { token: w.tokens.partnerFull })).status).toBe(200);
    expect((await app.api('GET', `/webhooks/${hook.id}?orgId=${w.orgId}`, { token: w.tokens.platformAdmin })).status).toBe(200);
    // The platform administrator names the partner.
    const platform = await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: w.tokens.platformAdmin });
    expect(platform.body.data.map((x: any) => x.id)).toEqual([hook.id]);
    const audit = await app.api('GET', `/audit-logs?action=webhook.create&targetId=${hook.id}`, { token: w.tokens.partnerFull });
    expect(audit.body.data).toHaveLength(1);
  });

  it('only partner users with every organisation of the partner and webhooks:write manage it; organisations\' users and other partners never see it', async () => {
    const hook = (await create(w.tokens.partnerFull, { partnerId: w.partnerId, name: 'Guarded' })).body;
    // An organisation admin of the partner: cannot create one, list them, read, change or delete it.
    expect((await create(w.tokens.orgAdmin, { partnerId: w.partnerId })).status).toBe(404);
    expect((await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.tokens.orgAdmin, body: { status: 'paused' } })).status).toBe(404);
    expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await app.api('GET', '/webhooks', { token: w.tokens.orgAdmin })).body.data.map((x: any) => x.id)).not.toContain(hook.id);

    // A partner user with some organisations only: 403 on partner-level requests, 404 on the webhook.
    const writer = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, perms: ['webhooks:read', 'webhooks:write'] });
    const selected = await partnerUserWithRole(app, w.partnerId, writer, 'selected', [w.orgId, w.otherOrgId]);
    const refused = await create(selected.token, { partnerId: w.partnerId });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('full_org_access_required');
    expect((await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: selected.token })).body.code).toBe('full_org_access_required');
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: selected.token })).status).toBe(404);

    // Whole-partner access without webhooks:write: reads, no writes.
    const reader = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, perms: ['webhooks:read'] });
    const readOnly = await partnerUserWithRole(app, w.partnerId, reader, 'all');
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: readOnly.token })).status).toBe(200);
    expect((await app.api('PATCH', `/webhooks/${hook.id}`, { token: readOnly.token, body: { status: 'paused' } })).status).toBe(403);
    expect((await create(readOnly.token, { partnerId: w.partnerId })).status).toBe(403);
    // An API key of the partner's administrator without webhooks:write.
    const readKey = (await app.api('POST', '/api-keys', { token: w.tokens.partnerFull, body: { name: 'read', permissions: [{ resource: 'webhooks', action: 'read' }] } })).body.key;
    expect((await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: readKey })).status).toBe(200);
    const keyRefused = await create(readKey, { partnerId: w.partnerId });
    expect(keyRefused.status).toBe(403);
    expect(keyRefused.body.code).toBe('permission_denied');
    expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: readKey })).status).toBe(403);

    // Another partner's administrator: 404 whatever it names.
    expect((await app.api('GET', `/webhooks/${hook.id}`, { token: sibling.tokens.partnerFull })).status).toBe(404);
    expect((await app.api('PATCH', `/webhooks/${hook.id}`, { token: sibling.tokens.partnerFull, body: { status: 'paused' } })).status).toBe(404);
    expect((await app.api('GET', `/webhooks?partnerId=${w.partnerId}`, { token: sibling.tokens.partnerFull })).status).toBe(404);
    expect((await create(sibling.tokens.partnerFull, { partnerId: w.partnerId })).status).toBe(404);

    // Exactly one owner.
    const both = await create(w.tokens.partnerFull, { partnerId: w.partnerId, orgId: w.orgId });
    expect(both.status).toBe(400);
    // The partner's administrator changes and deletes it.
    expect((await app.api('PATCH', `/webhooks/${hook.id}`, { token: w.tokens.partnerFull, body: { status: 'paused' } })).body.status).toBe('paused');
    expect((await app.api('DELETE', `/webhooks/${hook.id}`, { token: w.tokens.partnerFull })).status).toBe(204);
  });

  it('set to failed by Keel, a partner-wide webhook tells the partner\'s other partner-wide webhooks, not the organisations\'', async () => {
    const type = 'remote.file.transferred';
    const failing = (await create(w.tokens.partnerFull, { partnerId: w.partnerId, name: 'Failing', url: `${rx.url}?failing`, events: [type], retryPolicy: { maxRetries: 0 } })).body;
    const other = (await create(w.tokens.partnerFull, { partnerId: w.partnerId, name: 'Other', url: `${rx.url}?other`, events: ['alert.resolved'] })).body;
    const ofOrg = (await app.api('POST', '/webhooks', { token: w.tokens.orgAdmin, body: { name: 'Org', url: `${rx.url}?org`, events: ['alert.resolved'] } })).body;
    rx.behave((r, res, raw) => (r.path.endsWith('?failing') ? status(500)(r, res, raw) : ok(r, res, raw)));
    clock.freeze();
    for (let i = 0; i < 10; i++) await publish(app, key, type, { i }, i % 2 ? w.orgId : w.otherOrgId);
    await deliveriesUntil(app, w.tokens.partnerFull, failing.id, (l) => l.length === 10 && l.every((d) => d.status === 'failed'));
    clock.advance(24 * 3600_000);
    const token = (await login(app, w.partnerFull)).accessToken;
    await publish(app, key, type, { i: 10 }, w.orgId);
    await deliveriesUntil(app, token, failing.id, (l) => l.length === 11 && l.every((d) => d.status === 'failed'));
    expect((await app.api('GET', `/webhooks/${failing.id}`, { token })).body.status).toBe('failed');
    const [told] = await rx.waitFor(1, (r) => r.path.endsWith('?other') && r.headers['x-service-event-type'] === 'webhook.disabled');
    expect(JSON.parse(told!.body)).toMatchObject({ type: 'webhook.disabled', orgId: null, data: { webhookId: failing.id, name: 'Failing', deadLettered: 11 } });
    const orgToken = (await login(app, w.orgAdmin)).accessToken;
    expect((await app.api('GET', `/webhooks/${ofOrg.id}/deliveries`, { token: orgToken })).body.data).toEqual([]);
    expect((await app.api('GET', `/webhooks/${other.id}/deliveries`, { token })).body.data.map((d: any) => [d.event, d.orgId])).toEqual([['webhook.disabled', null]]);
    const audit = await app.api('GET', `/audit-logs?action=webhook.status.auto_failed&targetId=${failing.id}`, { token });
    expect(audit.body.data).toHaveLength(1);
  });
});
