import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, type Enrolled } from './helpers.js';

/**
 * Honest rollouts (docs/decisions.md "Honest rollouts"): a registration can say it is not promoted; a
 * device that failed or rolled back a version is not offered it again until update-now retries it; a
 * rollout's status never shows a success it did not have; each device's update history.
 */
describe.skipIf(!backendAvailable())(`honest rollouts (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  beforeAll(async () => {
    // AGENT_AUTO_PROMOTE is on (the default): a registration without promote=false is promoted at once.
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_HALT_MIN_REPORTS: '2' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
  });
  afterAll(async () => app?.close());

  const rolloutOf = async (version: string, component = 'agent') => {
    const res = await app.api('GET', '/agent-versions?limit=100', { token: admin });
    expect(res.status).toBe(200);
    return res.body.data.find((v: { version: string; component: string }) => v.version === version && v.component === component)?.rollout;
  };
  const report = (d: Enrolled, body: Record<string, unknown>) => app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', ...body } });
  const history = async (d: Enrolled, token = w.tokens.orgAdmin) => app.api('GET', `/devices/${d.deviceId}/update-history`, { token });

  it('a registration with promote=false is only registered, even with AGENT_AUTO_PROMOTE on; without it, it is promoted', async () => {
    const body = { version: '0.9.0', component: 'watchdog', os: 'linux', arch: 'amd64', url: 'https://releases.example.com/0.9.0/w', sha256: 'b'.repeat(64), size: 10 };
    const held = await app.api('POST', '/agent-versions?promote=false', { token: admin, body });
    expect(held.status).toBe(201);
    expect(held.body).toMatchObject({ promoted: [], autoPromote: { status: 'off', reason: 'not_requested' } });
    let entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: { version: string }) => v.version === '0.9.0');
    expect(entry.target).toEqual([]);
    const promoted = await app.api('POST', '/agent-versions', { token: admin, body: { ...body, version: '0.9.1', url: 'https://releases.example.com/0.9.1/w' } });
    expect(promoted.status).toBe(201);
    expect(promoted.body).toMatchObject({ promoted: ['watchdog:linux/amd64'], autoPromote: { status: 'promoted', reason: null } });
    entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: { version: string }) => v.version === '0.9.1');
    expect(entry.target).toEqual(['watchdog:linux/amd64']);
    expect((await app.api('POST', '/agent-versions?promote=maybe', { token: admin, body })).status).toBe(400);
  });

  it('a one-device fleet whose build rolls back: not offered again, status failing (never complete), history with the reason; update-now retries', async () => {
    const device = await enroll(app, key);
    expect((await heartbeat(app, device)).body.update).toBeNull();
    await registerRemote(app, admin, { version: '1.1.0' });
    // Right after the promote (100 %) no device has updated: active, not complete.
    expect(await rolloutOf('1.1.0')).toMatchObject({ percent: 100, status: 'active', succeeded: 0, failed: 0, pending: 1, blocked: 0 });

    expect((await heartbeat(app, device)).body.update).toMatchObject({ component: 'agent', version: '1.1.0' });
    expect((await report(device, { toVersion: '1.1.0', state: 'started' })).status).toBe(204);
    expect((await report(device, { toVersion: '1.1.0', state: 'rolled_back', error: 'exited at start (status 2)' })).status).toBe(204);
    for (let i = 0; i < 3; i++) expect((await heartbeat(app, device)).body.update).toBeNull();
    expect(await rolloutOf('1.1.0')).toMatchObject({ percent: 100, status: 'failing', succeeded: 0, failed: 1, pending: 0, blocked: 1 });

    let h = await history(device);
    expect(h.status).toBe(200);
    expect(h.body.data.map((e: { state: string }) => e.state)).toEqual(['rolled_back', 'started', 'offered']);
    expect(h.body.data[0]).toMatchObject({ component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', error: 'exited at start (status 2)' });
    expect(h.body.data[2]).toMatchObject({ fromVersion: '1.0.0', toVersion: '1.1.0', error: null });

    // The retry: offered again at the next heartbeat (once recorded in the history), then it succeeds.
    expect((await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [device.deviceId] } })).status).toBe(202);
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.1.0' });
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.1.0' });
    h = await history(device);
    expect(h.body.data.map((e: { state: string }) => e.state)).toEqual(['offered', 'retried', 'rolled_back', 'started', 'offered']);
    expect((await report(device, { toVersion: '1.1.0', state: 'succeeded' })).status).toBe(204);
    expect((await heartbeat(app, device, { components: { agent: '1.1.0' } })).body.update).toBeNull();
    expect(await rolloutOf('1.1.0')).toMatchObject({ status: 'complete', succeeded: 1, failed: 0, pending: 0, blocked: 0 });

    // Paginated, newest first; another organisation's user gets 404 for this (real) device.
    const first = await app.api('GET', `/devices/${device.deviceId}/update-history?limit=2`, { token: w.tokens.orgAdmin });
    expect(first.body.data.map((e: { state: string }) => e.state)).toEqual(['succeeded', 'offered']);
    expect(first.body.pagination.total).toBe(6);
    const otherKey = await enrollmentKey(app, w.tokens.partnerFull, w.otherOrgId);
    const other = await enroll(app, otherKey, { arch: 'riscv64' });
    expect((await app.api('GET', `/devices/${device.deviceId}/update-history`, { token: w.tokens.orgReadOnly })).status).toBe(200);
    const foreign = await app.api('GET', `/devices/${other.deviceId}/update-history`, { token: w.tokens.orgAdmin });
    expect(foreign.status).toBe(404);
    expect(foreign.body.code).toBe('not_found');
  });

  it('a pinned version the device failed is not offered again either, until retried', async () => {
    const device = await enroll(app, key, { arch: 'arm64' });
    // Registered without a promote: no fleet target on arm64, so only the pin offers it.
    const body = { version: '1.0.5', component: 'agent', os: 'linux', arch: 'arm64', url: 'https://releases.example.com/1.0.5/agent', sha256: 'c'.repeat(64), size: 10 };
    expect((await app.api('POST', '/agent-versions?promote=false', { token: admin, body })).status).toBe(201);
    const pinned = await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: { agent: '1.0.5' } } });
    expect(pinned.status).toBe(200);
    try {
      expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.0.5' });
      expect((await report(device, { toVersion: '1.0.5', state: 'failed', error: 'checksum mismatch' })).status).toBe(204);
      expect((await heartbeat(app, device)).body.update).toBeNull();
      await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [device.deviceId] } });
      expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.0.5' });
    } finally {
      await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body: { pinnedVersions: null } });
    }
  });

  it('rolled_back counts as a failure for the automatic halt; failures with some successes are complete_with_failures, not complete', async () => {
    const [a, b] = [await enroll(app, key, { arch: 'mips' }), await enroll(app, key, { arch: 'mips' })];
    await registerRemote(app, admin, { version: '2.0.0', arch: 'mips' });
    for (const d of [a, b]) expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '2.0.0' });
    await report(a, { toVersion: '2.0.0', state: 'rolled_back', error: 'self-check failed' });
    expect(await rolloutOf('2.0.0')).toMatchObject({ status: 'failing', failed: 1, succeeded: 0 });
    await report(b, { toVersion: '2.0.0', state: 'rolled_back', error: 'self-check failed' });
    expect(await rolloutOf('2.0.0')).toMatchObject({ status: 'halted', failed: 2, succeeded: 0 });

    // Resumed, one retried device succeeds and the other stays blocked: done, but not a green complete.
    expect((await app.api('POST', '/agent-versions/rollout/resume', { token: admin, body: { component: 'agent' } })).status).toBe(200);
    await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [a.deviceId] } });
    expect((await heartbeat(app, a)).body.update).toMatchObject({ version: '2.0.0' });
    expect((await heartbeat(app, b)).body.update).toBeNull();
    await report(a, { toVersion: '2.0.0', state: 'succeeded' });
    expect(await rolloutOf('2.0.0')).toMatchObject({ status: 'complete_with_failures', succeeded: 1, pending: 0, blocked: 1 });
  });
});
