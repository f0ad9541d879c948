import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { randomBytes } from 'node:crypto';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { cookie, createUser, login } from '../helpers/fixtures.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import { sessions } from '../../src/modules/identity/schema.js';
import { USER_TOPIC } from '../../src/modules/identity/sessions.js';
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
  afterEach(() => clock.reset());

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
  });

  it('after a logout, the previous refresh token is 401 inside the grace window too (a revoked session answers before any race)', async () => {
    const user = await createUser(app);
    const first = await login(app, user);
    const second = await refreshBody(first.refreshToken);
    expect(second.status).toBe(200);
    expect((await app.api('POST', '/auth/logout', { token: second.body.accessToken })).status).toBe(200);
    const previous = await refreshBody(first.refreshToken);
    expect(previous.status).toBe(401);
    expect(previous.body.code).not.toBe('refresh_raced');
    expect((await refreshBody(second.body.refreshToken)).status).toBe(401);
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

  it('refuses a cookie refresh without the service_csrf cookie, even with the right header', async () => {
    const user = await createUser(app);
    const { cookies } = await login(app, user);
    const rt = cookie(cookies, 'service_refresh_token')!.value;
    const csrf = cookie(cookies, 'service_csrf')!.value;
    const noCookie = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}`, 'x-service-csrf': csrf } });
    expect(noCookie.status).toBe(403);
    expect(noCookie.body.code).toBe('csrf_failed');
    const emptyBoth = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}; service_csrf=`, 'x-service-csrf': '' } });
    expect(emptyBoth.status).toBe(403);
    // Nothing was rotated: the same cookies still refresh.
    const ok = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}; service_csrf=${csrf}`, 'x-service-csrf': csrf } });
    expect(ok.status).toBe(200);
  });

  it('binds service_csrf to the session: a planted cookie and header of another value fail', async () => {
    const user = await createUser(app);
    const mine = await login(app, user);
    const other = await login(app, user);
    const rt = cookie(mine.cookies, 'service_refresh_token')!.value;
    const ownCsrf = cookie(mine.cookies, 'service_csrf')!.value;
    const otherCsrf = cookie(other.cookies, 'service_csrf')!.value;
    expect(otherCsrf).not.toBe(ownCsrf);
    // What a sibling subdomain can do: set service_csrf for the parent domain and send the same value.
    for (const planted of ['attacker-chosen-value', otherCsrf]) {
      const res = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}; service_csrf=${planted}`, 'x-service-csrf': planted } });
      expect(res.status, planted).toBe(403);
      expect(res.body.code).toBe('csrf_failed');
      expect(res.body).not.toHaveProperty('accessToken');
    }
    const ok = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}; service_csrf=${ownCsrf}`, 'x-service-csrf': ownCsrf } });
    expect(ok.status).toBe(200);
    // The session keeps its CSRF value across rotations.
    expect(cookie(ok.cookies, 'service_csrf')!.value).toBe(ownCsrf);
    // A rotated-out token presented with a wrong value is refused before the race/reuse rules.
    const stale = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${rt}; service_csrf=${otherCsrf}`, 'x-service-csrf': otherCsrf } });
    expect(stale.status).toBe(403);
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
  });

  it('a refresh token dies after 7 idle days', async () => {
    const user = await createUser(app);
    const { refreshToken } = await login(app, user);
    clock.advance(7 * 86_400_000 - 60_000);
    const justInTime = await refreshBody(refreshToken);
    expect(justInTime.status).toBe(200);
    // Each refresh moves the idle expiry: 7 days from this refresh, not from the sign-in.
    clock.advance(7 * 86_400_000 - 60_000);
    const again = await refreshBody(justInTime.body.refreshToken);
    expect(again.status).toBe(200);
    clock.advance(7 * 86_400_000 + 1000);
    const idle = await refreshBody(again.body.refreshToken);
    expect(idle.status).toBe(401);
    expect(idle.body.code).toBe('invalid_refresh_token');
  });

  it('a session ends 30 days after sign-in however often it is refreshed', async () => {
    const user = await createUser(app);
    let { refreshToken } = await login(app, user);
    let accessToken = '';
    let day = 0;
    for (const days of [6, 6, 6, 6, 5]) {
      clock.advance(days * 86_400_000);
      day += days;
      const next = await refreshBody(refreshToken);
      expect(next.status, `refresh on day ${day}`).toBe(200);
      refreshToken = next.body.refreshToken;
      accessToken = next.body.accessToken;
    }
    // Day 29: the idle expiry is capped at the absolute one.
    const [row] = await app.server.keel.db.select().from(sessions).where(eq(sessions.userId, user.id));
    expect(row!.expiresAt.getTime()).toBe(row!.absoluteExpiresAt.getTime());
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(200);
    clock.advance(86_400_000 + 1000);
    const late = await refreshBody(refreshToken);
    expect(late.status).toBe(401);
    expect(late.body.code).toBe('invalid_refresh_token');
    // The session's access tokens end with it (this one is 24 hours old, but the session ended first).
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(401);
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

describe.skipIf(!backendAvailable())('refresh rotation races', () => {
  raceTest('20 parallel refreshes of one token yield one new pair and refresh_raced answers, never two families', async () => {
    const app = await startTestApp();
    try {
      const user = await createUser(app);
      const { refreshToken } = await login(app, user);
      const answers = await together(20, () => app.api('POST', '/auth/refresh', { body: { refreshToken } }));
      const winner = expectOneWinner(answers, 200, [409]);
      for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('refresh_raced');
      const rows = await app.server.keel.db.select().from(sessions).where(eq(sessions.userId, user.id));
      expect(rows).toHaveLength(1);
      expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: winner.body.refreshToken } })).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe.skipIf(backend !== 'postgres' || !backendAvailable())('sessions across processes on PostgreSQL', () => {

  it('a logout on one process stops the token on the other process’s next request after it heard of it', async () => {
    const app = await startTestApp();
    const env = { NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: app.server.keel.config.DATABASE_URL!, REDIS_URL: app.server.keel.config.REDIS_URL!, APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'), JWT_SECRET: app.server.keel.config.JWT_SECRET!, DATA_DIR: app.server.keel.config.DATA_DIR };
    const config = loadConfig(env);
    const second = await startServer({ config, log: createLogger('silent'), port: 0, host: '127.0.0.1' });
    try {
      const user = await createUser(app);
      const { accessToken } = await login(app, user);
      const me = () => fetch(`${second.url}/api/v1/auth/me`, { headers: { authorization: `Bearer ${accessToken}` } });
      expect((await me()).status).toBe(200); // cached as live on the second process
      // Resolves once the second process has heard the user's invalidation; its session cache
      // subscribed when it started, so it has dropped the session by then. Never heard: test timeout.
      const heard = new Promise<void>((resolve) => {
        second.keel.invalidation.on(USER_TOPIC, (key) => {
          if (key === user.id) resolve();
        });
      });
      expect((await app.api('POST', '/auth/logout', { token: accessToken })).status).toBe(200);
      await heard;
      expect((await me()).status).toBe(401);
    } finally {
      await second.close();
      await app.close();
    }
  });
});
