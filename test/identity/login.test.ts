import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, enrollTotp, login, nextTotpStep, STRONG_PASSWORD, totpCode, uniqueEmail, createTenant } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { writeAudit } from '../../src/modules/audit/service.js';
import { sessions, users } from '../../src/modules/identity/schema.js';
import { partners } from '../../src/modules/tenancy/schema.js';
import type { KeelEvent } from '../../src/events.js';

describe.skipIf(!backendAvailable())('registration', () => {
  let app: TestApp;
  let closed: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { ENABLE_REGISTRATION: 'true', REGISTER_LIMIT: '1000', REGISTER_PARTNER_LIMIT: '1000' } });
    closed = await startTestApp();
  });
  afterAll(async () => {
    await app?.close();
    await closed?.close();
  });

  it('is 404 unless ENABLE_REGISTRATION=true', async () => {
    const body = { email: uniqueEmail(), password: STRONG_PASSWORD, name: 'Ada' };
    expect((await closed.api('POST', '/auth/register', { body })).status).toBe(404);
    expect((await closed.api('POST', '/auth/register-partner', { body: { ...body, partnerName: 'P' } })).status).toBe(404);
  });

  it('creates a standalone user with no scope and signs them in', async () => {
    const email = uniqueEmail('solo');
    const res = await app.api('POST', '/auth/register', { body: { email, password: STRONG_PASSWORD, name: 'Solo' } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ tokenType: 'Bearer', expiresIn: 900, user: { email, scope: null, partnerId: null, orgId: null, permissions: [] } });
    expect(res.body.accessToken).toBeTruthy();
    expect(res.body.refreshToken).toBeTruthy();
    expect(res.body.user).not.toHaveProperty('passwordHash');
    const again = await app.api('POST', '/auth/register', { body: { email: email.toUpperCase(), password: STRONG_PASSWORD, name: 'Solo' } });
    expect(again.status).toBe(409);
  });

  it('says why a password is refused', async () => {
    const short = await app.api('POST', '/auth/register', { body: { email: uniqueEmail(), password: 'abc', name: 'A' } });
    expect(short.status).toBe(400);
    expect(short.body.code).toBe('validation_failed');
    expect(short.body.details.fields[0]).toMatchObject({ path: 'password', message: expect.stringContaining('at least 8') });
    const email = uniqueEmail('weakling');
    const weak = await app.api('POST', '/auth/register', { body: { email, password: 'password1', name: 'Weak' } });
    expect(weak.status).toBe(400);
    expect(weak.body.details.fields[0].message).toMatch(/too weak/);
    const ownEmail = await app.api('POST', '/auth/register', { body: { email, password: email, name: 'Weak' } });
    expect(ownEmail.status).toBe(400);
    const long = await app.api('POST', '/auth/register', { body: { email, password: 'x'.repeat(129), name: 'Long' } });
    expect(long.body.details.fields[0].message).toContain('at most 128');
  });

  it('register-partner creates partner, user and Partner Admin membership at once, or nothing', async () => {
    const email = uniqueEmail('msp');
    const res = await app.api('POST', '/auth/register-partner', { body: { partnerName: 'Acme MSP', email, password: STRONG_PASSWORD, name: 'Mia' } });
    expect(res.status).toBe(201);
    expect(res.body.partner).toMatchObject({ name: 'Acme MSP' });
    expect(res.body.user).toMatchObject({ scope: 'partner', partnerId: res.body.partner.id, roleId: '00000000-0000-7000-8000-000000000001' });
    expect(res.body.user.permissions).toEqual([{ resource: '*', action: '*' }]);

    const before = (await app.server.keel.db.select().from(partners)).length;
    const dup = await app.api('POST', '/auth/register-partner', { body: { partnerName: 'Dup MSP', email, password: STRONG_PASSWORD, name: 'Mia' } });
    expect(dup.status).toBe(409);
    expect((await app.server.keel.db.select().from(partners)).length).toBe(before);
  });

  it('limits registrations per IP (429 with retryAfter)', async () => {
    const limited = await startTestApp({ env: { ENABLE_REGISTRATION: 'true', REGISTER_PARTNER_LIMIT: '2' } });
    try {
      const attempt = () =>
        limited.api('POST', '/auth/register-partner', { body: { partnerName: 'P', email: uniqueEmail(), password: STRONG_PASSWORD, name: 'N' } });
      expect((await attempt()).status).toBe(201);
      expect((await attempt()).status).toBe(201);
      const third = await attempt();
      expect(third.status).toBe(429);
      expect(third.body.retryAfter).toBeGreaterThan(0);
      expect(third.headers.get('retry-after')).toBe(String(third.body.retryAfter));
    } finally {
      await limited.close();
    }
  });
});

