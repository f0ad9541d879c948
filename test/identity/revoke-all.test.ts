import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable } from '../helpers/app.js';
import { cliEnv, runCli, startServe } from '../helpers/cli.js';
import { call, startTopology, TOPOLOGY_ADMIN, type Topology } from '../helpers/topology.js';

/**
 * `keel sessions revoke-all` (after a suspected compromise, e.g. a leaked JWT secret: a forged token
 * needs a live session id): every session ends, every access token answers 401 and every refresh token
 * is refused, while accounts stay. On PostgreSQL it runs beside the servers and reaches their caches at
 * once; on the embedded database it needs the server stopped.
 */
describe.skipIf(backend !== 'pglite')('keel sessions revoke-all on the embedded database', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-revoke-all-'));
  const admin = { email: 'revoke-all@example.com', password: 'pebble-orchard-window-61-dune' };
  const env = cliEnv(dataDir, { ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('refused while the server runs; once stopped, ends every session, and a new sign-in works', { timeout: 120_000 }, async () => {
    let served = await startServe(env);
    const before = (await call(served.url, 'POST', '/auth/login', { body: admin })).body as { accessToken: string; refreshToken: string };
    const locked = await runCli(['sessions', 'revoke-all'], env);
    expect(locked.code).toBe(1);
    expect(locked.stderr).toContain('stop the server first');
    await served.stop();

    const done = await runCli(['sessions', 'revoke-all'], env);
    expect(done.stderr).toBe('');
    expect(done.code).toBe(0);
    expect(done.stdout).toBe('Ended 1 session: every user signs in again\n');

    served = await startServe(env);
    try {
      expect((await call(served.url, 'GET', '/auth/me', { token: before.accessToken })).status).toBe(401);
      expect((await call(served.url, 'POST', '/auth/refresh', { body: { refreshToken: before.refreshToken } })).status).toBe(401);
      expect((await call(served.url, 'POST', '/auth/login', { body: admin })).status).toBe(200);
      const audit = await call(served.url, 'GET', '/audit-logs?action=sessions.revoke_all', {
        token: (await call(served.url, 'POST', '/auth/login', { body: admin })).body.accessToken,
      });
      expect(audit.status).toBe(200);
      expect(JSON.stringify(audit.body)).toContain('sessions.revoke_all');
    } finally {
      await served.stop();
    }
  });
});

describe.skipIf(!backendAvailable() || backend !== 'postgres')('keel sessions revoke-all beside running servers (postgres)', () => {
  let topology: Topology | null = null;
  afterAll(async () => topology?.close());

  it('a token that worked a moment ago on either server answers 401 right after the command', { timeout: 180_000 }, async () => {
    topology = await startTopology({ apis: 2, workers: 0 });
    const [a, b] = topology.apis;
    const session = (await call(a!.url, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).body as { accessToken: string };
    // Both servers have the session in their caches.
    for (const api of [a!, b!]) expect((await call(api.url, 'GET', '/auth/me', { token: session.accessToken })).status).toBe(200);
    const done = await runCli(['sessions', 'revoke-all'], topology.env);
    expect(done.code).toBe(0);
    expect(done.stdout).toMatch(/^Ended \d+ sessions?: every user signs in again\n$/);
    for (const api of [a!, b!]) expect((await call(api.url, 'GET', '/auth/me', { token: session.accessToken })).status).toBe(401);
  });
});
