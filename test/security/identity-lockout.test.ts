/**
 * docs/security.md "Findings", 3 and 8: the account lockout holds under concurrency (a failure is reserved before the
 * Argon2 verify), every password re-entry is limited per user and counts towards the lockout, and
 * login has a per-IP limit across emails.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type ApiResponse, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type TestUser } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { clock } from '../../src/platform/clock.js';
import { users } from '../../src/modules/identity/schema.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

const INVALID = { error: 'Invalid email or password', code: 'invalid_credentials' };
const NEW_PASSWORD = 'a-brand-new-passphrase-for-2026';

async function lockState(app: TestApp, id: string): Promise<{ count: number; lockedUntil: Date | null }> {
  const [row] = await app.server.keel.db.select({ count: users.failedLoginCount, lockedUntil: users.lockedUntil }).from(users).where(eq(users.id, id));
  return row!;
}

/** Addresses no other test app claims (they use 10.x), different for every call. */
function freshIps(n: number): string[] {
  const block = `198.${18 + (randomBytes(1)[0]! % 2)}.${randomBytes(1)[0]}`;
  return Array.from({ length: n }, (_, i) => `${block}.${i + 1}`);
}

describe.skipIf(!backendAvailable())(`lockout under parallel guesses (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    // 41 logins at once: above the default hash-queue bound (16 per thread), which would refuse some with 503 (test/ops/overload.test.ts).
    app = await startTestApp({ env: { LOCKOUT_THRESHOLD: '5', LOCKOUT_SECONDS: '900', LOGIN_LIMIT: '1000', LOGIN_IP_LIMIT: '1000', HASH_QUEUE_MAX: '100' } });
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  const guess = (user: TestUser, password: string, ip: string) =>
    app.api('POST', '/auth/login', { body: { email: user.email, password }, headers: { 'x-forwarded-for': ip } });

  raceTest('40 parallel wrong guesses from 40 addresses: only the threshold is verified, then the right password is refused until the lock ends', async () => {
    const user = await createUser(app);
    const ips = freshIps(41);
    const answers = await together(40, (i) => guess(user, `wrong-guess-number-${i}`, ips[i]!));
    for (const a of answers) {
      expect(a.status).toBe(401);
      expect(a.body).toEqual(INVALID);
    }
    // Exactly LOCKOUT_THRESHOLD reservations were granted: the other 35 never reached the real hash.
    const locked = await lockState(app, user.id);
    expect(locked.count).toBe(5);
    expect(locked.lockedUntil!.getTime()).toBeGreaterThan(clock.nowMs());
    const right = await guess(user, user.password, ips[40]!);
    expect(right.status).toBe(401);
    expect(right.body).toEqual(INVALID);
    // A minute before the lock ends (measured from the stored end, not from when the guesses were
    // sent: on a loaded machine the lock is taken a while after they start; and a minute, as the
    // clock runs on in real time and a stalled machine must not carry the guess past the end), then
    // just after it.
    clock.advance(locked.lockedUntil!.getTime() - clock.nowMs() - 60_000);
    expect((await guess(user, user.password, ips[40]!)).status).toBe(401);
    clock.advance(61_000);
    const after = await guess(user, user.password, ips[40]!);
    expect(after.status).toBe(200);
    expect(await lockState(app, user.id)).toEqual({ count: 0, lockedUntil: null });
  });

  raceTest('the right password racing 40 wrong guesses on a locked account is refused', async () => {
    const user = await createUser(app);
    const ips = freshIps(41);
    for (let i = 0; i < 5; i++) expect((await guess(user, `first-wrong-${i}`, ips[i]!)).status).toBe(401);
    const answers = await together(41, (i) => (i === 20 ? guess(user, user.password, ips[i]!) : guess(user, `wrong-${i}`, ips[i]!)));
    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 41 }, () => 401));
    expect((await lockState(app, user.id)).count).toBe(5);
  });

  it('after a lock ends the count starts again from one', async () => {
    const user = await createUser(app);
    const [ip] = freshIps(1);
    for (let i = 0; i < 5; i++) expect((await guess(user, `wrong-${i}`, ip!)).status).toBe(401);
    expect((await lockState(app, user.id)).count).toBe(5);
    clock.advance(901_000);
    expect((await guess(user, 'wrong-after-lock', ip!)).status).toBe(401);
    expect(await lockState(app, user.id)).toEqual({ count: 1, lockedUntil: null });
  });
});

describe.skipIf(!backendAvailable())(`password re-entry feeds the lockout (${backend})`, () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  let adminToken: string;
  let orgId: string;
  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({
      env: { SMTP_URL: smtp.url, PUBLIC_URL: 'https://keel.example.com', LOCKOUT_THRESHOLD: '3', LOCKOUT_SECONDS: '900', LOGIN_LIMIT: '1000', PASSWORD_REENTRY_LIMIT: '1000' },
    });
    const tenant = await createTenant(app);
    orgId = tenant.orgId;
    adminToken = (await login(app, tenant.orgAdmin)).accessToken;
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });
  afterEach(() => clock.reset());

  /** An invitation of an existing account with no association: accepting it re-enters that account's password. */
  async function inviteToken(user: TestUser): Promise<string> {
    const earlier = new Set(smtp.messages);
    const res = await app.api('POST', '/users/invite', { token: adminToken, body: { email: user.email, name: 'Existing', roleId: SYSTEM_ROLES.orgReadOnly.id, orgId } });
    expect(res.status).toBe(201);
    const mail = await smtp.waitFor((m) => m.to.includes(user.email) && !earlier.has(m) && m.urls.some((u) => u.includes('/accept-invite?token=')));
    return new URL(mail.urls.find((u) => u.includes('/accept-invite?token='))!).searchParams.get('token')!;
  }

  type Reentry = (user: TestUser, password: string) => Promise<ApiResponse>;
  const kinds: [string, (user: TestUser) => Promise<Reentry>, number, string][] = [
    [
      'change-password',
      async (user) => {
        const { accessToken } = await login(app, user);
        return (_u, password) => app.api('POST', '/auth/change-password', { token: accessToken, body: { currentPassword: password, newPassword: NEW_PASSWORD } });
      },
      400,
      'invalid_current_password',
    ],
    [
      'passkey register options',
      async (user) => {
        const { accessToken } = await login(app, user);
        return (_u, password) => app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: password, name: 'Key' } });
      },
      400,
      'invalid_current_password',
    ],
    [
      'passkey delete',
      async (user) => {
        const { accessToken } = await login(app, user);
        return (_u, password) => app.api('DELETE', `/auth/passkeys/${randomUUID()}`, { token: accessToken, body: { currentPassword: password } });
      },
      400,
      'invalid_current_password',
    ],
    [
      'accept-invite of an existing account',
      async (user) => {
        const token = await inviteToken(user);
        return (_u, password) => app.api('POST', '/auth/accept-invite', { body: { token, password } });
      },
      401,
      'invalid_credentials',
    ],
  ];

  for (const [name, prepare, status, code] of kinds) {
    it(`${name}: wrong passwords lock the account, for sign-in and for the re-entry itself`, async () => {
      const user = await createUser(app);
      const reenter = await prepare(user);
      for (let i = 0; i < 3; i++) {
        const wrong = await reenter(user, `not-the-password-${i}`);
        expect(wrong.status).toBe(status);
        expect(wrong.body.code).toBe(code);
      }
      expect((await lockState(app, user.id)).count).toBe(3);
      const signIn = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
      expect(signIn.status).toBe(401);
      expect(signIn.body).toEqual(INVALID);
      const right = await reenter(user, user.password);
      expect(right.status).toBe(status);
      expect(right.body.code).toBe(code);
      clock.advance(901_000);
      await login(app, user);
    });
  }

  it('a right re-entry gives its reservation back: earlier failures stay counted, none is added', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: 'wrong-once-only' } })).status).toBe(401);
    const options = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Key' } });
    expect(options.status).toBe(200);
    expect(await lockState(app, user.id)).toEqual({ count: 1, lockedUntil: null });
  });
});

describe.skipIf(!backendAvailable())(`password re-entry is limited per user (${backend})`, () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, PASSWORD_REENTRY_LIMIT: '2', LOCKOUT_THRESHOLD: '1000', LOGIN_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });

  it('change-password: two attempts per user, then 429 even with the right password; other users unaffected', async () => {
    const user = await createUser(app);
    const other = await createUser(app);
    const { accessToken } = await login(app, user);
    const change = (token: string, currentPassword: string) =>
      app.api('POST', '/auth/change-password', { token, body: { currentPassword, newPassword: NEW_PASSWORD } });
    expect((await change(accessToken, 'wrong-1-password')).status).toBe(400);
    expect((await change(accessToken, 'wrong-2-password')).status).toBe(400);
    const limited = await change(accessToken, user.password);
    expect(limited.status).toBe(429);
    expect(limited.body.code).toBe('rate_limited');
    expect(limited.body.retryAfter).toBeGreaterThan(0);
    expect((await change((await login(app, other)).accessToken, other.password)).status).toBe(200);
  });

  it('one budget per user across change-password, passkeys and accept-invite', async () => {
    const tenant = await createTenant(app);
    const adminToken = (await login(app, tenant.orgAdmin)).accessToken;
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const invited = await app.api('POST', '/users/invite', { token: adminToken, body: { email: user.email, name: 'Existing', roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect(invited.status).toBe(201);
    const mail = await smtp.waitFor((m) => m.to.includes(user.email));
    const token = new URL(mail.urls.find((u) => u.includes('/accept-invite?token='))!).searchParams.get('token')!;
    expect((await app.api('POST', '/auth/change-password', { token: accessToken, body: { currentPassword: 'wrong-1-password', newPassword: NEW_PASSWORD } })).status).toBe(400);
    expect((await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: 'wrong-2-password', name: 'K' } })).status).toBe(400);
    const accept = await app.api('POST', '/auth/accept-invite', { body: { token, password: user.password } });
    expect(accept.status).toBe(429);
    const remove = await app.api('DELETE', `/auth/passkeys/${randomUUID()}`, { token: accessToken, body: { currentPassword: user.password } });
    expect(remove.status).toBe(429);
  });
});

describe.skipIf(!backendAvailable())(`login limit per IP across emails (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_IP_LIMIT: '3', LOGIN_LIMIT: '1000', LOCKOUT_THRESHOLD: '1000' } });
  });
  afterAll(async () => app?.close());

  it('counts failed logins per address over every email; right passwords do not count; other addresses are unaffected', async () => {
    const [ip, otherIp] = freshIps(2) as [string, string];
    const from = (addr: string, email: string, password: string) => app.api('POST', '/auth/login', { body: { email, password }, headers: { 'x-forwarded-for': addr } });
    const people = await Promise.all(Array.from({ length: 5 }, () => createUser(app)));
    for (const p of people) expect((await from(ip, p.email, p.password)).status).toBe(200);
    const statuses: number[] = [];
    for (const p of people.slice(0, 3)) statuses.push((await from(ip, p.email, 'a-wrong-password')).status);
    expect(statuses).toEqual([401, 401, 401]);
    const sprayed = await from(ip, people[3]!.email, people[3]!.password);
    expect(sprayed.status).toBe(429);
    expect(sprayed.body.code).toBe('rate_limited');
    expect(Number(sprayed.headers.get('retry-after'))).toBe(sprayed.body.retryAfter);
    expect((await from(otherIp, people[4]!.email, people[4]!.password)).status).toBe(200);
  });
});
