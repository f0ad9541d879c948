import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from 'otplib';
import { backend, backendAvailable } from '../helpers/app.js';
import { STRONG_PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { call, startTopology, TOPOLOGY_ADMIN, type Topology } from '../helpers/topology.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { Browser, startOidcIdp } from '../sso/idp.js';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { users } from '../../src/modules/identity/schema.js';
import { hashPassword } from '../../src/modules/identity/passwords.js';
import { addOrganizationMember } from '../../src/modules/access/service.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

/**
 * A multi-process topology (docs/deploy.md "Topology"): two `keel serve` (WORKER=off) and two `keel worker` processes
 * on one PostgreSQL and one Redis, started from the CLI. What one process starts, the other
 * finishes; what one process revokes, the other refuses; limits are counted once for all.
 *
 * Cross-process revocation is pushed (Redis pub/sub), not waited out: without the push the other
 * process would keep its cached session until the access token expires (15 minutes). The tests give
 * it 3 seconds on this shared 2-core machine and log how long it took.
 */
const PUSH_BOUND_MS = 3_000;

describe.skipIf(backend !== 'postgres' || !backendAvailable())('many processes on one PostgreSQL and one Redis', () => {
  let t: Topology;
  let db: Database;
  let A: string;
  let B: string;
  let admin: string;
  let orgId: string;

  /** An active member of the organisation, straight into the database (the arrangement step). */
  async function member(roleId: string = SYSTEM_ROLES.orgReadOnly.id): Promise<{ id: string; email: string; password: string }> {
    const email = uniqueEmail('topo');
    const [row] = await db.db.insert(users).values({ email, name: 'Topology User', passwordHash: await hashPassword(STRONG_PASSWORD), status: 'active' }).returning({ id: users.id });
    await addOrganizationMember(db.db, { orgId, userId: row!.id, roleId });
    return { id: row!.id, email, password: STRONG_PASSWORD };
  }

  async function signIn(url: string, user: { email: string; password: string }): Promise<{ accessToken: string; refreshToken: string }> {
    const res = await call(url, 'POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  }

  /** Polls `url` until `done` holds; answers how long it took (throws after the bound). */
  async function refusedWithin(fn: () => Promise<number>, expected: number): Promise<number> {
    const started = performance.now();
    for (;;) {
      const status = await fn();
      const elapsed = performance.now() - started;
      if (status === expected) return elapsed;
      if (elapsed > PUSH_BOUND_MS) throw new Error(`still ${status} after ${Math.round(elapsed)} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  beforeAll(async () => {
    t = await startTopology({ env: { LOGIN_LIMIT: '4', LOCKOUT_THRESHOLD: '3', WEBHOOK_CONCURRENCY: '2', WEBHOOK_CONCURRENCY_PER_WEBHOOK: '2' } });
    [A, B] = t.apis.map((p) => p.url) as [string, string];
    db = await openDatabase({ url: t.databaseUrl, poolSize: 2 });
    admin = (await signIn(A, TOPOLOGY_ADMIN)).accessToken;
    const partnerId = (await call(A, 'POST', '/partners', { token: admin, body: { name: 'Topology Partner' } })).body.id as string;
    const org = await call(A, 'POST', '/orgs', { token: admin, body: { name: 'Topology Inc', partnerId } });
    expect(org.status).toBe(201);
    orgId = org.body.id;
  }, 240_000);

  afterAll(async () => {
    await db?.close();
    await t?.close();
  });

  it('signs in on one API process and refreshes on the other', async () => {
    const user = await member();
    const first = await signIn(A, user);
    const refreshed = await call(B, 'POST', '/auth/refresh', { body: { refreshToken: first.refreshToken } });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.refreshToken).not.toBe(first.refreshToken);
    expect((await call(A, 'GET', '/users/me', { token: refreshed.body.accessToken })).body.email).toBe(user.email);
    // The rotated-out token is known as such on the first process too (raced, not a second success).
    expect((await call(A, 'POST', '/auth/refresh', { body: { refreshToken: first.refreshToken } })).status).toBe(409);
  });

  it('counts the login limit and the lockout once for both processes', async () => {
    const limited = await member();
    const wrong = { email: limited.email, password: 'not-the-password-at-all-1' };
    for (const url of [A, B, A, B]) expect((await call(url, 'POST', '/auth/login', { body: wrong })).status).toBe(401);
    const over = await call(B, 'POST', '/auth/login', { body: { email: limited.email, password: limited.password } });
    expect(over.status).toBe(429);
    expect(over.body.retryAfter).toBeGreaterThan(0);

    const locked = await member();
    const bad = { email: locked.email, password: 'not-the-password-at-all-2' };
    for (const url of [A, B, A]) expect((await call(url, 'POST', '/auth/login', { body: bad })).status).toBe(401);
    const right = await call(B, 'POST', '/auth/login', { body: { email: locked.email, password: locked.password } });
    expect(right.status).toBe(401);
    expect(right.body.code).toBe('invalid_credentials');
  });

  it('a session ended on one process is refused by the other', async () => {
    const user = await member();
    const { accessToken } = await signIn(A, user);
    expect((await call(B, 'GET', '/users/me', { token: accessToken })).status).toBe(200); // B has it cached now
    expect((await call(A, 'POST', '/auth/logout', { token: accessToken })).status).toBeLessThan(300);
    const ms = await refusedWithin(async () => (await call(B, 'GET', '/users/me', { token: accessToken })).status, 401);
    console.log(`topology: logout on A refused by B after ${Math.round(ms)} ms`);
  });

  it('a role changed on one process is enforced by the other', async () => {
    const role = await call(A, 'POST', '/roles', { token: admin, body: { orgId, name: `Readers ${Date.now()}`, permissions: [{ resource: 'users', action: 'read' }] } });
    expect(role.status, JSON.stringify(role.body)).toBe(201);
    const user = await member(role.body.id);
    const { accessToken } = await signIn(A, user);
    expect((await call(B, 'GET', '/users', { token: accessToken })).status).toBe(200);
    const patched = await call(A, 'PATCH', `/roles/${role.body.id}`, { token: admin, body: { orgId, permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    const ms = await refusedWithin(async () => (await call(B, 'GET', '/users', { token: accessToken })).status, 403);
    console.log(`topology: role change on A enforced by B after ${Math.round(ms)} ms`);
  });

  it('an MFA challenge made on one process is answered on the other, once', async () => {
    const user = await member();
    const { accessToken } = await signIn(A, user);
    const setup = await call(A, 'POST', '/auth/mfa/setup', { token: accessToken });
    expect(setup.status).toBe(200);
    const enable = await call(B, 'POST', '/auth/mfa/enable', { token: accessToken, body: { code: await generate({ secret: setup.body.secret as string }) } });
    expect(enable.status, JSON.stringify(enable.body)).toBe(200);
    const challenge = await call(A, 'POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(challenge.body.mfaRequired).toBe(true);
    const recovery = (enable.body.recoveryCodes as string[])[0];
    const verified = await call(B, 'POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: recovery } });
    expect(verified.status, JSON.stringify(verified.body)).toBe(200);
    expect(verified.body.accessToken).toBeTruthy();
    const again = await call(A, 'POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: (enable.body.recoveryCodes as string[])[1] } });
    expect(again.status).toBe(401);
  });

  it('an SSO login started on one process is exchanged on the other, once', async () => {
    const portA = t.apis[0]!.port;
    const idp = await startOidcIdp({ redirectUri: `http://localhost:${portA}/api/v1/sso/callback` });
    try {
      // Provider writes need a session with a second factor.
      const setup = await call(A, 'POST', '/auth/mfa/setup', { token: admin });
      const enabled = await call(A, 'POST', '/auth/mfa/enable', { token: admin, body: { code: await generate({ secret: setup.body.secret as string }) } });
      expect(enabled.status, JSON.stringify(enabled.body)).toBe(200);
      admin = enabled.body.accessToken as string;
      const created = await call(B, 'POST', '/sso/providers', {
        token: admin,
        body: { orgId, name: 'Topology IdP', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect((await call(A, 'POST', `/sso/providers/${created.body.id}/status?orgId=${orgId}`, { token: admin, body: { status: 'active' } })).status).toBe(200);
      idp.accounts.set('topo-sso', { sub: 'topo-sso', email: uniqueEmail('sso'), name: 'Single Sign' });
      const app = `http://localhost:${portA}`;
      const { location } = await new Browser({ ip: '127.0.0.1' }).signInAt(`${A}/api/v1/sso/login/${orgId}`, 'topo-sso', (l) => l.startsWith(app) && !l.includes('/api/v1/sso/callback'));
      const code = new URL(location).hash.replace(/^#ssoCode=/, '');
      expect(code).not.toBe('');
      const exchanged = await call(B, 'POST', '/sso/exchange', { body: { code: decodeURIComponent(code) } });
      expect(exchanged.status, JSON.stringify(exchanged.body)).toBe(200);
      expect(exchanged.body.user.orgId).toBe(orgId);
      expect((await call(A, 'POST', '/sso/exchange', { body: { code: decodeURIComponent(code) } })).status).toBe(400);
    } finally {
      await idp.close();
    }
  }, 120_000);

  it('spreads webhook deliveries over both workers and never attempts one twice', async () => {
    const rx: Receiver = await startReceiver();
    try {
      let inFlight = 0;
      let most = 0;
      rx.behave(async (_r, res) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((r) => setTimeout(r, 150));
        inFlight--;
        res.writeHead(200).end('ok');
      });
      const hook = await call(A, 'POST', '/webhooks', { token: admin, body: { orgId, name: 'psa', url: rx.url, events: ['alert.triggered'] } });
      expect(hook.status, JSON.stringify(hook.body)).toBe(201);
      const key = await call(A, 'POST', '/api-keys', { token: admin, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } });
      expect(key.status).toBe(201);
      const N = 40;
      for (let i = 0; i < N; i++) {
        const res = await call(i % 2 ? A : B, 'POST', '/events', { token: key.body.key, body: { orgId, type: 'alert.triggered', data: { i } } });
        expect(res.status).toBe(202);
      }
      const got = await rx.waitFor(N, undefined, 60_000);
      const ids = got.map((r) => r.headers['x-service-delivery-id']);
      expect(new Set(ids).size).toBe(N);
      // Each worker runs at most 2 attempts at once (WEBHOOK_CONCURRENCY_PER_WEBHOOK=2): more than 2 in
      // flight together means both workers were delivering.
      expect(most).toBeGreaterThan(2);
      await new Promise((r) => setTimeout(r, 500));
      expect(rx.received.length).toBe(N); // no attempt made twice, even late
    } finally {
      await rx.close();
    }
  }, 120_000);
});
