import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, orgUserWithRole, ROLE, type World } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { devices, enrollmentKeys } from '../../src/modules/agents/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import type { KeelEvent } from '../../src/events.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, runSweep } from './helpers.js';
import { agentsOf } from '../../src/modules/agents/context.js';

describe.skipIf(!backendAvailable())(`devices and heartbeats (${backend})`, () => {
  let app: TestApp;
  let w: World;
  const events: KeelEvent[] = [];
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    app.server.keel.events.subscribe('*', (_tx, e) => {
      events.push(e);
      return Promise.resolve();
    });
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  const eventsOf = (deviceId: string) => events.filter((e) => (e.data as { deviceId?: string }).deviceId === deviceId).map((e) => e.type);

  it('an enrolment key is shown once, stored hashed, listed without the key, and revocable', async () => {
    const created = await app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: w.tokens.orgAdmin, body: { name: 'HQ' } });
    expect(created.status).toBe(201);
    expect(created.body.key).toMatch(/^ke_/);
    const [row] = await app.server.keel.db.select().from(enrollmentKeys).where(eq(enrollmentKeys.id, created.body.id));
    expect(row!.keyHash).toBe(sha256Hex(created.body.key));
    expect(JSON.stringify(row)).not.toContain(created.body.key);
    const list = await app.api('GET', `/orgs/${w.orgId}/enrollment-keys`, { token: w.tokens.orgAdmin });
    expect(list.status).toBe(200);
    const listed = list.body.data.find((k: any) => k.id === created.body.id);
    expect(listed).toMatchObject({ name: 'HQ', revokedAt: null });
    expect(listed.key).toBeUndefined();
    // Another organisation's admin does not see or use this organisation's keys.
    expect((await app.api('GET', `/orgs/${w.otherOrgId}/enrollment-keys`, { token: w.tokens.orgAdmin })).status).toBe(404);
    const device = await enroll(app, created.body.key);
    expect(device.deviceToken).toMatch(/^kd_/);
    expect((await app.api('DELETE', `/orgs/${w.orgId}/enrollment-keys/${created.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const refused = await app.api('POST', '/agents/enroll', { body: { enrollmentKey: created.body.key, hostname: 'x', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } });
    expect(refused.status).toBe(401);
    expect(refused.body.code).toBe('invalid_enrollment_key');
  });

  it('an expired key is refused', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { expiresAt: new Date(Date.now() + 60_000).toISOString() });
    clock.advance(120_000);
    const res = await app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: 'x', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('invalid_enrollment_key');
  });

  it('enrol: 201 with id, token (stored hashed) and interval; device.enrolled; heartbeat answers and records versions', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const res = await app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: 'ws-1', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ deviceId: expect.any(String), deviceToken: expect.stringMatching(/^kd_/), heartbeatIntervalSeconds: 60, releaseKeys: [] });
    const [row] = await app.server.keel.db.select().from(devices).where(eq(devices.id, res.body.deviceId));
    expect(row!.tokenHash).toBe(sha256Hex(res.body.deviceToken));
    expect(eventsOf(res.body.deviceId)).toEqual(['device.enrolled']);

    const hb = await heartbeat(app, res.body, { components: { agent: '1.0.0', watchdog: '1.0.0' }, loggedInUser: 'alice' });
    expect(hb.status).toBe(200);
    expect(hb.body).toEqual({ nextHeartbeatSeconds: 60, autoUpdate: true, update: null, releaseKeys: null });
    const got = await app.api('GET', `/devices/${res.body.deviceId}`, { token: w.tokens.orgAdmin });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ hostname: 'ws-1', os: 'linux', arch: 'amd64', status: 'online', components: { agent: '1.0.0', watchdog: '1.0.0' }, autoUpdate: true, loggedInUser: 'alice' });
    expect(got.body.lastSeenAt).not.toBeNull();
    expect(eventsOf(res.body.deviceId)).toEqual(['device.enrolled', 'device.online', 'session.login']);

    // Unchanged heartbeats publish nothing; a new version is device.updated; a new user logs the old one out.
    await heartbeat(app, res.body, { components: { agent: '1.0.0', watchdog: '1.0.0' }, loggedInUser: 'alice' });
    await heartbeat(app, res.body, { components: { agent: '1.0.0', watchdog: '1.0.0' }, loggedInUser: 'alice' });
    expect(eventsOf(res.body.deviceId)).toHaveLength(3);
    const after = await heartbeat(app, res.body, { components: { agent: '1.1.0', watchdog: '1.0.0' }, loggedInUser: 'bob' });
    expect(after.body.nextHeartbeatSeconds).toBeGreaterThanOrEqual(60);
    expect(after.body.nextHeartbeatSeconds).toBeLessThanOrEqual(120);
    expect(eventsOf(res.body.deviceId)).toEqual(['device.enrolled', 'device.online', 'session.login', 'device.updated', 'session.logout', 'session.login']);
    const updated = events.find((e) => e.type === 'device.updated' && (e.data as any).deviceId === res.body.deviceId);
    expect(updated).toMatchObject({ orgId: w.orgId, data: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0' } });
  });

  it('a heartbeat without a valid device token is 401; user tokens are refused', async () => {
    for (const token of ['kd_nope', w.tokens.orgAdmin]) {
      const res = await app.api('POST', '/agents/heartbeat', { token, body: { components: { agent: '1.0.0' } } });
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('invalid_device_token');
    }
  });

  it('a device that stops heartbeating goes offline (device.offline once), and comes back online (device.online)', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    clock.advance(3 * 60_000 + 1000);
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.status).toBe('offline');
    const list = await app.api('GET', `/devices?status=offline&limit=100`, { token: w.tokens.orgAdmin });
    expect(list.body.data.map((x: any) => x.id)).toContain(d.deviceId);
    await runSweep(app);
    await runSweep(app);
    expect(eventsOf(d.deviceId).filter((t) => t === 'device.offline')).toHaveLength(1);
    await heartbeat(app, d);
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.status).toBe('online');
    expect(eventsOf(d.deviceId)).toEqual(['device.enrolled', 'device.online', 'device.offline', 'device.online']);
  });

  it('a device stuck updating shows offline after 5 minutes', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    const started = await app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', state: 'started' } });
    expect(started.status).toBe(204);
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.status).toBe('updating');
    clock.advance(4 * 60_000);
    await heartbeat(app, d); // still the old version
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.status).toBe('updating');
    clock.advance(60_000 + 1000);
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.status).toBe('offline');
    await runSweep(app);
    expect(eventsOf(d.deviceId)).toContain('device.offline');
  });

  it('the new version ends updating', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    await app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', state: 'started' } });
    await heartbeat(app, d, { components: { agent: '1.1.0' } });
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body).toMatchObject({ status: 'online', components: { agent: '1.1.0' } });
  });

  it('decommission revokes the token, emits device.decommissioned, is audited; another tenant gets 404', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    const other = await orgUserWithRole(app, w.otherOrgId, ROLE.orgAdmin);
    expect((await app.api('DELETE', `/devices/${d.deviceId}`, { token: other.token })).status).toBe(404);
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: other.token })).status).toBe(404);
    expect((await app.api('DELETE', `/devices/${d.deviceId}`, { token: w.tokens.orgReadOnly })).status).toBe(403);
    expect((await app.api('DELETE', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const hb = await heartbeat(app, d);
    expect(hb.status).toBe(401);
    // The token is gone at rest too, not only refused.
    const [row] = await app.server.keel.db.select().from(devices).where(eq(devices.id, d.deviceId));
    expect(row!.tokenHash).toBeNull();
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect(eventsOf(d.deviceId)).toContain('device.decommissioned');
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, d.deviceId));
    expect(audit.map((a) => a.action)).toContain('device.decommission');
  });

  it('auto-update off is stored by Keel and in every heartbeat answer (it survives an agent restart); audited; needs devices:execute', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    expect((await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: w.tokens.orgReadOnly, body: { enabled: false } })).status).toBe(403);
    const off = await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: w.tokens.orgTechnician, body: { enabled: false } });
    expect(off.status).toBe(200);
    expect(off.body.autoUpdate).toBe(false);
    // A restarted agent knows nothing: the answer tells it.
    expect((await heartbeat(app, d)).body.autoUpdate).toBe(false);
    expect((await heartbeat(app, d)).body.autoUpdate).toBe(false);
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, d.deviceId));
    expect(audit.find((a) => a.action === 'device.auto_update')?.details).toEqual({ enabled: false });
    // An API key with devices:execute may do it too; one with devices:read only may not.
    const exec = await app.api('POST', '/api-keys', { token: w.tokens.orgAdmin, body: { name: 'ops', permissions: [{ resource: 'devices', action: 'execute' }] } });
    expect(exec.status).toBe(201);
    const on = await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: exec.body.key, body: { enabled: true } });
    expect(on.status).toBe(200);
    expect((await heartbeat(app, d)).body.autoUpdate).toBe(true);
    const read = await app.api('POST', '/api-keys', { token: w.tokens.orgAdmin, body: { name: 'reader', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect((await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: read.body.key, body: { enabled: false } })).status).toBe(403);
  });

  it('last seen is written once a second for many heartbeats: the latest one, even when the device was reloaded in between', async () => {
    clock.freeze();
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    await heartbeat(app, d);
    const state = agentsOf(app.server.keel).state;
    await state.flushLastSeen();
    clock.advance(1_000);
    await heartbeat(app, d);
    // The device's cached state is dropped (a setting changed) and read again by the next heartbeat.
    expect((await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: w.tokens.orgTechnician, body: { enabled: false } })).status).toBe(200);
    clock.advance(1_000);
    const latest = clock.nowMs();
    await heartbeat(app, d);
    await state.flushLastSeen();
    const got = await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin });
    expect(new Date(got.body.lastSeenAt as string).getTime()).toBe(latest);
  });

  it('device list filters and pages; a site-restricted user creates keys only for its sites', async () => {
    const site = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'Filter site' } });
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: site.body.id });
    const made = [];
    for (const name of ['filter-a', 'filter-b', 'filter-c']) made.push(await enroll(app, key, { hostname: name, os: 'windows' }));
    const first = await app.api('GET', `/devices?siteId=${site.body.id}&os=windows&limit=2&page=1`, { token: w.tokens.orgAdmin });
    expect(first.body.pagination).toEqual({ page: 1, limit: 2, total: 3 });
    expect(first.body.data.map((d: any) => d.hostname)).toEqual(['filter-a', 'filter-b']);
    const second = await app.api('GET', `/devices?siteId=${site.body.id}&os=windows&limit=2&page=2`, { token: w.tokens.orgAdmin });
    expect(second.body.data.map((d: any) => d.hostname)).toEqual(['filter-c']);
    const byName = await app.api('GET', '/devices?hostname=ter-b', { token: w.tokens.orgAdmin });
    expect(byName.body.data.map((d: any) => d.id)).toEqual([made[1]!.deviceId]);
    expect((await app.api('GET', '/devices?status=sleeping', { token: w.tokens.orgAdmin })).status).toBe(400);
    const restricted = await orgUserWithRole(app, w.orgId, ROLE.orgAdmin, { siteIds: [site.body.id] });
    expect((await app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: restricted.token, body: { siteId: site.body.id } })).status).toBe(201);
    const outside = await app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: restricted.token, body: {} });
    expect(outside.status).toBe(403);
    expect(outside.body.code).toBe('placement_forbidden');
  });

  it('AGENT_AUTO_PROMOTE (default true): a registered release is the target at once, never a downgrade', async () => {
    const body = (version: string) => ({ version, component: 'agent', os: 'linux', arch: 'auto', url: `https://releases.example.com/${version}`, sha256: 'f'.repeat(64), size: 9 });
    const admin = await mfaAdmin(app, w);
    const first = await app.api('POST', '/agent-versions', { token: admin, body: body('2.0.0') });
    expect(first.status).toBe(201);
    expect(first.body.promoted).toEqual(['agent:linux/auto']);
    expect(first.body.autoPromote).toEqual({ status: 'promoted', reason: null });
    const lower = await app.api('POST', '/agent-versions', { token: admin, body: body('1.9.0') });
    expect(lower.status).toBe(201);
    expect(lower.body.promoted).toEqual([]);
    expect(lower.body.autoPromote).toEqual({ status: 'skipped', reason: 'downgrade' });
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId), { arch: 'auto' });
    expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '2.0.0' });
  });

  it('an organisation user restricted to one site sees only that site\'s devices', async () => {
    const siteA = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'Site A' } });
    const siteB = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'Site B' } });
    const inA = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: siteA.body.id }));
    const inB = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: siteB.body.id }));
    const restricted = await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { siteIds: [siteA.body.id] });
    const list = await app.api('GET', '/devices?limit=100', { token: restricted.token });
    expect(list.status).toBe(200);
    const ids = list.body.data.map((x: any) => x.id);
    expect(ids).toEqual([inA.deviceId]);
    expect(list.body.pagination.total).toBe(1);
    expect((await app.api('GET', `/devices/${inB.deviceId}`, { token: restricted.token })).status).toBe(404);
    expect((await app.api('GET', `/devices/${inA.deviceId}`, { token: restricted.token })).status).toBe(200);
    // The unrestricted admin sees both.
    const all = (await app.api('GET', '/devices?limit=100', { token: w.tokens.orgAdmin })).body.data.map((x: any) => x.id);
    expect(all).toEqual(expect.arrayContaining([inA.deviceId, inB.deviceId]));
  });
});
