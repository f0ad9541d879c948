import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import type { RunningServer } from '../../src/server.js';
import { closeSecond, enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, startSecondProcess } from './helpers.js';

/**
 * Two Keel processes on one PostgreSQL and one Redis: the heartbeat caches of one process follow
 * changes made through the other at once (cross-process invalidation through Redis pub/sub).
 */
describe.skipIf(!backendAvailable() || backend !== 'postgres')(`heartbeat caches across processes (${backend})`, () => {
  let app: TestApp;
  let second: RunningServer;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false' } });
    w = await createWorld(app);
    second = await startSecondProcess(app, { AGENT_AUTO_PROMOTE: 'false' });
  });
  afterAll(async () => {
    await closeSecond(second);
    await app?.close();
  });

  const viaSecond = async (method: string, path: string, token: string, body?: unknown) => {
    const res = await fetch(`${second.url}/api/v1${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-forwarded-for': app.ip }, ...(body ? { body: JSON.stringify(body) } : {}) });
    return { status: res.status, body: (await res.text()) || null };
  };
  /** Waits (pacing only) until the first process's answer shows what the second process changed. */
  const eventually = async (check: () => Promise<boolean>) => {
    for (let i = 0; i < 100; i++) {
      if (await check()) return true;
      await new Promise((r) => setTimeout(r, 20));
    }
    return false;
  };

  it('auto-update, a promote and a decommission made on one process reach the other process\'s heartbeat answers', async () => {
    const admin = await mfaAdmin(app, w);
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId), { arch: 'xp' });
    for (const version of ['1.0.0', '1.1.0']) await registerRemote(app, admin, { version, arch: 'xp' });
    expect((await heartbeat(app, d)).body).toMatchObject({ autoUpdate: true, update: null });
    // Auto-update off through the second process.
    expect((await viaSecond('POST', `/devices/${d.deviceId}/auto-update`, w.tokens.orgAdmin, { enabled: false })).status).toBe(200);
    expect(await eventually(async () => (await heartbeat(app, d)).body.autoUpdate === false)).toBe(true);
    expect((await viaSecond('POST', `/devices/${d.deviceId}/auto-update`, w.tokens.orgAdmin, { enabled: true })).status).toBe(200);
    expect(await eventually(async () => (await heartbeat(app, d)).body.autoUpdate === true)).toBe(true);
    // A promote through the second process: the first offers it.
    expect((await viaSecond('POST', '/agent-versions/promote', admin, { version: '1.1.0' })).status).toBe(200);
    expect(await eventually(async () => (await heartbeat(app, d)).body.update?.version === '1.1.0')).toBe(true);
    // Decommissioned through the second process: the token stops working on the first.
    expect((await viaSecond('DELETE', `/devices/${d.deviceId}`, w.tokens.orgAdmin)).status).toBe(204);
    expect(await eventually(async () => (await heartbeat(app, d)).status === 401)).toBe(true);
  });
});
