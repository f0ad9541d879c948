/**
 * An account without a password re-authenticates with a passkey to add and remove passkeys
 * (docs/decisions.md "Passwordless accounts"): a fresh assertion to a challenge of this session,
 * single use, within two minutes; the account keeps two sign-in passkeys. Chromium's virtual
 * authenticator stands in for the user's devices.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { and, eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login, type TestUser } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium, openPasskeyDevice, type PasskeyDevice } from '../helpers/browser.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { clock } from '../../src/platform/clock.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { passkeys } from '../../src/modules/mfa/schema.js';

afterEach(() => clock.reset());

describe.skipIf(!chromiumAvailable() || !backendAvailable())('passkey re-authentication for passwordless accounts (chromium virtual authenticator)', () => {
  let app: TestApp;
  let browser: Browser;
  const devices: PasskeyDevice[] = [];

  beforeAll(async () => {
    app = await startTestApp({ publicUrlFromPort: true, env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000', PASSWORD_REENTRY_LIMIT: '1000', PASSKEY_SIGNIN_LIMIT: '1000' } });
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

  async function register(dev: PasskeyDevice, token: string, proof: Record<string, unknown>, name: string) {
    const options = await app.api('POST', '/auth/passkeys/register/options', { token, body: { ...proof, name, signIn: true } });
    if (options.status !== 200) return options;
    const credential = await dev.create(options.body);
    return app.api('POST', '/auth/passkeys/register/verify', { token, body: { credential } });
  }

  async function signInWith(dev: PasskeyDevice): Promise<string> {
    const options = await app.api('POST', '/auth/passkey/options', {});
    const answer = await app.api('POST', '/auth/passkey/verify', { body: { challengeId: options.body.challengeId, response: await dev.get(options.body.options) } });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    return answer.body.accessToken as string;
  }

  /** A re-authentication answered by `dev` (not yet sent). */
  async function reauth(dev: PasskeyDevice, token: string) {
    const options = await app.api('POST', '/auth/passkeys/reauth/options', { token });
    expect(options.status, JSON.stringify(options.body)).toBe(200);
    expect(options.body.options.userVerification).toBe('required');
    return { challengeId: options.body.challengeId as string, response: await dev.get(options.body.options) };
  }

  /** A user with two sign-in passkeys and no password, signed in with the laptop's. */
  async function passwordless(): Promise<{ user: TestUser; laptop: PasskeyDevice; phone: PasskeyDevice; token: string }> {
    const user = await createUser(app);
    const laptop = await device();
    const phone = await device();
    const first = (await login(app, user)).accessToken;
    expect((await register(laptop, first, { currentPassword: user.password }, 'Laptop')).status).toBe(201);
    const mfa = await signInWith(laptop);
    expect((await register(phone, mfa, { currentPassword: user.password }, 'Phone')).status).toBe(201);
    const token = await signInWith(laptop);
    expect((await app.api('DELETE', '/auth/password', { token, body: { currentPassword: user.password } })).status).toBe(204);
    return { user, laptop, phone, token };
  }

  const keysOf = (userId: string) => app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, userId));

  it('adds and removes passkeys with a passkey re-authentication; a replay is refused; never fewer than two sign-in passkeys', async () => {
    const { user, laptop, phone, token } = await passwordless();
    // No password to re-enter: the password way is refused.
    const byPassword = await app.api('POST', '/auth/passkeys/register/options', { token, body: { currentPassword: user.password, name: 'Key', signIn: true } });
    expect([byPassword.status, byPassword.body.code]).toEqual([400, 'invalid_current_password']);
    // Neither or both proofs: 400.
    expect((await app.api('POST', '/auth/passkeys/register/options', { token, body: { name: 'Key', signIn: true } })).status).toBe(400);

    const proof = await reauth(laptop, token);
    const key = await device();
    const added = await register(key, token, { reauth: proof }, 'Security key');
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    expect((await keysOf(user.id)).filter((k) => k.signIn)).toHaveLength(3);
    // The same assertion again: the challenge was used.
    const replay = await app.api('POST', '/auth/passkeys/register/options', { token, body: { reauth: proof, name: 'Again', signIn: true } });
    expect([replay.status, replay.body.code]).toEqual([400, 'challenge_expired']);

    const remove = async (id: string, dev: PasskeyDevice) => app.api('DELETE', `/auth/passkeys/${id}`, { token, body: { reauth: await reauth(dev, token) } });
    expect((await remove(added.body.id as string, phone)).status).toBe(204);
    const [laptopKey] = (await keysOf(user.id)).filter((k) => k.name === 'Laptop');
    const kept = await remove(laptopKey!.id, phone);
    expect([kept.status, kept.body.code]).toEqual([409, 'sign_in_passkeys_required']);
    expect(await keysOf(user.id)).toHaveLength(2);
    const deleted = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.targetId, user.id), eq(auditLogs.action, 'auth.mfa.passkey.delete')));
    expect(deleted).toHaveLength(1);
  });

  it('refuses a stale re-authentication (past two minutes) and one issued to another session', async () => {
    const { laptop, phone, token } = await passwordless();
    const late = await reauth(laptop, token);
    clock.advance(3 * 60_000);
    const stale = await app.api('POST', '/auth/passkeys/register/options', { token, body: { reauth: late, name: 'Late', signIn: true } });
    expect([stale.status, stale.body.code]).toEqual([400, 'challenge_expired']);
    clock.reset();
    const other = await signInWith(phone);
    const elsewhere = await reauth(laptop, token);
    const wrongSession = await app.api('POST', '/auth/passkeys/register/options', { token: other, body: { reauth: elsewhere, name: 'Elsewhere', signIn: true } });
    expect([wrongSession.status, wrongSession.body.code]).toEqual([400, 'challenge_expired']);
  });

  raceTest('one re-authentication raced by 8 parallel uses is accepted once', async () => {
    const { laptop, token } = await passwordless();
    const proof = await reauth(laptop, token);
    const answers = await together(8, () => app.api('POST', '/auth/passkeys/register/options', { token, body: { reauth: proof, name: 'Raced', signIn: true } }));
    const winner = expectOneWinner(answers, 200, [400]);
    for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('challenge_expired');
  });
});
