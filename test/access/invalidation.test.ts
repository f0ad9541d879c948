import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { createLogger } from '../../src/platform/logger.js';
import { roleCacheFor, ROLES_TOPIC } from '../../src/modules/access/role-cache.js';
import { insertRole, ROLE } from './helpers.js';
import { API_KEY_TOPIC } from '../../src/modules/access/api-keys.js';
import { USER_TOPIC } from '../../src/modules/identity/sessions.js';
import { ORGS_TOPIC } from '../../src/modules/access/org-cache.js';
import { randomUUID } from 'node:crypto';
import { Invalidation, invalidationChannel } from '../../src/platform/invalidation.js';
import { connectRedis, type Redis } from '../../src/platform/redis.js';
import { REDIS_DATABASES } from '../setup/provided.js';
import { waitUntil } from '../helpers/wait.js';

/**
 * Two Keel processes (two servers with their own pools, caches and invalidation listeners) on one
 * PostgreSQL: a role change made through one stops granting on the other as soon as the other has
 * heard of it. Shown by what happens, not by a stopwatch: a hook on B's invalidation topic tells the
 * test that B received the change (B's own role cache, subscribed first, has dropped it by then), and
 * B's very next request must be refused. Run with Redis pub/sub (REDIS_URL set) and with PostgreSQL
 * LISTEN/NOTIFY (no Redis).
 */
