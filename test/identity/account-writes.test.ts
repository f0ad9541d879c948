import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { PROFILE_TOPIC, USER_TOPIC } from '../../src/modules/identity/sessions.js';
import { cachedSelfProfileNow } from '../../src/modules/identity/profile.js';
import { clock } from '../../src/platform/clock.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/platform/logger.js';

/**
 * A module writes an account only through identity's write API (identity/accounts.ts), which drops
 * what every process caches about the user once the write commits: the module itself publishes
 * nothing (docs/decisions.md "Identity owns the users table").
 */
describe.skipIf(!backendAvailable())('account writes through identity', () => {
  let app: TestApp;
  let tenant: Tenant;
  let adminToken: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    tenant = await createTenant(app);
    adminToken = (await login(app, tenant.orgAdmin)).accessToken;
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  it('a sign-in keeps the user’s cached profile in its process, with the new last-login time, instead of reading it again', async () => {
    clock.freeze(); // the sign-in times below are the test's
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { accessToken } = await login(app, user);
    const first = (await app.api('GET', '/auth/me', { token: accessToken })).body as { lastLoginAt: string; name: string };
    expect(cachedSelfProfileNow(app.server.keel, user.id)?.lastLoginAt).toBe(first.lastLoginAt);
    clock.advance(60_000);
    await login(app, user);
    // Kept (not dropped and read again), with the time the sign-in wrote.
    const kept = cachedSelfProfileNow(app.server.keel, user.id);
    expect(kept?.lastLoginAt).toBe(new Date(Date.parse(first.lastLoginAt) + 60_000).toISOString());
    const again = (await app.api('GET', '/auth/me', { token: accessToken })).body as { lastLoginAt: string; name: string };
    expect(again).toEqual({ ...first, lastLoginAt: kept?.lastLoginAt });
    // Any other change still drops it.
    expect((await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { name: 'Renamed' } })).status).toBe(200);
    expect(cachedSelfProfileNow(app.server.keel, user.id)).toBeUndefined();
    expect((await app.api('GET', '/auth/me', { token: accessToken })).body).toMatchObject({ name: 'Renamed', lastLoginAt: kept?.lastLoginAt });
  });

  it('a name set through the users module shows in the user’s cached profile on the next request', async () => {
    const user = await createUser(app, { name: 'Before', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { accessToken } = await login(app, user);
    expect((await app.api('GET', '/auth/me', { token: accessToken })).body.name).toBe('Before'); // cached now
    expect((await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { name: 'After' } })).status).toBe(200);
    expect((await app.api('GET', '/auth/me', { token: accessToken })).body.name).toBe('After');
  });

  describe.skipIf(backend !== 'postgres')('on another process', () => {
    let second: RunningServer;
    beforeAll(async () => {
      const c = app.server.keel.config;
      const env = { NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: c.DATABASE_URL!, REDIS_URL: c.REDIS_URL!, APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'), JWT_SECRET: c.JWT_SECRET!, DATA_DIR: c.DATA_DIR };
      second = await startServer({ config: loadConfig(env), log: createLogger('silent'), port: 0, host: '127.0.0.1' });
    });
    afterAll(async () => second?.close());

    /** Resolves once the second process has heard `count` invalidations of the user on `topic` (never heard: test timeout). */
    const heard = (userId: string, count = 1, topic = USER_TOPIC) =>
      new Promise<void>((resolve) => {
        let left = count;
        second.keel.invalidation.on(topic, (key) => {
          if (key === userId && --left === 0) resolve();
        });
      });
    const meOnSecond = (token: string) => fetch(`${second.url}/api/v1/auth/me`, { headers: { authorization: `Bearer ${token}` } });

    it('a user disabled through the users module is refused on the next request by a process whose cache held them', async () => {
      const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const { accessToken } = await login(app, user);
      expect((await meOnSecond(accessToken)).status).toBe(200); // cached as live on the second process
      const dropped = heard(user.id);
      expect((await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { status: 'disabled' } })).status).toBe(200);
      await dropped;
      expect((await meOnSecond(accessToken)).status).toBe(401);
    });

    it('a sign-in on one process drops the user’s profile cached on another, which then shows the new last-login time', async () => {
      clock.freeze(); // both processes share the clock module: the sign-in times are the test's
      const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const { accessToken } = await login(app, user);
      const before = (await (await meOnSecond(accessToken)).json()) as { lastLoginAt: string };
      const dropped = heard(user.id, 1, PROFILE_TOPIC);
      clock.advance(60_000);
      await login(app, user);
      await dropped;
      const after = (await (await meOnSecond(accessToken)).json()) as { lastLoginAt: string };
      expect(Date.parse(after.lastLoginAt) - Date.parse(before.lastLoginAt)).toBe(60_000);
    });

    it('a renamed user’s profile cached on another process is dropped by the write', async () => {
      const user = await createUser(app, { name: 'Before', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const { accessToken } = await login(app, user);
      expect(((await (await meOnSecond(accessToken)).json()) as { name: string }).name).toBe('Before');
      const dropped = heard(user.id);
      expect((await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { name: 'After' } })).status).toBe(200);
      await dropped;
      expect(((await (await meOnSecond(accessToken)).json()) as { name: string }).name).toBe('After');
    });
  });
});
