import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, type Enrolled } from './helpers.js';

/**
 * The update decision of the heartbeat: auto-update, target, maintenance windows (UTC, crossing
 * midnight, organisation over partner), version pins and update-now. Each test uses its own
 * architecture name, so its fleet targets are its own.
 */
describe.skipIf(!backendAvailable())(`update decisions (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  let arch = 0;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
  });
  afterAll(async () => app?.close());
  afterEach(async () => {
    clock.reset();
    // Settings back to none for the next test.
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: null, pinnedVersions: null } });
    await app.api('PUT', `/partners/${w.partnerId}/agent-update-settings`, { token: w.tokens.partnerFull, body: { maintenanceWindow: null, pinnedVersions: null } });
  });

  /** A fresh platform with versions 1.0.0 (installed) and 2.0.0 (promoted), and a device on 1.0.0. */
  async function fleet(): Promise<{ device: Enrolled; arch: string }> {
    const a = `arch${++arch}`;
    for (const version of ['1.0.0', '2.0.0']) await registerRemote(app, admin, { version, arch: a });
    // Other tests' platforms may be on 3.0.0 already: this promote moves them back too.
    const p = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '2.0.0', component: 'agent', allowDowngrade: true } });
    expect(p.status).toBe(200);
    const device = await enroll(app, key, { arch: a });
    return { device, arch: a };
  }

  const offered = async (d: Enrolled, installed = '1.0.0') => (await heartbeat(app, d, { components: { agent: installed } })).body.update as { version: string } | null;
  // Friday 20 November 2026 (UTC); earlier than now, so access tokens stay valid.
  const at = (iso: string) => clock.freeze(new Date(iso));

  it('offers the promoted target with url, sha256 and size; nothing when installed equals the target or auto-update is off', async () => {
    const { device, arch: a } = await fleet();
    const hb = await heartbeat(app, device);
    expect(hb.body.update).toEqual({ component: 'agent', version: '2.0.0', url: 'https://releases.example.com/2.0.0/agent', sha256: 'a'.repeat(64), size: 1000, signature: null, keyId: null });
    expect(await offered(device, '2.0.0')).toBeNull();
    await app.api('POST', `/devices/${device.deviceId}/auto-update`, { token: w.tokens.orgAdmin, body: { enabled: false } });
    expect(await offered(device)).toBeNull();
    expect(a).toMatch(/^arch/);
  });

  it('a window: outside now, no update; inside, the update', async () => {
    const { device } = await fleet();
    const put = await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: { days: ['fri'], start: '20:00', end: '21:00' } } });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ maintenanceWindow: { days: ['fri'], start: '20:00', end: '21:00' }, pinnedVersions: null });
    at('2026-11-20T19:59:00Z');
    expect(await offered(device)).toBeNull();
    at('2026-11-20T20:30:00Z');
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-20T21:00:00Z');
    expect(await offered(device)).toBeNull();
    at('2026-11-19T20:30:00Z'); // Thursday
    expect(await offered(device)).toBeNull();
  });

  it('a window across midnight belongs to its start day', async () => {
    const { device } = await fleet();
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: { days: ['fri'], start: '22:00', end: '02:00' } } });
    at('2026-11-20T23:00:00Z'); // Friday 23:00
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-21T01:30:00Z'); // Saturday 01:30: still Friday's window
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-21T02:00:00Z');
    expect(await offered(device)).toBeNull();
    at('2026-11-21T23:00:00Z'); // Saturday 23:00: no window starts on Saturday
    expect(await offered(device)).toBeNull();
    at('2026-11-20T01:00:00Z'); // Friday 01:00 belongs to Thursday, which has none
    expect(await offered(device)).toBeNull();
  });

  it('a window in a time zone is read on that zone\'s wall clock (New York, five hours behind UTC in November)', async () => {
    const { device } = await fleet();
    const put = await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: { days: ['fri'], start: '22:00', end: '23:00', timeZone: 'America/New_York' } } });
    expect(put.status).toBe(200);
    expect(put.body.maintenanceWindow).toEqual({ days: ['fri'], start: '22:00', end: '23:00', timeZone: 'America/New_York' });
    at('2026-11-20T22:30:00Z'); // Friday 22:30 UTC is 17:30 in New York: outside
    expect(await offered(device)).toBeNull();
    at('2026-11-21T03:30:00Z'); // Saturday 03:30 UTC is Friday 22:30 in New York: inside
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-21T04:00:00Z'); // Friday 23:00 in New York: the end
    expect(await offered(device)).toBeNull();
  });

  it('the organisation window overrides the partner window; the partner window applies without one', async () => {
    const { device } = await fleet();
    const partner = await app.api('PUT', `/partners/${w.partnerId}/agent-update-settings`, { token: w.tokens.partnerFull, body: { maintenanceWindow: { days: ['sat'], start: '10:00', end: '12:00' } } });
    expect(partner.status).toBe(200);
    at('2026-11-21T11:00:00Z'); // Saturday 11:00: inside the partner's
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-20T20:30:00Z');
    expect(await offered(device)).toBeNull();
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: { days: ['fri'], start: '20:00', end: '21:00' } } });
    expect((await offered(device))?.version).toBe('2.0.0');
    at('2026-11-21T11:00:00Z');
    expect(await offered(device)).toBeNull();
  });

  it('a malformed window is a 400, never "any time"', async () => {
    const bad = [
      { days: ['fri'], start: '25:00', end: '02:00' },
      { days: ['fri'], start: '22:00' },
      { days: [], start: '22:00', end: '23:00' },
      { days: ['friday'], start: '22:00', end: '23:00' },
      { days: ['fri', 'fri'], start: '22:00', end: '23:00' },
      { days: ['fri'], start: '9:00', end: '10:00' },
      { days: ['fri'], start: '22:00', end: '23:00', timeZone: 'Mars/Olympus_Mons' },
      { days: ['fri'], start: '22:00', end: '23:00', timeZone: '' },
      'fri 22:00-02:00',
    ];
    for (const maintenanceWindow of bad) {
      const res = await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow } });
      expect(res.status, JSON.stringify(maintenanceWindow)).toBe(400);
      expect(res.body.code).toBe('validation_failed');
    }
    expect((await app.api('GET', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin })).body.maintenanceWindow).toBeNull();
  });

  it('settings are tenant-scoped: another organisation or partner is 404; read-only users cannot write', async () => {
    expect((await app.api('GET', `/orgs/${w.otherOrgId}/agent-update-settings`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgReadOnly, body: { maintenanceWindow: null } })).status).toBe(403);
    expect((await app.api('GET', `/partners/${w.partnerId}/agent-update-settings`, { token: w.tokens.orgAdmin })).status).toBe(403);
    const otherPartner = await app.api('POST', '/partners', { token: admin, body: { name: 'Elsewhere' } });
    expect(otherPartner.status, JSON.stringify(otherPartner.body)).toBe(201);
    expect((await app.api('GET', `/partners/${otherPartner.body.id}/agent-update-settings`, { token: w.tokens.partnerFull })).status).toBe(404);
  });

  it('a pinned organisation stays on its version after a promote; a pin without a build for the platform leaves the device alone; organisation pin over partner pin', async () => {
    const { device, arch: a } = await fleet();
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: { agent: '1.0.0' } } });
    expect(await offered(device)).toBeNull();
    await registerRemote(app, admin, { version: '3.0.0', arch: a });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '3.0.0' } })).status).toBe(200);
    expect(await offered(device)).toBeNull();
    // A device on another version is brought to the pin, not to the target.
    expect((await offered(device, '2.0.0'))?.version).toBe('1.0.0');
    // A pin with no build for this platform: left alone (not moved to the target either).
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: { agent: '0.9.0' } } });
    expect(await offered(device)).toBeNull();
    // Partner pin applies when the organisation has none; the organisation's wins otherwise.
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: null } });
    await app.api('PUT', `/partners/${w.partnerId}/agent-update-settings`, { token: w.tokens.partnerFull, body: { pinnedVersions: { agent: '2.0.0' } } });
    expect((await offered(device))?.version).toBe('2.0.0');
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: { agent: '1.0.0' } } });
    expect(await offered(device)).toBeNull();
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: null } });
    await app.api('PUT', `/partners/${w.partnerId}/agent-update-settings`, { token: w.tokens.partnerFull, body: { pinnedVersions: null } });
    expect((await offered(device))?.version).toBe('3.0.0');
  });

  it('update-now offers the target once outside the window; never with auto-update off; audited; needs devices:execute', async () => {
    const { device } = await fleet();
    await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { maintenanceWindow: { days: ['sun'], start: '01:00', end: '02:00' } } });
    at('2026-11-20T12:00:00Z');
    expect(await offered(device)).toBeNull();
    expect((await app.api('POST', '/devices/update-now', { token: w.tokens.orgReadOnly, body: { deviceIds: [device.deviceId] } })).status).toBe(403);
    const now = await app.api('POST', '/devices/update-now', { token: w.tokens.orgTechnician, body: { deviceIds: [device.deviceId] } });
    expect(now.status).toBe(202);
    expect(now.body).toEqual({ deviceIds: [device.deviceId] });
    expect((await offered(device))?.version).toBe('2.0.0');
    expect(await offered(device)).toBeNull();
    // Auto-update off wins over update-now.
    await app.api('POST', `/devices/${device.deviceId}/auto-update`, { token: w.tokens.orgAdmin, body: { enabled: false } });
    await app.api('POST', '/devices/update-now', { token: w.tokens.orgTechnician, body: { deviceIds: [device.deviceId] } });
    expect(await offered(device)).toBeNull();
    // A real device of another organisation is a 404, and is not marked.
    const foreign = await enroll(app, await enrollmentKey(app, w.tokens.partnerFull, w.otherOrgId));
    const other = await app.api('POST', '/devices/update-now', { token: w.tokens.orgTechnician, body: { deviceIds: [foreign.deviceId] } });
    expect(other.status).toBe(404);
    expect((await app.api('GET', `/devices/${foreign.deviceId}`, { token: w.tokens.partnerFull })).body.updateNowPending).toBe(false);
    const audit = await app.api('GET', `/audit-logs?action=device.update_now&limit=100`, { token: w.tokens.orgAdmin });
    expect(audit.status).toBe(200);
    expect(audit.body.data.filter((a: any) => a.targetId === device.deviceId || a.target?.id === device.deviceId).length).toBeGreaterThanOrEqual(1);
  });
});