describe.skipIf(backend !== 'postgres' || !backendAvailable()).each([
  { transport: 'Redis pub/sub', env: {} },
  { transport: 'PostgreSQL NOTIFY', env: { REDIS_URL: '' } },
])('role cache invalidation across processes ($transport)', ({ env }) => {
  let a: TestApp;
  let b: RunningServer;
  let bDatabase: Database;
  let t: Tenant;
  let adminToken: string;

  beforeAll(async () => {
    a = await startTestApp({ env: { LOGIN_LIMIT: '1000', ...env } });
    const config = a.server.keel.config;
    bDatabase = await openDatabase({ url: config.DATABASE_URL, poolSize: 5 });
    b = await startServer({ config, log: createLogger('silent'), database: bDatabase, port: 0, host: '127.0.0.1', skipMigrate: true });
    t = await createTenant(a);
    adminToken = (await login(a, t.orgAdmin)).accessToken;
  });
  afterAll(async () => {
    await b?.close();
    await bDatabase?.close();
    await a?.close();
  });

  const onB = async (path: string, token: string) => (await fetch(`${b.url}/api/v1${path}`, { headers: { authorization: `Bearer ${token}` } })).status;
  /**
   * Resolves once process B has received the invalidation of `roleId` from A. Handlers run in the
   * order they subscribed, and B's role cache subscribed when B started, so it has already dropped
   * the role when this resolves. If the message never arrives the test fails on its timeout.
   */
  const heardOnB = (roleId: string) =>
    new Promise<void>((resolve) => {
      b.keel.invalidation.on(ROLES_TOPIC, (key) => {
        if (key === roleId) resolve();
      });
    });

  it('a parent that loses a permission stops granting it on the other process’s next request after it heard of the change', async () => {
    const parent = await insertRole(a, { scope: 'organization', orgId: t.orgId, name: 'Parent', perms: ['users:read'] });
    const child = await insertRole(a, { scope: 'organization', orgId: t.orgId, name: 'Child', perms: ['devices:read'], parentRoleId: parent });
    const user = await createUser(a, { org: { orgId: t.orgId, roleId: child } });
    const token = (await login(a, user)).accessToken;

    // Process B resolves (and caches) the chain: users:read comes only from the parent.
    expect(await onB('/users', token)).toBe(200);
    expect(await onB('/roles', token)).toBe(200);
    expect(roleCacheFor(b.keel).size).toBeGreaterThan(0);

    const removed = heardOnB(parent);
    const res = await a.api('PATCH', `/roles/${parent}`, { token: adminToken, body: { permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(res.status).toBe(200);
    await removed;
    expect(await onB('/users', token)).toBe(403);
    expect(await onB('/roles', token)).toBe(403);

    // And back: a grant on the parent reaches B the same way.
    const granted = heardOnB(parent);
    expect((await a.api('PATCH', `/roles/${parent}`, { token: adminToken, body: { permissions: [{ resource: 'users', action: 'read' }] } })).status).toBe(200);
    await granted;
    expect(await onB('/roles', token)).toBe(200);
  });

  /** Resolves once B has heard `key` on `topic` (B's caches subscribed at start, so they have dropped it by then). */
  const heardOnBTopic = (topic: string, key: string) =>
    new Promise<void>((resolve) => {
      b.keel.invalidation.on(topic, (k) => {
        if (k === key) resolve();
      });
    });

  it('an API key revoked on one process stops authenticating on the other (which had it cached) once that one heard of it', async () => {
    const created = await a.api('POST', '/api-keys', { token: adminToken, body: { name: 'cached', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(created.status).toBe(201);
    const { id, key } = created.body as { id: string; key: string };
    // B resolves the key (and keeps it): twice, the second from its cache.
    expect(await onB('/devices', key)).toBe(200);
    expect(await onB('/devices', key)).toBe(200);
    const heard = heardOnBTopic(API_KEY_TOPIC, id);
    expect((await a.api('DELETE', `/api-keys/${id}`, { token: adminToken })).status).toBe(204);
    await heard;
    expect(await onB('/devices', key)).toBe(401);
  });

  it('the key of a creator disabled on one process stops authenticating on the other', async () => {
    const creator = await createUser(a, { org: { orgId: t.orgId, roleId: ROLE.orgAdmin } });
    const creatorToken = (await login(a, creator)).accessToken;
    const created = await a.api('POST', '/api-keys', { token: creatorToken, body: { name: 'theirs', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(created.status).toBe(201);
    const { key } = created.body as { key: string };
    expect(await onB('/devices', key)).toBe(200);
    const heard = heardOnBTopic(USER_TOPIC, creator.id);
    expect((await a.api('PATCH', `/users/${creator.id}`, { token: adminToken, body: { status: 'disabled' } })).status).toBe(200);
    await heard;
    expect(await onB('/devices', key)).toBe(401);
  });

  it('an organisation deleted on one process is 404 on the other, which had it cached, once that one heard of it', async () => {
    // A partner administrator (its role forces a second factor) acting in one of its organisations.
    const partnerToken = (await enrollTotp(a, (await login(a, t.partnerAdmin)).accessToken)).accessToken;
    const org = await a.api('POST', '/orgs', { token: partnerToken, body: { name: 'Short-lived' } });
    expect(org.status).toBe(201);
    const id = org.body.id as string;
    // B enters the organisation by id (the scope middleware caches its id and partner).
    expect(await onB(`/webhooks?orgId=${id}`, partnerToken)).toBe(200);
    expect(await onB(`/webhooks?orgId=${id}`, partnerToken)).toBe(200);
    const heard = heardOnBTopic(ORGS_TOPIC, id);
    expect((await a.api('DELETE', `/orgs/${id}`, { token: partnerToken })).status).toBe(204);
    await heard;
    expect(await onB(`/webhooks?orgId=${id}`, partnerToken)).toBe(404);
  });

  it('a re-parented role loses the old parent’s grants on the other process', async () => {
    const child = await insertRole(a, { scope: 'organization', orgId: t.orgId, name: 'Kid', perms: [], parentRoleId: ROLE.orgReadOnly });
    const user = await createUser(a, { org: { orgId: t.orgId, roleId: child } });
    const token = (await login(a, user)).accessToken;
    expect(await onB('/roles', token)).toBe(200);
    const heard = heardOnB(child);
    expect((await a.api('PATCH', `/roles/${child}`, { token: adminToken, body: { parentRoleId: null } })).status).toBe(200);
    await heard;
    expect(await onB('/roles', token)).toBe(403);
  });
});

describe.skipIf(backend !== 'postgres' || !backendAvailable())('concurrent role changes (postgres)', () => {
  let app: TestApp;
  let t: Tenant;
  let token: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    t = await createTenant(app);
    token = (await login(app, t.orgAdmin)).accessToken;
  });
  afterAll(async () => app?.close());

  it('two PATCHes racing to close a cycle: exactly one wins', async () => {
    for (let round = 0; round < 5; round++) {
      const x = await insertRole(app, { scope: 'organization', orgId: t.orgId, name: `X${round}` });
      const y = await insertRole(app, { scope: 'organization', orgId: t.orgId, name: `Y${round}` });
      const [r1, r2] = await Promise.all([
        app.api('PATCH', `/roles/${x}`, { token, body: { parentRoleId: y } }),
        app.api('PATCH', `/roles/${y}`, { token, body: { parentRoleId: x } }),
      ]);
      expect([r1.status, r2.status].sort()).toEqual([200, 400]);
      expect([r1, r2].find((r) => r.status === 400)?.body.code).toBe('circular_inheritance');
    }
  });

  it('a delete racing with an assignment never leaves a member without a role', async () => {
    const role = await insertRole(app, { scope: 'organization', orgId: t.orgId, name: 'Racy', perms: ['devices:read'] });
    const [del, user] = await Promise.allSettled([
      app.api('DELETE', `/roles/${role}`, { token }),
      createUser(app, { org: { orgId: t.orgId, roleId: role } }),
    ]);
    if (del.status !== 'fulfilled') throw new Error('delete request failed');
    if (user.status === 'fulfilled') {
      // The member exists, so the delete must have been refused.
      expect(del.value.status).toBe(400);
      expect(del.value.body.code).toBe('role_in_use');
    } else {
      expect(del.value.status).toBe(204);
    }
  });
});

/**
 * Redis pub/sub ignores the logical database: two deployments sharing one Redis server on different
 * databases used to hear each other's drops (each foreign drop emptying caches and costing reads; in
 * this suite, test files on other workers dropped the caches a statement count relies on). Each
 * database has its own channel now. Shown by order, not by waiting: Redis runs commands one at a time
 * and writes to a subscriber in that order, so a bus on the same channel as the first message would
 * have received it before the second.
 */
describe.skipIf(backend !== 'postgres' || !backendAvailable())('invalidation across Redis databases', () => {
  let app: TestApp;
  const buses: Invalidation[] = [];
  const clients: Redis[] = [];
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => {
    for (const bus of buses) await bus.stop();
    for (const c of clients) c.disconnect();
    await app?.close();
  });

  it('a deployment on another Redis database does not hear this one\'s drops; one on the same database does', async () => {
    const url = app.server.keel.config.REDIS_URL ?? '';
    const db = Number(new URL(url).pathname.slice(1));
    const other = (db % (REDIS_DATABASES - 1)) + 1;
    const topic = `isolation.${randomUUID()}`;
    const busOn = async (database: number) => {
      // A process's two connections, as keel.ts makes them: one publishes, the bus subscribes with its own.
      const redisUrl = `${url.slice(0, url.lastIndexOf('/'))}/${database}`;
      const redis = await connectRedis(redisUrl);
      clients.push(redis);
      const bus = new Invalidation({ database: app.server.keel.database, redisUrl, redis }, createLogger('silent'));
      await bus.start();
      buses.push(bus);
      const heard: string[] = [];
      bus.on(topic, (key) => heard.push(key));
      return { bus, heard };
    };
    const [here, hereToo, there, thereToo] = [await busOn(db), await busOn(db), await busOn(other), await busOn(other)];
    await there.bus.publish(topic, 'from the other database');
    await waitUntil('the other database\'s second bus to hear its message', () => thereToo.heard.length, (n) => n === 1);
    await here.bus.publish(topic, 'from this database');
    await waitUntil('this database\'s second bus to hear its message', () => hereToo.heard.length, (n) => n >= 1);
    expect(hereToo.heard).toEqual(['from this database']);
    expect(thereToo.heard).toEqual(['from the other database']);
    expect(invalidationChannel(0)).toBe('keel_invalidate'); // the name earlier versions used: a rolling upgrade on database 0 loses nothing
  });
});
