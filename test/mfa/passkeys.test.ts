import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { and, eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, jwtClaims, login, type TestUser } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium, openPasskeyDevice, type PasskeyDevice } from '../helpers/browser.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import { users } from '../../src/modules/identity/schema.js';
import { passkeys } from '../../src/modules/mfa/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { organizations } from '../../src/modules/tenancy/schema.js';

afterEach(() => clock.reset());

const haveChromium = chromiumAvailable();

describe.skipIf(!haveChromium || !backendAvailable())('passkeys in a real browser (chromium, CDP virtual authenticator)', () => {
  let app: TestApp;
  let browser: Browser;
  const devices: PasskeyDevice[] = [];

  beforeAll(async () => {
    app = await startTestApp({ publicUrlFromPort: true, env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000', PASSWORD_REENTRY_LIMIT: '1000' } });
    browser = await launchChromium();
  });
  afterAll(async () => {
    for (const d of devices) await d.close().catch(() => undefined);
    await browser?.close();
    await app?.close();
  });

  async function device(): Promise<PasskeyDevice> {
    const d = await openPasskeyDevice(browser, app.publicUrl);
    devices.push(d);
    return d;
  }

  /** register/options → navigator.credentials.create → register/verify. */
  async function registerPasskey(dev: PasskeyDevice, accessToken: string, user: TestUser, name: string) {
    const options = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name } });
    if (options.status !== 200) throw new Error(`register/options: ${options.status} ${JSON.stringify(options.body)}`);
    const credential = await dev.create(options.body);
    const verified = await app.api('POST', '/auth/passkeys/register/verify', { token: accessToken, body: { credential } });
    return { options: options.body, credential, verified };
  }

  async function tempTokenOf(user: TestUser): Promise<{ tempToken: string; body: any }> {
    const res = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    if (!res.body.tempToken) throw new Error(`expected an MFA challenge: ${res.status} ${JSON.stringify(res.body)}`);
    return { tempToken: res.body.tempToken, body: res.body };
  }

  /** passkey/options → navigator.credentials.get: the assertion JSON, not yet sent. */
  async function assertion(dev: PasskeyDevice, tempToken: string) {
    const options = await app.api('POST', '/auth/mfa/passkey/options', { body: { tempToken } });
    if (options.status !== 200) throw new Error(`passkey/options: ${options.status} ${JSON.stringify(options.body)}`);
    return { options: options.body, credential: await dev.get(options.body) };
  }

  async function signInWithPasskey(dev: PasskeyDevice, user: TestUser) {
    const { tempToken } = await tempTokenOf(user);
    const { credential } = await assertion(dev, tempToken);
    return app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken, credential } });
  }

  it('registers a passkey after password re-entry and signs in with it (mfa: true)', async () => {
    expect(app.publicUrl).toMatch(/^http:\/\/localhost:\d+$/);
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const dev = await device();

    const wrongPassword = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: 'not-my-password', name: 'Laptop' } });
    expect(wrongPassword.status).toBe(400);
    expect(wrongPassword.body.code).toBe('invalid_current_password');

    const { options, credential, verified } = await registerPasskey(dev, accessToken, user, 'Laptop');
    expect(options.rp).toEqual({ id: 'localhost', name: 'Keel' });
    expect(options.user.name).toBe(user.email);
    expect(options.challenge).toMatch(/^[A-Za-z0-9_-]{16,}$/);
    expect(verified.status).toBe(201);
    expect(verified.body).toMatchObject({
      name: 'Laptop',
      credentialId: credential.id,
      transports: ['internal'],
      backupEligible: false,
      backupState: false,
      lastUsedAt: null,
    });
    // First factor of the account: recovery codes come with it, once.
    expect(verified.body.recoveryCodes).toHaveLength(10);
    const [stored] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id));
    expect(stored).toMatchObject({ credentialId: credential.id, name: 'Laptop', aaguid: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    expect(stored!.publicKey.length).toBeGreaterThan(40);
    const me = await app.api('GET', '/auth/me', { token: accessToken });
    expect(me.body).toMatchObject({ mfaEnabled: true, mfaMethod: 'passkey', passkeyCount: 1 });

    const challenge = await tempTokenOf(user);
    expect(challenge.body).toEqual({ mfaRequired: true, mfaMethod: 'passkey', tempToken: expect.any(String), availableMethods: ['passkey'] });
    const { options: requestOptions, credential: signed } = await assertion(dev, challenge.tempToken);
    expect(requestOptions.rpId).toBe('localhost');
    expect(requestOptions.allowCredentials).toEqual([{ id: credential.id, type: 'public-key', transports: ['internal'] }]);
    const ok = await app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken: challenge.tempToken, credential: signed } });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ tokenType: 'Bearer', expiresIn: 900, user: { id: user.id, mfaMethod: 'passkey' } });
    expect(jwtClaims(ok.body.accessToken).mfa).toBe(true);
    expect(ok.cookies.some((c) => c.startsWith('service_refresh_token='))).toBe(true);
    // The same challenge cannot register twice (asked from a session with a second factor, as any
    // factor change of an account that has one must be).
    const again = await app.api('POST', '/auth/passkeys/register/verify', { token: ok.body.accessToken, body: { credential } });
    expect(again.status).toBe(400);
    expect(again.body.code).toBe('challenge_expired');
    const [used] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id));
    expect(used!.lastUsedAt).not.toBeNull();
    expect(used!.counter).toBeGreaterThan(stored!.counter);

    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id))).map((a) => a.action);
    expect(actions).toContain('auth.mfa.passkey.register');
  });

  it('keeps TOTP primary when a passkey is added, and offers the passkey as an alternate', async () => {
    const user = await createUser(app);
    const { accessToken } = await enrollTotp(app, (await login(app, user)).accessToken);
    const dev = await device();
    const { verified } = await registerPasskey(dev, accessToken, user, 'Phone');
    expect(verified.status).toBe(201);
    expect(verified.body.recoveryCodes).toBeUndefined(); // TOTP enrolment already gave codes
    const challenge = await tempTokenOf(user);
    expect(challenge.body).toMatchObject({ mfaMethod: 'totp', availableMethods: ['totp', 'passkey'] });
    const { credential } = await assertion(dev, challenge.tempToken);
    expect((await app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken: challenge.tempToken, credential } })).status).toBe(200);
  });

  it('adds a second passkey on another device, renames one, and deletes one with the password', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const laptop = await device();
    const phone = await device();
    const first = await registerPasskey(laptop, accessToken, user, 'Laptop');
    // Adding a factor to an account that has one needs a session established with it (docs/security.md "Findings", 2).
    const refused = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Phone' } });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('mfa_required');
    const mfaToken = (await signInWithPasskey(laptop, user)).body.accessToken as string;
    const second = await registerPasskey(phone, mfaToken, user, 'Phone');
    // Enabling a factor ends the account's other password-only sessions.
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(401);
    expect(second.verified.status).toBe(201);
    expect(second.options.excludeCredentials).toEqual([{ id: first.credential.id, type: 'public-key', transports: ['internal'] }]);
    expect((await app.api('GET', '/auth/me', { token: mfaToken })).body).toMatchObject({ mfaMethod: 'passkey', passkeyCount: 2 });

    const list = await app.api('GET', '/auth/passkeys', { token: mfaToken });
    expect(list.status).toBe(200);
    expect(list.body.pagination).toEqual({ page: 1, limit: 50, total: 2 });
    expect(list.body.data.map((p: any) => p.name)).toEqual(['Laptop', 'Phone']);
    const page2 = await app.api('GET', '/auth/passkeys?limit=1&page=2', { token: mfaToken });
    expect(page2.body.data.map((p: any) => p.name)).toEqual(['Phone']);

    // Each device signs in with its own passkey.
    expect((await signInWithPasskey(laptop, user)).status).toBe(200);
    expect((await signInWithPasskey(phone, user)).status).toBe(200);

    const renamed = await app.api('PATCH', `/auth/passkeys/${second.verified.body.id}`, { token: mfaToken, body: { name: 'Work phone' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({ id: second.verified.body.id, name: 'Work phone' });
    expect((await app.api('PATCH', `/auth/passkeys/${second.verified.body.id}`, { token: mfaToken, body: { name: '' } })).status).toBe(400);

    // Another user's passkey is not found, for rename and delete.
    const stranger = await createUser(app);
    const strangerToken = (await login(app, stranger)).accessToken;
    expect((await app.api('PATCH', `/auth/passkeys/${first.verified.body.id}`, { token: strangerToken, body: { name: 'Mine' } })).status).toBe(404);
    expect((await app.api('DELETE', `/auth/passkeys/${first.verified.body.id}`, { token: strangerToken, body: { currentPassword: stranger.password } })).status).toBe(404);

    const noPassword = await app.api('DELETE', `/auth/passkeys/${first.verified.body.id}`, { token: mfaToken, body: { currentPassword: 'wrong-password' } });
    expect(noPassword.status).toBe(400);
    expect(noPassword.body.code).toBe('invalid_current_password');
    expect((await app.api('DELETE', `/auth/passkeys/${first.verified.body.id}`, { token: mfaToken, body: {} })).status).toBe(400);
    const deleted = await app.api('DELETE', `/auth/passkeys/${first.verified.body.id}`, { token: mfaToken, body: { currentPassword: user.password } });
    expect(deleted.status).toBe(204);
    const after = await app.api('GET', '/auth/passkeys', { token: mfaToken });
    expect(after.body.data.map((p: any) => p.name)).toEqual(['Work phone']);

    // The deleted passkey no longer signs in; the remaining one does.
    const { tempToken } = await tempTokenOf(user);
    const options = await app.api('POST', '/auth/mfa/passkey/options', { body: { tempToken } });
    expect(options.body.allowCredentials.map((c: any) => c.id)).toEqual([second.credential.id]);
    expect((await signInWithPasskey(phone, user)).status).toBe(200);

    // Deleting the last passkey of a user without Force MFA turns MFA off.
    expect((await app.api('DELETE', `/auth/passkeys/${second.verified.body.id}`, { token: mfaToken, body: { currentPassword: user.password } })).status).toBe(204);
    const [row] = await app.server.keel.db.select().from(users).where(eq(users.id, user.id));
    expect(row).toMatchObject({ mfaEnabled: false, mfaMethod: null });
    expect((await login(app, user)).accessToken).toBeTruthy();
    const actions = (await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.targetId, user.id), eq(auditLogs.action, 'auth.mfa.passkey.delete')))).length;
    expect(actions).toBe(2);
  });

  it('refuses to remove the last factor of a Force-MFA user (409), and lets the passkey pass the 428 gate', async () => {
    const tenant = await createTenant(app);
    const admin = tenant.partnerAdmin;
    const { accessToken } = await login(app, admin);
    expect((await app.api('GET', '/auth/sessions', { token: accessToken })).status).toBe(428);
    const dev = await device();
    const { verified } = await registerPasskey(dev, accessToken, admin, 'Only key');
    expect(verified.status).toBe(201);
    // Enrolment is picked up at once: the same token now passes the gate.
    expect((await app.api('GET', '/auth/sessions', { token: accessToken })).status).toBe(200);

    const mfaLogin = await signInWithPasskey(dev, admin);
    expect(mfaLogin.status).toBe(200);
    const refused = await app.api('DELETE', `/auth/passkeys/${verified.body.id}`, { token: mfaLogin.body.accessToken, body: { currentPassword: admin.password } });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('last_mfa_factor');
    expect((await app.api('GET', '/auth/passkeys', { token: accessToken })).body.pagination.total).toBe(1);

    // With TOTP beside it, the passkey may go.
    await enrollTotp(app, mfaLogin.body.accessToken);
    const removed = await app.api('DELETE', `/auth/passkeys/${verified.body.id}`, { token: mfaLogin.body.accessToken, body: { currentPassword: admin.password } });
    expect(removed.status).toBe(204);
    expect((await app.api('GET', '/auth/me', { token: mfaLogin.body.accessToken })).body).toMatchObject({ mfaMethod: 'totp', passkeyCount: 0 });
  });

  raceTest('one registration challenge raced by 8 parallel verifies stores exactly one passkey', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const dev = await device();
    const options = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Raced' } });
    expect(options.status).toBe(200);
    const credential = await dev.create(options.body);
    const answers = await together(8, () => app.api('POST', '/auth/passkeys/register/verify', { token: accessToken, body: { credential } }));
    // A loser finds the challenge consumed (400), or, when the winner's passkey is already stored, a
    // password-only session that may no longer change factors (403 mfa_required): refused either way.
    const winner = expectOneWinner(answers, 201, [400, 403]);
    for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe(a.status === 400 ? 'challenge_expired' : 'mfa_required');
    expect(await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id))).toHaveLength(1);
  });

  it('refuses a replayed assertion: the challenge is single use', async () => {
    const user = await createUser(app);
    const dev = await device();
    await registerPasskey(dev, (await login(app, user)).accessToken, user, 'Key');

    // Two parallel submissions of one assertion: exactly one signs in.
    const { tempToken } = await tempTokenOf(user);
    const { credential } = await assertion(dev, tempToken);
    const both = await Promise.all([1, 2].map(() => app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken, credential } })));
    expect(both.map((r) => r.status).sort()).toEqual([200, 401]);

    // Later, with a fresh sign-in attempt, the same assertion finds its challenge gone.
    const next = await tempTokenOf(user);
    const replay = await app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken: next.tempToken, credential } });
    expect(replay.status).toBe(401);
    expect(replay.body.code).toBe('challenge_expired');
    // An assertion for one sign-in attempt is not accepted for another.
    const other = await tempTokenOf(user);
    const { credential: forOther } = await assertion(dev, other.tempToken);
    const crossed = await app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken: next.tempToken, credential: forOther } });
    expect(crossed.status).toBe(401);
    // A tampered signature is refused.
    const third = await tempTokenOf(user);
    const { credential: signed } = await assertion(dev, third.tempToken);
    const sig = Buffer.from(String(signed.response.signature), 'base64url');
    sig[sig.length - 1] = (sig[sig.length - 1] ?? 0) ^ 0xff;
    const tampered = { ...signed, response: { ...signed.response, signature: sig.toString('base64url') } };
    const bad = await app.api('POST', '/auth/mfa/passkey/verify', { body: { tempToken: third.tempToken, credential: tampered } });
    expect(bad.status).toBe(401);
    expect(bad.body.code).toBe('invalid_passkey');
  });

  it('holds challenges 5 minutes (controllable clock)', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const dev = await device();
    const options = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Late' } });
    const credential = await dev.create(options.body);
    clock.advance(5 * 60_000 + 1000);
    const late = await app.api('POST', '/auth/passkeys/register/verify', { token: accessToken, body: { credential } });
    expect(late.status).toBe(400);
    expect(late.body.code).toBe('challenge_expired');
  });

  it('refuses a signature counter that goes backwards and audits it as a possible clone', async () => {
    const user = await createUser(app);
    const dev = await device();
    const { credential } = await registerPasskey(dev, (await login(app, user)).accessToken, user, 'Cloned');
    expect((await signInWithPasskey(dev, user)).status).toBe(200);
    expect((await signInWithPasskey(dev, user)).status).toBe(200);
    const [before] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id));
    expect(before!.counter).toBeGreaterThanOrEqual(2);

    // A copy of the key with its own, lower counter (what a cloned authenticator would present).
    await dev.setSignCount(credential.id, 0);
    const cloned = await signInWithPasskey(dev, user);
    expect(cloned.status).toBe(401);
    expect(cloned.body.code).toBe('passkey_counter_regression');
    const [after] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id));
    expect(after!.counter).toBe(before!.counter);
    const [entry] = await app.server.keel.db
      .select()
      .from(auditLogs)
      .where(and(eq(auditLogs.targetId, user.id), eq(auditLogs.action, 'auth.mfa.passkey.counter_regression')));
    expect(entry).toMatchObject({ result: 'failure', actorId: user.id });
    expect(entry!.details).toMatchObject({ storedCounter: before!.counter, receivedCounter: 1, credential: { id: before!.id, name: 'Cloned' } });

    // Once the real authenticator is ahead again, it signs in.
    await dev.setSignCount(credential.id, before!.counter + 10);
    expect((await signInWithPasskey(dev, user)).status).toBe(200);
  });

  it('refuses passkeys where the organisation does not allow them', async () => {
    const tenant = await createTenant(app);
    await app.server.keel.db
      .update(organizations)
      .set({ settings: { security: { allowedMfaMethods: { passkey: false } } } })
      .where(eq(organizations.id, tenant.orgId));
    const { accessToken } = await login(app, tenant.orgTechnician);
    const res = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: tenant.orgTechnician.password, name: 'Key' } });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('passkey_not_allowed');
  });
});

