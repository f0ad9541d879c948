/**
 * Passkeys as the whole sign-in (docs/decisions.md "Sign-in options"): a sign-in passkey (discoverable,
 * user verification required) signs in through POST /auth/passkey/options and /auth/passkey/verify
 * with tokens `mfa: true`; the challenge is single use; clones and foreign origins are refused; the
 * password path's refusals apply; an account with two sign-in passkeys may drop its password.
 * Chromium's virtual authenticator stands in for the user's device (the project has no software
 * authenticator for server tests).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { and, eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, jwtClaims, login, type TestUser } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium, openPasskeyDevice, type PasskeyDevice } from '../helpers/browser.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import { users } from '../../src/modules/identity/schema.js';
import { passkeys } from '../../src/modules/mfa/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { ssoProviders } from '../../src/modules/sso/schema.js';
import { organizations } from '../../src/modules/tenancy/schema.js';
import { DEFAULT_MAPPING } from '../../src/modules/sso/presets.js';
import { PASSWORD_RESET_PURPOSE } from '../../src/modules/identity/service.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

afterEach(() => clock.reset());

const haveChromium = chromiumAvailable();

describe.skipIf(!haveChromium || !backendAvailable())('passkey sign-in in a real browser (chromium, CDP virtual authenticator)', () => {
  let app: TestApp;
  let browser: Browser;
  const devices: PasskeyDevice[] = [];

  beforeAll(async () => {
    app = await startTestApp({
      publicUrlFromPort: true,
      env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000', PASSWORD_REENTRY_LIMIT: '1000', PASSKEY_SIGNIN_LIMIT: '1000' },
    });
    browser = await launchChromium();
  }, 60_000);
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

  async function register(dev: PasskeyDevice, token: string, user: TestUser, name: string, signIn = true) {
    const options = await app.api('POST', '/auth/passkeys/register/options', { token, body: { currentPassword: user.password, name, signIn } });
    if (options.status !== 200) throw new Error(`register/options: ${options.status} ${JSON.stringify(options.body)}`);
    const credential = await dev.create(options.body);
    const verified = await app.api('POST', '/auth/passkeys/register/verify', { token, body: { credential } });
    if (verified.status !== 201) throw new Error(`register/verify: ${verified.status} ${JSON.stringify(verified.body)}`);
    return { options: options.body, credential, verified: verified.body };
  }

  /** options (usernameless) → navigator.credentials.get: the challenge id and the assertion, not yet sent. */
  async function assertion(dev: PasskeyDevice, body?: { email: string }) {
    const options = await app.api('POST', '/auth/passkey/options', body ? { body } : {});
    if (options.status !== 200) throw new Error(`passkey/options: ${options.status} ${JSON.stringify(options.body)}`);
    return { options: options.body.options, challengeId: options.body.challengeId as string, response: await dev.get(options.body.options) };
  }

  async function signInWith(dev: PasskeyDevice) {
    const { challengeId, response } = await assertion(dev);
    return app.api('POST', '/auth/passkey/verify', { body: { challengeId, response } });
  }

  const auditOf = (userId: string, action: string) =>
    app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.targetId, userId), eq(auditLogs.action, action)));

  it('registers a sign-in passkey and signs in usernameless with it: tokens with mfa: true, audited method passkey', async () => {
    const user = await createUser(app);
    const dev = await device();
    const { options, verified } = await register(dev, (await login(app, user)).accessToken, user, 'Laptop');
    expect(options.authenticatorSelection).toMatchObject({ residentKey: 'required', userVerification: 'required' });
    expect(verified).toMatchObject({ name: 'Laptop', signIn: true });

    const started = await assertion(dev);
    expect(started.options.userVerification).toBe('required');
    expect(started.options.allowCredentials).toBeUndefined();
    expect(started.options.rpId).toBe('localhost');
    const ok = await app.api('POST', '/auth/passkey/verify', { body: { challengeId: started.challengeId, response: started.response } });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ tokenType: 'Bearer', user: { id: user.id, email: user.email } });
    expect(jwtClaims(ok.body.accessToken).mfa).toBe(true);
    const logins = await auditOf(user.id, 'user.login');
    expect(logins.map((e) => (e.details as { method: string }).method)).toEqual(['password', 'passkey']);
    expect(logins[1]!.details).toMatchObject({ method: 'passkey', mfa: true });
    const list = await app.api('GET', '/auth/passkeys', { token: ok.body.accessToken });
    expect(list.body.data.map((p: any) => p.signIn)).toEqual([true]);
  });

  it('a second-factor passkey does not sign in alone; an email names the account\'s sign-in passkeys, an unknown one a decoy', async () => {
    const user = await createUser(app);
    const dev = await device();
    const { credential, verified } = await register(dev, (await login(app, user)).accessToken, user, 'Factor only', false);
    expect(verified.signIn).toBe(false);
    const refused = await signInWith(dev);
    expect(refused.status).toBe(401);
    expect(refused.body.code).toBe('invalid_passkey');

    const withEmail = await app.api('POST', '/auth/passkey/options', { body: { email: user.email } });
    const unknown = await app.api('POST', '/auth/passkey/options', { body: { email: `nobody-${Date.now()}@example.com` } });
    // A factor-only passkey is not listed: both answers carry one decoy id, never the credential.
    for (const r of [withEmail, unknown]) {
      expect(r.status).toBe(200);
      expect(r.body.options.allowCredentials).toHaveLength(1);
      expect(r.body.options.allowCredentials[0].id).not.toBe(credential.id);
    }
  });

  it('satisfies a Force-MFA role: the passkey session passes the enrolment gate', async () => {
    const tenant = await createTenant(app);
    const admin = tenant.partnerAdmin;
    const dev = await device();
    await register(dev, (await login(app, admin)).accessToken, admin, 'Admin key');
    const ok = await signInWith(dev);
    expect(ok.status).toBe(200);
    expect((await app.api('GET', '/auth/sessions', { token: ok.body.accessToken })).status).toBe(200);
    // With email: the account's sign-in passkey is listed.
    const named = await app.api('POST', '/auth/passkey/options', { body: { email: admin.email } });
    const [stored] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, admin.id));
    expect(named.body.options.allowCredentials.map((c: any) => c.id)).toEqual([stored!.credentialId]);
  });

  it('refuses a replayed assertion (the challenge is single use) and a signature counter going backwards (audited)', async () => {
    const user = await createUser(app);
    const dev = await device();
    const { credential } = await register(dev, (await login(app, user)).accessToken, user, 'Key');
    const { challengeId, response } = await assertion(dev);
    expect((await app.api('POST', '/auth/passkey/verify', { body: { challengeId, response } })).status).toBe(200);
    const replay = await app.api('POST', '/auth/passkey/verify', { body: { challengeId, response } });
    expect(replay.status).toBe(401);
    expect(replay.body.code).toBe('challenge_expired');
    // The same assertion under a fresh challenge id: its signed challenge is not that one.
    const other = await app.api('POST', '/auth/passkey/options', {});
    const crossed = await app.api('POST', '/auth/passkey/verify', { body: { challengeId: other.body.challengeId, response } });
    expect(crossed.status).toBe(401);
    expect(crossed.body.code).toBe('challenge_expired');

    expect((await signInWith(dev)).status).toBe(200);
    const [before] = await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id));
    await dev.setSignCount(credential.id, 0);
    const cloned = await signInWith(dev);
    expect(cloned.status).toBe(401);
    expect(cloned.body.code).toBe('passkey_counter_regression');
    const [entry] = await auditOf(user.id, 'auth.mfa.passkey.counter_regression');
    expect(entry).toMatchObject({ result: 'failure' });
    expect(entry!.details).toMatchObject({ storedCounter: before!.counter, receivedCounter: 1 });
  });

  it('refuses an assertion made on another origin', async () => {
    const user = await createUser(app);
    const dev = await device();
    await register(dev, (await login(app, user)).accessToken, user, 'Key');
    // A page of another origin on the same RP ID (another port of localhost, which browsers let use it) signs a genuine assertion.
    const other = createServer((_req, res) => res.end('elsewhere'));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const foreign = `http://localhost:${(other.address() as AddressInfo).port}`;
    await dev.page.goto(foreign);
    const { challengeId, response } = await assertion(dev).finally(() => other.close());
    const clientData = JSON.parse(Buffer.from(String(response.response.clientDataJSON), 'base64url').toString('utf8'));
    expect(clientData.origin).toBe(foreign);
    const refused = await app.api('POST', '/auth/passkey/verify', { body: { challengeId, response } });
    expect(refused.status).toBe(401);
    expect(refused.body.code).toBe('invalid_passkey');
    await dev.page.goto(`${app.publicUrl}/health`);
    expect((await signInWith(dev)).status).toBe(200);
  });

  it('refuses disabled and locked accounts like the password path, and enforced SSO unless break-glass', async () => {
    const db = app.server.keel.db;
    const user = await createUser(app);
    const dev = await device();
    await register(dev, (await login(app, user)).accessToken, user, 'Key');
    await db.update(users).set({ status: 'disabled' }).where(eq(users.id, user.id));
    const disabled = await signInWith(dev);
    expect([disabled.status, disabled.body.code]).toEqual([401, 'invalid_credentials']);
    await db.update(users).set({ status: 'active', lockedUntil: new Date(clock.nowMs() + 60_000) }).where(eq(users.id, user.id));
    const locked = await signInWith(dev);
    expect([locked.status, locked.body.code]).toEqual([401, 'invalid_credentials']);
    await db.update(users).set({ lockedUntil: null }).where(eq(users.id, user.id));
    expect((await signInWith(dev)).status).toBe(200);

    const tenant = await createTenant(app);
    const member = tenant.orgTechnician;
    const admin = await createUser(app, { platformAdmin: true, org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const memberDev = await device();
    const adminDev = await device();
    await register(memberDev, (await login(app, member)).accessToken, member, 'Member key');
    await register(adminDev, (await login(app, admin)).accessToken, admin, 'Admin key');
    // The platform administrator is a member of the organisation too, to meet its enforced SSO.
    await db.insert(ssoProviders).values({ orgId: tenant.orgId, name: 'IdP', type: 'oidc', scopes: 'openid', attributeMapping: DEFAULT_MAPPING, status: 'active', enforceSso: true });
    await app.server.keel.modules.get('sso').activeProviders.changed(tenant.orgId);
    const refused = await signInWith(memberDev);
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('sso_required');
    expect(refused.body.details.loginUrl).toBe(`${app.publicUrl}/api/v1/sso/login/${tenant.orgId}`);
    expect((await app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } })).body.code).toBe('sso_required');
    expect((await signInWith(adminDev)).status).toBe(200);
    expect(await auditOf(admin.id, 'user.login.break_glass')).toHaveLength(1);
  });

  it('refuses passkey sign-in where the organisation does not allow passkeys', async () => {
    const tenant = await createTenant(app);
    const member = tenant.orgTechnician;
    const dev = await device();
    await register(dev, (await login(app, member)).accessToken, member, 'Key');
    await app.server.keel.db.update(organizations).set({ settings: { security: { allowedMfaMethods: { passkey: false } } } }).where(eq(organizations.id, tenant.orgId));
    const refused = await signInWith(dev);
    expect([refused.status, refused.body.code]).toEqual([403, 'passkey_not_allowed']);
  });

  it('removes the password once two sign-in passkeys exist (fresh MFA session); every password path then refuses, a reset link puts one back', async () => {
    const user = await createUser(app);
    const laptop = await device();
    const phone = await device();
    const first = await login(app, user);
    await register(laptop, first.accessToken, user, 'Laptop');
    const mfa = (await signInWith(laptop)).body.accessToken as string;
    const remove = (token: string, currentPassword = user.password) => app.api('DELETE', '/auth/password', { token, body: { currentPassword } });

    const oneKey = await remove(mfa);
    expect([oneKey.status, oneKey.body.code]).toEqual([409, 'sign_in_passkeys_required']);
    await register(phone, mfa, user, 'Phone');
    // A second factor is due on this account: a password-only session cannot; an old MFA session cannot either.
    const viaPassword = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(viaPassword.body.mfaRequired).toBe(true);
    clock.advance(11 * 60_000);
    const stale = await remove(mfa);
    expect([stale.status, stale.body.code]).toEqual([403, 'recent_sign_in_required']);
    clock.reset();
    const fresh = (await signInWith(phone)).body.accessToken as string;
    const wrong = await remove(fresh, 'not-the-password');
    expect([wrong.status, wrong.body.code]).toEqual([400, 'invalid_current_password']);
    expect((await remove(fresh)).status).toBe(204);
    expect((await app.api('GET', '/auth/me', { token: fresh })).body).toMatchObject({ hasPassword: false, passkeyCount: 2 });
    expect(await auditOf(user.id, 'user.password.remove')).toHaveLength(1);

    const password = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect([password.status, password.body.code]).toEqual([401, 'invalid_credentials']);
    const change = await app.api('POST', '/auth/change-password', { token: fresh, body: { currentPassword: user.password, newPassword: 'another-Horse-battery-7' } });
    expect(change.status).toBe(400);
    expect((await signInWith(laptop)).status).toBe(200);

    // The reset link sets a password again.
    const { token } = await app.server.keel.singleUse.create(app.server.keel.db, { purpose: PASSWORD_RESET_PURPOSE, subjectId: user.id, ttlMs: 60_000 });
    expect((await app.api('POST', '/auth/reset-password', { body: { token, password: 'another-Horse-battery-7' } })).status).toBe(200);
    const back = await app.api('POST', '/auth/login', { body: { email: user.email, password: 'another-Horse-battery-7' } });
    expect(back.status).toBe(200);
    expect(back.body.mfaRequired).toBe(true);
  });

  raceTest('one sign-in challenge raced by 8 parallel verifies signs in exactly once', async () => {
    const user = await createUser(app);
    const dev = await device();
    await register(dev, (await login(app, user)).accessToken, user, 'Raced');
    const { challengeId, response } = await assertion(dev);
    const answers = await together(8, () => app.api('POST', '/auth/passkey/verify', { body: { challengeId, response } }));
    const winner = expectOneWinner(answers, 200, [401]);
    for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('challenge_expired');
    const viaPasskey = (await auditOf(user.id, 'user.login')).filter((e) => (e.details as { method: string }).method === 'passkey');
    expect(viaPasskey).toHaveLength(1);
  });
});

describe.skipIf(!backendAvailable())('passkey sign-in limits without a browser', () => {
  it('limits challenges per source address and per email', async () => {
    const app = await startTestApp({ publicUrlFromPort: true, env: { PASSKEY_SIGNIN_LIMIT: '2' } });
    try {
      const from = (ip: string, body?: unknown) => app.api('POST', '/auth/passkey/options', { headers: { 'x-forwarded-for': ip }, ...(body ? { body } : {}) });
      expect([(await from('192.0.2.1')).status, (await from('192.0.2.1')).status, (await from('192.0.2.1')).status]).toEqual([200, 200, 429]);
      expect((await from('192.0.2.2')).status).toBe(200);
      const email = { email: 'someone@example.com' };
      expect([(await from('192.0.2.3', email)).status, (await from('192.0.2.4', email)).status, (await from('192.0.2.5', email)).status]).toEqual([200, 200, 429]);
      const bad = await app.api('POST', '/auth/passkey/verify', { body: { challengeId: 'nope', response: { id: 'x', rawId: 'x', type: 'public-key', response: { clientDataJSON: 'e30', authenticatorData: 'AA', signature: 'AA' } } } });
      expect(bad.status).toBe(401);
    } finally {
      await app.close();
    }
  });
});
