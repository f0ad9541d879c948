import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { randomBytes } from 'node:crypto';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { cookie, createUser, login } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { sessions } from '../../src/modules/identity/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { startServer } from '../../src/server.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/platform/logger.js';

describe.skipIf(!backendAvailable())('refresh tokens and sessions', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
  });
  afterAll(async () => app?.close());

  const refreshBody = (refreshToken: string) => app.api('POST', '/auth/refresh', { body: { refreshToken } });

  it('rotates: the new pair works, the session keeps its id, the old refresh token is spent', async () => {
    const user = await createUser(app);
    const first = await login(app, user);
    const next = await refreshBody(first.refreshToken);
    expect(next.status).toBe(200);
    expect(next.body.refreshToken).not.toBe(first.refreshToken);
    expect((await app.api('GET', '/auth/me', { token: next.body.accessToken })).status).toBe(200);
    // The old access token stays valid until it expires: rotation is not revocation.
    expect((await app.api('GET', '/auth/me', { token: first.accessToken })).status).toBe(200);
    const list = await app.api('GET', '/auth/sessions', { token: next.body.accessToken });
    expect(list.body.data).toHaveLength(1);
    expect(list.body.pagination).toEqual({ page: 1, limit: 50, total: 1 });
  });

  it('stores refresh tokens only as hashes', async () => {
    const user = await createUser(app);
    const { refreshToken } = await login(app, user);
    const rows = await app.server.keel.db.select().from(sessions).where(eq(sessions.userId, user.id));
    expect(rows).toHaveLength(1);
    expect(rows[0]!.tokenHash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(rows)).not.toContain(refreshToken);
  });

  it('answers refresh_raced inside the grace window and revokes the family on reuse after it', async () => {
    const user = await createUser(app);
    const first = await login(app, user);
    const second = await refreshBody(first.refreshToken);
    expect(second.status).toBe(200);
    const raced = await refreshBody(first.refreshToken);
    expect(raced.status).toBe(409);
    expect(raced.body.code).toBe('refresh_raced');
    expect(raced.body).not.toHaveProperty('accessToken');
    // The family is still alive after a race.
    expect((await app.api('GET', '/auth/me', { token: second.body.accessToken })).status).toBe(200);

    clock.advance(11_000);
    const reuse = await refreshBody(first.refreshToken);
    expect(reuse.status).toBe(401);
    // Reuse revoked the whole family: the newest refresh token and every access token of it.
    expect((await refreshBody(second.body.refreshToken)).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: second.body.accessToken })).status).toBe(401);
    clock.reset();
  });

  it('refreshes by cookie only with the matching x-service-csrf header', async () => {
    const user = await createUser(app);
    const { cookies } = await login(app, user);
    const rt = cookie(cookies, 'service_refresh_token')!.value;
    const csrf = cookie(cookies, 'service_csrf')!.value;
    const jar = `service_refresh_token=${rt}; service_csrf=${csrf}`;
    const noHeader = await app.api('POST', '/auth/refresh', { headers: { cookie: jar } });
    expect(noHeader.status).toBe(403);
    expect(noHeader.body.code).toBe('csrf_failed');
    const wrong = await app.api('POST', '/auth/refresh', { headers: { cookie: jar, 'x-service-csrf': `${csrf}x` } });
    expect(wrong.status).toBe(403);
    const ok = await app.api('POST', '/auth/refresh', { headers: { cookie: jar, 'x-service-csrf': csrf } });
    expect(ok.status).toBe(200);
    expect(cookie(ok.cookies, 'service_refresh_token')!.value).toBe(ok.body.refreshToken);
    const none = await app.api('POST', '/auth/refresh');
    expect(none.status).toBe(401);
  });

  it('logout invalidates an access token issued before it on the very next request, and every session', async () => {
    const user = await createUser(app);
    const a = await login(app, user);
    const b = await login(app, user);
    const out = await app.api('POST', '/auth/logout', { token: a.accessToken });
    expect(out.status).toBe(200);
    expect(cookie(out.cookies, 'service_refresh_token')?.attributes).toMatch(/Max-Age=0/);
    expect((await app.api('GET', '/auth/me', { token: a.accessToken })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: b.accessToken })).status).toBe(401);
    expect((await refreshBody(b.refreshToken)).status).toBe(401);
    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.actorId, user.id))).map((e) => e.action);
    expect(actions).toContain('user.logout');
  });

  it('lists own sessions and ends one; another user cannot see or end it', async () => {
    const user = await createUser(app);
    const other = await createUser(app);
    const a = await login(app, user);
    const b = await login(app, user);
    const o = await login(app, other);
    const list = await app.api('GET', '/auth/sessions', { token: a.accessToken });
    expect(list.body.data).toHaveLength(2);
    const current = list.body.data.find((s: { current: boolean }) => s.current);
    const otherSession = list.body.data.find((s: { current: boolean }) => !s.current);
    expect(current).toMatchObject({ ipAddress: app.ip, mfa: false });
    expect((await app.api('DELETE', `/auth/sessions/${otherSession.id}`, { token: o.accessToken })).status).toBe(404);
    expect((await app.api('DELETE', `/auth/sessions/${otherSession.id}`, { token: a.accessToken })).status).toBe(204);
    expect((await app.api('GET', '/auth/me', { token: b.accessToken })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: a.accessToken })).status).toBe(200);
    expect((await app.api('GET', '/auth/sessions?limit=101', { token: a.accessToken })).status).toBe(400);
  });

  it('refuses tampered, foreign and expired access tokens', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const [h, p, s] = accessToken.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString());
    const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, mfa: true })).toString('base64url')}.${s}`;
    expect((await app.api('GET', '/auth/me', { token: forged })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: 'garbage' })).status).toBe(401);
    expect((await app.api('GET', '/auth/me')).status).toBe(401);
    clock.advance(901_000);
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(401);
    clock.reset();
  });
});

describe.skipIf(!backendAvailable())('cookies under production', () => {
  it('marks both cookies Secure', async () => {
    const app = await startTestApp({ env: { NODE_ENV: 'production', ALLOW_INSECURE_TARGETS: 'false' } });
    try {
      const user = await createUser(app);
      const { cookies } = await login(app, user);
      expect(cookie(cookies, 'service_refresh_token')!.attributes).toMatch(/Secure/);
      expect(cookie(cookies, 'service_csrf')!.attributes).toMatch(/Secure/);
    } finally {
      await app.close();
    }
  });
});

describe.skipIf(backend !== 'postgres' || !backendAvailable())('sessions across processes on PostgreSQL', () => {
  it('20 parallel refreshes of one token yield one new pair and refresh_raced answers, never two families', async () => {
    const app = await startTestApp();
    try {
      const user = await createUser(app);
      const { refreshToken } = await login(app, user);
      const answers = await Promise.all(Array.from({ length: 20 }, () => app.api('POST', '/auth/refresh', { body: { refreshToken } })));
      const statuses = answers.map((a) => a.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(1);
      expect(statuses.filter((s) => s === 409)).toHaveLength(19);
      const rows = await app.server.keel.db.select().from(sessions).where(eq(sessions.userId, user.id));
      expect(rows).toHaveLength(1);
      const winner = answers.find((a) => a.status === 200)!;
      expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: winner.body.refreshToken } })).status).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('a logout on one process stops the token on another process at once', async () => {
    const app = await startTestApp();
    const env = { NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: app.server.keel.config.DATABASE_URL!, REDIS_URL: app.server.keel.config.REDIS_URL!, APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'), JWT_SECRET: app.server.keel.config.JWT_SECRET!, DATA_DIR: app.server.keel.config.DATA_DIR };
    const config = loadConfig(env);
    const second = await startServer({ config, log: createLogger('silent'), port: 0, host: '127.0.0.1' });
    try {
      const user = await createUser(app);
      const { accessToken } = await login(app, user);
      const me = () => fetch(`${second.url}/api/v1/auth/me`, { headers: { authorization: `Bearer ${accessToken}` } });
      expect((await me()).status).toBe(200); // cached as live on the second process
      expect((await app.api('POST', '/auth/logout', { token: accessToken })).status).toBe(200);
      let status = 200;
      for (let i = 0; i < 20 && status === 200; i++) {
        status = (await me()).status;
        if (status === 200) await new Promise((r) => setTimeout(r, 50));
      }
      expect(status).toBe(401);
    } finally {
      await second.close();
      await app.close();
    }
  });
});
