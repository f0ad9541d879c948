import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import type { RunningServer } from '../../src/server.js';
import { waitUntil } from '../helpers/wait.js';
import { closeSecond, type Enrolled, enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, startSecondProcess } from './helpers.js';

/**
 * Two Keel processes on one PostgreSQL and one Redis: the heartbeat caches of one process follow
 * changes made through the other at once (cross-process invalidation through Redis pub/sub).
 */
describe.skipIf(!backendAvailable() || backend !== 'postgres')(`heartbeat caches across processes (${backend})`, () => {
  let app: TestApp;
  let second: RunningServer;
  let w: World;
  let admin: string;
  beforeAll(async () => {
    // The waits below ask with heartbeats: a slow machine must not run them into the per-device limit.
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false', AGENT_HEARTBEAT_LIMIT: '100000' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    second = await startSecondProcess(app, { AGENT_AUTO_PROMOTE: 'false', AGENT_HEARTBEAT_LIMIT: '100000' });
  });
  afterAll(async () => {
    await closeSecond(second);
    await app?.close();
  });

  const viaSecond = async (method: string, path: string, token: string, body?: unknown) => {
    const res = await fetch(`${second.url}/api/v1${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-forwarded-for': app.ip }, ...(body ? { body: JSON.stringify(body) } : {}) });
    return { status: res.status, body: (await res.text()) || null };
  };
  /** Waits (pacing only) until the first process's heartbeat answer shows what the second process changed; fails naming it. */
  const firstProcessShows = (what: string, d: Enrolled, done: (answer: { status: number; body: any }) => boolean) =>
    waitUntil(`the first process's heartbeat answer to show ${what}`, async () => {
      const { status, body } = await heartbeat(app, d);
      return { status, body };
    }, done);

  it('auto-update, a promote and a decommission made on one process reach the other process\'s heartbeat answers', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId), { arch: 'xp' });
    for (const version of ['1.0.0', '1.1.0']) await registerRemote(app, admin, { version, arch: 'xp' });
    expect((await heartbeat(app, d)).body).toMatchObject({ autoUpdate: true, update: null });
    // Auto-update off through the second process.
    expect((await viaSecond('POST', `/devices/${d.deviceId}/auto-update`, w.tokens.orgAdmin, { enabled: false })).status).toBe(200);
    await firstProcessShows('autoUpdate false', d, (a) => a.body.autoUpdate === false);
    expect((await viaSecond('POST', `/devices/${d.deviceId}/auto-update`, w.tokens.orgAdmin, { enabled: true })).status).toBe(200);
    await firstProcessShows('autoUpdate true', d, (a) => a.body.autoUpdate === true);
    // A promote through the second process: the first offers it.
    expect((await viaSecond('POST', '/agent-versions/promote', admin, { version: '1.1.0' })).status).toBe(200);
    await firstProcessShows('the update to 1.1.0', d, (a) => a.body.update?.version === '1.1.0');
    // Decommissioned through the second process: the token stops working on the first.
    expect((await viaSecond('DELETE', `/devices/${d.deviceId}`, w.tokens.orgAdmin)).status).toBe(204);
    await firstProcessShows('a 401 for the decommissioned device', d, (a) => a.status === 401);
  });

  it('a rollback reported to one process stops the other offering that version; update-now through it offers it again (docs/decisions.md "Honest rollouts")', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId), { arch: 'xq' });
    await registerRemote(app, admin, { version: '1.2.0', arch: 'xq' });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.2.0' } })).status).toBe(200);
    expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '1.2.0' });
    const reported = await viaSecond('POST', '/agents/update-report', d.deviceToken, { component: 'agent', fromVersion: '1.0.0', toVersion: '1.2.0', state: 'rolled_back', error: 'self-check failed' });
    expect(reported.status).toBe(204);
    await firstProcessShows('no offer after the rollback', d, (a) => a.status === 200 && a.body.update === null);
    expect((await viaSecond('POST', '/devices/update-now', w.tokens.orgAdmin, { deviceIds: [d.deviceId] })).status).toBe(202);
    await firstProcessShows('the retried update to 1.2.0', d, (a) => a.body.update?.version === '1.2.0');
  });
  it('a device pin and a group pin set through one process change the other process\'s offer (docs/decisions.md "Agent pins and distribution")', async () => {
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'Pinned' } })).body.id as string;
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: group }), { arch: 'xr' });
    for (const version of ['1.3.0', '1.4.0', '1.5.0']) await registerRemote(app, admin, { version, arch: 'xr' });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.5.0' } })).status).toBe(200);
    expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '1.5.0' });
    expect((await viaSecond('PUT', `/device-groups/${group}/agent-update-settings`, w.tokens.orgAdmin, { pinnedVersions: { agent: '1.3.0' } })).status).toBe(200);
    await firstProcessShows('the group pin 1.3.0', d, (a) => a.body.update?.version === '1.3.0');
    expect((await viaSecond('PUT', `/devices/${d.deviceId}/agent-update-settings`, w.tokens.orgAdmin, { pinnedVersions: { agent: '1.4.0' } })).status).toBe(200);
    await firstProcessShows('the device pin 1.4.0', d, (a) => a.body.update?.version === '1.4.0');
    expect((await viaSecond('PUT', `/devices/${d.deviceId}/agent-update-settings`, w.tokens.orgAdmin, { pinnedVersions: null })).status).toBe(200);
    await firstProcessShows('the group pin again', d, (a) => a.body.update?.version === '1.3.0');
  });

  it('a ring advanced through one process opens it on the other process\'s heartbeats (docs/decisions.md "Agent update rings")', async () => {
    const made = async (name: string) => (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name } })).body.id as string;
    const [first, later] = [await made('First ring'), await made('Later ring')];
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: later }), { arch: 'xring' });
    await registerRemote(app, admin, { version: '2.0.0', arch: 'xring' });
    const rings = [first, later].map((deviceGroupId) => ({ deviceGroupId, soakMinutes: 600 }));
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '2.0.0', component: 'agent', rollout: { rings } } })).status).toBe(200);
    expect((await heartbeat(app, d)).body.update).toBeNull();
    expect((await viaSecond('POST', '/agent-versions/rollout/advance', admin, { component: 'agent' })).status).toBe(200);
    await firstProcessShows('ring 2 open', d, (a) => a.body.update?.version === '2.0.0');
  });
});