describe.skipIf(!backendAvailable())('login', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', LOCKOUT_THRESHOLD: '3', LOCKOUT_SECONDS: '900' } });
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  const attempt = (email: string, password: string) => app.api('POST', '/auth/login', { body: { email, password } });
  const failedCount = async (id: string) =>
    (await app.server.keel.db.select({ n: users.failedLoginCount }).from(users).where(eq(users.id, id)))[0]!.n;

  it('answers tokens, the refresh cookie and the CSRF cookie', async () => {
    const user = await createUser(app);
    const res = await app.api('POST', '/auth/login', { body: { email: user.email.toUpperCase(), password: user.password } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ tokenType: 'Bearer', expiresIn: 900, user: { id: user.id, email: user.email } });
    const refresh = res.cookies.find((c) => c.startsWith('service_refresh_token='))!;
    expect(refresh).toContain(`service_refresh_token=${res.body.refreshToken}`);
    expect(refresh).toMatch(/HttpOnly/);
    expect(refresh).toMatch(/SameSite=Lax/);
    expect(refresh).toMatch(/Path=\/api\/v1\/auth/);
    expect(refresh).not.toMatch(/Secure/);
    const csrf = res.cookies.find((c) => c.startsWith('service_csrf='))!;
    expect(csrf).not.toMatch(/HttpOnly/);
    expect(csrf).toMatch(/Path=\//);
  });

  it('gives one answer for a wrong password, an unknown email, an invited and a disabled account', async () => {
    const user = await createUser(app);
    const invited = await createUser(app, { status: 'invited' });
    const disabled = await createUser(app, { status: 'disabled' });
    const answers = await Promise.all([
      app.api('POST', '/auth/login', { body: { email: user.email, password: 'wrong-password-entirely' } }),
      app.api('POST', '/auth/login', { body: { email: uniqueEmail('ghost'), password: STRONG_PASSWORD } }),
      app.api('POST', '/auth/login', { body: { email: invited.email, password: invited.password } }),
      app.api('POST', '/auth/login', { body: { email: disabled.email, password: disabled.password } }),
    ]);
    for (const a of answers) {
      expect(a.status).toBe(401);
      expect(a.body).toEqual({ error: 'Invalid email or password', code: 'invalid_credentials' });
    }
  });

  it('rejects a malformed body with field details and bad JSON with invalid_json', async () => {
    const res = await app.api('POST', '/auth/login', { body: { email: 'not-an-email' } });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('validation_failed');
    expect(res.body.details.fields.map((f: { path: string }) => f.path).sort()).toEqual(['email', 'password']);
    const bad = await app.api('POST', '/auth/login', { raw: '{"email":', headers: { 'content-type': 'application/json' } });
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe('invalid_json');
  });

  it('locks an account after consecutive failures and answers like a wrong password until the lock ends', async () => {
    const user = await createUser(app);
    for (let i = 0; i < 3; i++) {
      expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: `nope-${i}-wrong-pass` } })).status).toBe(401);
    }
    const locked = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(locked.status).toBe(401);
    expect(locked.body).toEqual({ error: 'Invalid email or password', code: 'invalid_credentials' });
    clock.advance(901_000);
    const after = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(after.status).toBe(200);
  });

  it('starts a new count when a lock has ended', async () => {
    const user = await createUser(app);
    for (let i = 0; i < 3; i++) expect((await attempt(user.email, `nope-${i}-wrong-pass`)).status).toBe(401);
    expect((await attempt(user.email, user.password)).status).toBe(401);
    clock.advance(901_000);
    // Two failures after the lock: a fresh count of 2 (below 3), not 5.
    for (let i = 0; i < 2; i++) expect((await attempt(user.email, `again-${i}-wrong-pass`)).status).toBe(401);
    expect(await failedCount(user.id)).toBe(2);
    expect((await attempt(user.email, user.password)).status).toBe(200);
    expect(await failedCount(user.id)).toBe(0);
    // And a third failure of a new run locks again.
    for (let i = 0; i < 3; i++) expect((await attempt(user.email, `third-${i}-wrong-pass`)).status).toBe(401);
    expect((await attempt(user.email, user.password)).status).toBe(401);
  });

  it('counts consecutive failures: a sign-in clears the count', async () => {
    const user = await createUser(app);
    for (let i = 0; i < 2; i++) expect((await attempt(user.email, `nope-${i}-wrong-pass`)).status).toBe(401);
    expect(await failedCount(user.id)).toBe(2);
    expect((await attempt(user.email, user.password)).status).toBe(200);
    expect(await failedCount(user.id)).toBe(0);
  });

  it('a right password answered with an MFA challenge keeps earlier failures until the sign-in completes', async () => {
    const user = await createUser(app);
    const { secret } = await enrollTotp(app, (await login(app, user)).accessToken);
    for (let i = 0; i < 2; i++) expect((await attempt(user.email, `nope-${i}-wrong-pass`)).status).toBe(401);
    const challenge = await attempt(user.email, user.password);
    expect(challenge.body.mfaRequired).toBe(true);
    // Its own reservation was given back: neither counted as a failure nor clearing the earlier two.
    expect(await failedCount(user.id)).toBe(2);
    await nextTotpStep();
    const done = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: await totpCode(secret) } });
    expect(done.status).toBe(200);
    expect(await failedCount(user.id)).toBe(0);
  });

  it('records user.login in the audit log and publishes the event with the organisation', async () => {
    const tenant = await createTenant(app);
    const seen: KeelEvent[] = [];
    const off = app.server.keel.events.subscribe('*', (_tx, e) => {
      seen.push(e);
      return Promise.resolve();
    });
    const { body } = await login(app, tenant.orgTechnician);
    off();
    const event = seen.find((e) => e.type === 'user.login');
    expect(event).toMatchObject({ orgId: tenant.orgId, data: { userId: tenant.orgTechnician.id, method: 'password' } });
    const entries = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.actorId, body.user.id));
    expect(entries.map((e) => e.action)).toContain('user.login');
    const entry = entries.find((e) => e.action === 'user.login')!;
    expect(entry.orgId).toBe(tenant.orgId);
    expect(entry.ipAddress).toBe(app.ip);
    expect(JSON.stringify(entry)).not.toContain(tenant.orgTechnician.password);
  });

  it('commits a user.login subscriber\'s writes with the login, and its failure leaves no session and no entry', async () => {
    const user = await createUser(app);
    const failing = app.server.keel.events.subscribe('user.login', () => Promise.reject(new Error('subscriber failed')));
    const refused = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    failing();
    expect(refused.status).toBe(500);
    expect(await app.server.keel.db.select().from(sessions).where(eq(sessions.userId, user.id))).toEqual([]);
    expect(await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.actorId, user.id))).toEqual([]);
    const [before] = await app.server.keel.db.select({ lastLoginAt: users.lastLoginAt }).from(users).where(eq(users.id, user.id));
    expect(before?.lastLoginAt).toBeNull();

    const writing = app.server.keel.events.subscribe('user.login', async (tx, event) => {
      await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.subscriber', target: { type: 'user', id: user.id }, details: { eventId: event.id } });
    });
    const ok = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    writing();
    expect(ok.status).toBe(200);
    const entries = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id));
    expect(entries.map((e) => e.action).sort()).toEqual(['test.subscriber', 'user.login']);
  });
});

describe.skipIf(!backendAvailable())('login throttling', () => {
  it('throttles brute force over one account per IP+email with 429 and retryAfter', async () => {
    const app = await startTestApp({ env: { LOGIN_LIMIT: '5', LOCKOUT_THRESHOLD: '1000' } });
    try {
      const user = await createUser(app);
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        statuses.push((await app.api('POST', '/auth/login', { body: { email: user.email, password: `guess-${i}-wrong` } })).status);
      }
      expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
      const blocked = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
      expect(blocked.status).toBe(429);
      expect(blocked.body.code).toBe('rate_limited');
      expect(blocked.body.retryAfter).toBeGreaterThan(0);
      expect(Number(blocked.headers.get('retry-after'))).toBe(blocked.body.retryAfter);
      // Another account from the same IP is not affected.
      const other = await createUser(app);
      expect((await app.api('POST', '/auth/login', { body: { email: other.email, password: other.password } })).status).toBe(200);
    } finally {
      await app.close();
    }
  });
});
