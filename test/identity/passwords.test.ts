import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { createUser, login, uniqueEmail } from '../helpers/fixtures.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { singleUseRecords } from '../../src/platform/db/schema.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { PASSWORD_RESET_PURPOSE, PASSWORD_RESET_TTL_MS } from '../../src/modules/identity/service.js';

const NEW_PASSWORD = 'a-brand-new-passphrase-for-2026';

describe.skipIf(!backendAvailable())('passwords: forgot, reset, change; profile', () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000', FORGOT_PASSWORD_LIMIT: '1000', PUBLIC_URL: 'https://keel.example.com' } });
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });
  afterEach(() => clock.reset());

  /** Forgot-password queues its work after the answer: this resolves once that work has finished. */
  const queuedWorkDone = () => identityOf(app.server.keel).deferred.idle();
  const mailsTo = (email: string) => smtp.messages.filter((m) => m.to.includes(email));

  async function resetLink(email: string): Promise<string> {
    const earlier = new Set(smtp.messages);
    const res = await app.api('POST', '/auth/forgot-password', { body: { email } });
    expect(res.status).toBe(200);
    const mail = await smtp.waitFor((m) => m.to.includes(email) && !earlier.has(m) && m.urls.some((u) => u.includes('/reset-password?token=')));
    const url = mail.urls.find((u) => u.includes('/reset-password?token='));
    expect(url).toBeDefined();
    expect(url!.startsWith('https://keel.example.com/reset-password?token=')).toBe(true);
    return new URL(url!).searchParams.get('token')!;
  }

  it('emails a reset link that works once, ends every session, and is stored only hashed', async () => {
    const user = await createUser(app);
    const before = await login(app, user);
    const other = await login(app, user);
    const token = await resetLink(user.email);
    const stored = await app.server.keel.db.select().from(singleUseRecords).where(eq(singleUseRecords.subjectId, user.id));
    expect(JSON.stringify(stored)).not.toContain(token);

    const weak = await app.api('POST', '/auth/reset-password', { body: { token, password: 'password' } });
    expect(weak.status).toBe(400);
    expect(weak.body.code).toBe('validation_failed');

    const ok = await app.api('POST', '/auth/reset-password', { body: { token, password: NEW_PASSWORD } });
    expect(ok.status).toBe(200);
    expect((await app.api('GET', '/auth/me', { token: before.accessToken })).status).toBe(401);
    expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: before.refreshToken } })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: other.accessToken })).status).toBe(401);
    expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: other.refreshToken } })).status).toBe(401);
    const again = await app.api('POST', '/auth/reset-password', { body: { token, password: `${NEW_PASSWORD}-2` } });
    expect(again.status).toBe(400);
    expect(again.body.code).toBe('invalid_token');
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(401);
    await login(app, { email: user.email, password: NEW_PASSWORD });
    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id))).map((a) => a.action);
    expect(actions).toContain('user.password.reset');
  });

  it('expires a reset link after one hour, and a newer link replaces the older', async () => {
    const user = await createUser(app);
    const old = await resetLink(user.email);
    const fresh = await resetLink(user.email);
    expect(fresh).not.toBe(old);
    expect((await app.api('POST', '/auth/reset-password', { body: { token: old, password: NEW_PASSWORD } })).status).toBe(400);
    // A minute before the hour the link is still good (a weak password is refused without spending it).
    clock.advance(3600_000 - 60_000);
    const weak = await app.api('POST', '/auth/reset-password', { body: { token: fresh, password: 'password' } });
    expect(weak.body.code).toBe('validation_failed');
    clock.advance(61_000);
    const late = await app.api('POST', '/auth/reset-password', { body: { token: fresh, password: NEW_PASSWORD } });
    expect(late.status).toBe(400);
    expect(late.body.code).toBe('invalid_token');
  });

  it('answers 200 alike for active, unknown, invited and disabled accounts, and mails only the active one', async () => {
    const active = await createUser(app);
    const invited = await createUser(app, { status: 'invited' });
    const disabled = await createUser(app, { status: 'disabled' });
    const unknown = uniqueEmail('nobody');
    const emails = [active.email, unknown, invited.email, disabled.email];
    const answers = await Promise.all(emails.map((email) => app.api('POST', '/auth/forgot-password', { body: { email } })));
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.body).toEqual({ message: 'If that email belongs to an account, a reset link is on its way' });
    }
    await queuedWorkDone();
    expect(mailsTo(active.email)).toHaveLength(1);
    expect(mailsTo(unknown)).toHaveLength(0);
    expect(mailsTo(invited.email)).toHaveLength(0);
    expect(mailsTo(disabled.email)).toHaveLength(0);
    const links = await app.server.keel.db.select().from(singleUseRecords).where(eq(singleUseRecords.purpose, PASSWORD_RESET_PURPOSE));
    const subjects = links.map((l) => l.subjectId);
    expect(subjects).toContain(active.id);
    expect(subjects).not.toContain(invited.id);
    expect(subjects).not.toContain(disabled.id);
  });

  it('a reset voids every other outstanding link of the account', async () => {
    const user = await createUser(app);
    const mailed = await resetLink(user.email);
    // A second link, as two forgot-password requests racing each other can leave behind.
    const { token: second } = await app.server.keel.singleUse.create(app.server.keel.db, {
      purpose: PASSWORD_RESET_PURPOSE,
      subjectId: user.id,
      ttlMs: PASSWORD_RESET_TTL_MS,
    });
    expect((await app.api('POST', '/auth/reset-password', { body: { token: mailed, password: NEW_PASSWORD } })).status).toBe(200);
    const stale = await app.api('POST', '/auth/reset-password', { body: { token: second, password: `${NEW_PASSWORD}-2` } });
    expect(stale.status).toBe(400);
    expect(stale.body.code).toBe('invalid_token');
    await login(app, { email: user.email, password: NEW_PASSWORD });
  });

  it('a password change voids outstanding reset links', async () => {
    const user = await createUser(app);
    const token = await resetLink(user.email);
    const { accessToken } = await login(app, user);
    const changed = await app.api('POST', '/auth/change-password', { token: accessToken, body: { currentPassword: user.password, newPassword: NEW_PASSWORD } });
    expect(changed.status).toBe(200);
    const stale = await app.api('POST', '/auth/reset-password', { body: { token, password: `${NEW_PASSWORD}-2` } });
    expect(stale.status).toBe(400);
    expect(stale.body.code).toBe('invalid_token');
    await login(app, { email: user.email, password: NEW_PASSWORD });
  });

  it('limits forgot-password per IP', async () => {
    const limited = await startTestApp({ env: { FORGOT_PASSWORD_LIMIT: '2' } });
    try {
      for (let i = 0; i < 2; i++) expect((await limited.api('POST', '/auth/forgot-password', { body: { email: uniqueEmail() } })).status).toBe(200);
      const third = await limited.api('POST', '/auth/forgot-password', { body: { email: uniqueEmail() } });
      expect(third.status).toBe(429);
      expect(third.body.retryAfter).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });

  it('changes the password only with the current one, and ends every session', async () => {
    const user = await createUser(app);
    const a = await login(app, user);
    const b = await login(app, user);
    const c = await login(app, user);
    const wrong = await app.api('POST', '/auth/change-password', { token: a.accessToken, body: { currentPassword: 'not-the-password', newPassword: NEW_PASSWORD } });
    expect(wrong.status).toBe(400);
    expect(wrong.body.code).toBe('invalid_current_password');
    const weak = await app.api('POST', '/auth/change-password', { token: a.accessToken, body: { currentPassword: user.password, newPassword: 'short' } });
    expect(weak.status).toBe(400);
    expect(weak.body.details.fields[0].path).toBe('newPassword');
    const ok = await app.api('POST', '/auth/change-password', { token: a.accessToken, body: { currentPassword: user.password, newPassword: NEW_PASSWORD } });
    expect(ok.status).toBe(200);
    for (const session of [a, b, c]) {
      expect((await app.api('GET', '/auth/me', { token: session.accessToken })).status).toBe(401);
      const refresh = await app.api('POST', '/auth/refresh', { body: { refreshToken: session.refreshToken } });
      expect(refresh.status).toBe(401);
      expect(refresh.body.code).toBe('invalid_refresh_token');
    }
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(401);
    await login(app, { email: user.email, password: NEW_PASSWORD });
  });

  it('updates own name and avatar (https only) and audits the changed field names', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    // Warm the per-process profile cache first: the answers below must not come from a stale copy.
    const warm = await app.api('GET', '/users/me', { token: accessToken });
    expect(warm.body.name).toBe('Test User');
    clock.advance(60_000);
    await login(app, user);
    const relogged = await app.api('GET', '/users/me', { token: accessToken });
    expect(Date.parse(relogged.body.lastLoginAt)).toBeGreaterThan(Date.parse(warm.body.lastLoginAt));
    const http = await app.api('PATCH', '/users/me', { token: accessToken, body: { avatarUrl: 'http://example.com/a.png' } });
    expect(http.status).toBe(400);
    expect(http.body.details.fields[0].path).toBe('avatarUrl');
    const extra = await app.api('PATCH', '/users/me', { token: accessToken, body: { email: 'x@example.com' } });
    expect(extra.status).toBe(400);
    const res = await app.api('PATCH', '/users/me', { token: accessToken, body: { name: 'Grace Hopper', avatarUrl: 'https://cdn.example.com/g.png' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Grace Hopper', avatarUrl: 'https://cdn.example.com/g.png' });
    const me = await app.api('GET', '/users/me', { token: accessToken });
    expect(me.body).toEqual(res.body);
    expect(me.headers.get('content-type')).toBe('application/json');
    const entry = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id))).find((e) => e.action === 'user.profile.update');
    expect(entry?.changes?.sort()).toEqual(['avatarUrl', 'name']);
    const cleared = await app.api('PATCH', '/users/me', { token: accessToken, body: { avatarUrl: null } });
    expect(cleared.body.avatarUrl).toBeNull();
  });

  raceTest('of 10 parallel resets with one link, exactly one sets the password; the others find the link spent', async () => {
    const user = await createUser(app);
    const token = await resetLink(user.email);
    const answers = await together(10, (i) => app.api('POST', '/auth/reset-password', { body: { token, password: `${NEW_PASSWORD}-${i}` } }));
    const winner = expectOneWinner(answers, 200, [400]);
    for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('invalid_token');
    const index = answers.indexOf(winner);
    await login(app, { email: user.email, password: `${NEW_PASSWORD}-${index}` });
    const resets = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id))).filter((e) => e.action === 'user.password.reset');
    expect(resets).toHaveLength(1);
  });
});