describe.skipIf(!backendAvailable())('passkey rules without a browser', () => {
  it('limits password re-entry per user, apart from login', async () => {
    const app = await startTestApp({ env: { PASSWORD_REENTRY_LIMIT: '2', LOGIN_LIMIT: '1000' } });
    try {
      const user = await createUser(app);
      const { accessToken } = await login(app, user);
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) {
        statuses.push((await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: 'wrong', name: 'Key' } })).status);
      }
      expect(statuses).toEqual([400, 400, 429]);
      const blocked = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Key' } });
      expect(blocked.status).toBe(429);
      expect(blocked.body.retryAfter).toBeGreaterThan(0);
      // Login is not affected.
      expect((await login(app, user)).accessToken).toBeTruthy();
    } finally {
      await app.close();
    }
  });

  it('answers 503 passkeys_unavailable when PUBLIC_URL is an IP address', async () => {
    const app = await startTestApp({ env: { PUBLIC_URL: 'http://127.0.0.1:3000' } });
    try {
      const user = await createUser(app);
      const { accessToken } = await login(app, user);
      const res = await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Key' } });
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('passkeys_unavailable');
      expect(res.body.error).toMatch(/IP address/);
    } finally {
      await app.close();
    }
  });

  it('refuses a malformed or unknown temp token at passkey login', async () => {
    const app = await startTestApp();
    try {
      const res = await app.api('POST', '/auth/mfa/passkey/options', { body: { tempToken: 'nope' } });
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('invalid_temp_token');
      const user = await createUser(app);
      await enrollTotp(app, (await login(app, user)).accessToken);
      const { tempToken } = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body;
      const none = await app.api('POST', '/auth/mfa/passkey/options', { body: { tempToken } });
      expect(none.status).toBe(409);
      expect(none.body.code).toBe('passkey_not_enrolled');
    } finally {
      await app.close();
    }
  });
});
