import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, nextTotpStep, totpCode, type TestUser } from '../helpers/fixtures.js';
import { randomPhone, startTwilioStub, type TwilioStub } from '../mfa/twilio-stub.js';
import { clock } from '../../src/platform/clock.js';
import { sessions } from '../../src/modules/identity/schema.js';
import { USER_TOPIC } from '../../src/modules/identity/sessions.js';
import { singleUseRecords } from '../../src/platform/db/schema.js';
import { PASSKEY_CHALLENGES_PER_TEMP_TOKEN } from '../../src/modules/mfa/common.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

/**
 * The MFA findings of docs/security.md "Findings", reproduced through HTTP:
 * - D2: adding or replacing a factor never asked for the existing one;
 * - D10: anyone could spend a user's SMS sign-in budget with verification requests to their number;
 * - D14: `allowedMfaMethods` was enforced for SMS only;
 * - D15: passkey sign-in options created a challenge row per call, without a limit, never swept.
 */

afterEach(() => clock.reset());

async function challenge(app: TestApp, user: TestUser) {
  const res = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
  expect(res.status).toBe(200);
  return res.body as { mfaRequired: true; mfaMethod: string; tempToken: string; availableMethods: string[] };
}

/** Makes a live session password-only, as a session that predates enrolment could be in a deployment from before the fix. */
async function downgrade(app: TestApp, userId: string) {
  await app.server.keel.db.update(sessions).set({ mfa: false }).where(eq(sessions.userId, userId));
  await app.server.keel.invalidation.publish(USER_TOPIC, userId);
}

describe.skipIf(!backendAvailable())('D2: factor changes need the existing factor', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('enabling MFA ends the other password-only sessions of the account, and keeps the one that enrolled', async () => {
    const user = await createUser(app);
    const older = await login(app, user);
    const enrolling = await login(app, user);
    const enrolled = await enrollTotp(app, enrolling.accessToken);
    expect((await app.api('GET', '/auth/me', { token: older.accessToken })).status).toBe(401);
    expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: older.refreshToken } })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: enrolled.accessToken })).status).toBe(200);
  });

  it('the attack: a password-only session cannot replace the factor, regenerate recovery codes, turn MFA off or add a passkey', async () => {
    const user = await createUser(app);
    const { accessToken, recoveryCodes, secret } = await enrollTotp(app, (await login(app, user)).accessToken);
    await downgrade(app, user.id);
    await nextTotpStep();
    const attempts = [
      await app.api('POST', '/auth/mfa/setup', { token: accessToken }),
      await app.api('POST', '/auth/mfa/enable', { token: accessToken, body: { code: await totpCode(secret) } }),
      await app.api('POST', '/auth/mfa/verify', { token: accessToken, body: { code: await totpCode(secret) } }),
      await app.api('POST', '/auth/mfa/recovery-codes', { token: accessToken, body: { code: await totpCode(secret) } }),
      await app.api('POST', '/auth/mfa/disable', { token: accessToken, body: { code: await totpCode(secret) } }),
      await app.api('POST', '/auth/phone/verify', { token: accessToken, body: { phoneNumber: randomPhone() } }),
      await app.api('POST', '/auth/mfa/sms/enable', { token: accessToken }),
      await app.api('POST', '/auth/passkeys/register/options', { token: accessToken, body: { currentPassword: user.password, name: 'Mine' } }),
    ];
    for (const res of attempts) {
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('mfa_required');
    }
    // The owner's recovery codes still work: nothing was replaced.
    const { tempToken } = await challenge(app, user);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: recoveryCodes[0] } })).status).toBe(200);
  });

  it('the same changes pass from a session established with the second factor', async () => {
    const user = await createUser(app);
    const { secret } = await enrollTotp(app, (await login(app, user)).accessToken);
    await nextTotpStep();
    const { tempToken } = await challenge(app, user);
    const signedIn = await app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: await totpCode(secret) } });
    expect(signedIn.status).toBe(200);
    await nextTotpStep();
    const rotated = await app.api('POST', '/auth/mfa/recovery-codes', { token: signedIn.body.accessToken, body: { code: await totpCode(secret) } });
    expect(rotated.status).toBe(200);
    expect(rotated.body.recoveryCodes).toHaveLength(10);
    // A second authenticator is a conflict, not a silent replacement (setup when enrolled).
    const again = await app.api('POST', '/auth/mfa/setup', { token: signedIn.body.accessToken });
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('mfa_already_enabled');
  });
});

describe.skipIf(!backendAvailable())('D14: every MFA method switch is enforced at enrolment and sign-in', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
  });

  const allow = async (app: TestApp, orgId: string, adminToken: string, methods: Record<string, boolean>) => {
    const res = await app.api('PATCH', `/orgs/${orgId}`, { token: adminToken, body: { settings: { security: { allowedMfaMethods: methods } } } });
    expect(res.status).toBe(200);
  };

  it('TOTP turned off: enrolment refused, not offered at sign-in, codes refused; a recovery code still signs in', async () => {
    const tenant = await createTenant(app);
    const adminToken = (await login(app, tenant.orgAdmin)).accessToken;
    const tech = tenant.orgTechnician;
    const { recoveryCodes, secret } = await enrollTotp(app, (await login(app, tech)).accessToken);
    await allow(app, tenant.orgId, adminToken, { totp: false, sms: false });

    const other = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const setup = await app.api('POST', '/auth/mfa/setup', { token: (await login(app, other)).accessToken });
    expect(setup.status).toBe(403);
    expect(setup.body.code).toBe('totp_not_allowed');

    const offered = await challenge(app, tech);
    expect(offered).toMatchObject({ mfaRequired: true, mfaMethod: 'totp', availableMethods: [] });
    await nextTotpStep();
    const code = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: offered.tempToken, code: await totpCode(secret) } });
    expect(code.status).toBe(403);
    expect(code.body.code).toBe('totp_not_allowed');
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: offered.tempToken, code: recoveryCodes[0] } })).status).toBe(200);

    await allow(app, tenant.orgId, adminToken, { totp: true });
    expect((await challenge(app, tech)).availableMethods).toEqual(['totp']);
  });

  it('passkeys turned off: registration refused', async () => {
    const tenant = await createTenant(app);
    await allow(app, tenant.orgId, (await login(app, tenant.orgAdmin)).accessToken, { passkey: false });
    const tech = tenant.orgTechnician;
    const res = await app.api('POST', '/auth/passkeys/register/options', { token: (await login(app, tech)).accessToken, body: { currentPassword: tech.password, name: 'Key' } });
    // 503 when this machine has no usable WebAuthn relying party is not expected in tests (PUBLIC_URL localhost).
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('passkey_not_allowed');
  });
});

describe.skipIf(!backendAvailable())('D10: SMS budgets are separate buckets', () => {
  let stub: TwilioStub;
  let app: TestApp;
  beforeAll(async () => {
    stub = await startTwilioStub();
    app = await startTestApp({ env: { ...stub.env(), LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
    await stub?.close();
  });

  it('the attack: verification requests to a victim’s number from another account do not block the victim’s sign-in texts', async () => {
    const tenant = await createTenant(app);
    const victim = tenant.orgTechnician;
    const victimToken = (await login(app, victim)).accessToken;
    const phone = randomPhone();
    expect((await app.api('POST', '/auth/phone/verify', { token: victimToken, body: { phoneNumber: phone } })).status).toBe(200);
    expect((await app.api('POST', '/auth/phone/confirm', { token: victimToken, body: { code: stub.lastCode(phone) } })).status).toBe(200);
    expect((await app.api('POST', '/auth/mfa/sms/enable', { token: victimToken })).status).toBe(200);

    const attacker = (await createTenant(app)).orgTechnician; // a member of another organisation
    const attackerToken = (await login(app, attacker)).accessToken;
    const spaced = `${phone.slice(0, 2)} (${phone.slice(2, 5)}) ${phone.slice(5, 8)}-${phone.slice(8)}`;
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await app.api('POST', '/auth/phone/verify', { token: attackerToken, body: { phoneNumber: spaced } })).status);
    // The number's verification bucket (PHONE_VERIFY_PER_PHONE_HOURLY_LIMIT=3, one spent by the victim).
    expect(statuses).toEqual([200, 200, 429, 429]);

    const { tempToken } = await challenge(app, victim);
    const send = await app.api('POST', '/auth/mfa/sms/send', { body: { tempToken } });
    expect(send.status).toBe(200);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: stub.lastCode(phone) } })).status).toBe(200);
  });

  it('an account without a tenant texts arbitrary numbers only a few times a day', async () => {
    const loner = await createUser(app);
    const token = (await login(app, loner)).accessToken;
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await app.api('POST', '/auth/phone/verify', { token, body: { phoneNumber: randomPhone() } })).status);
    expect(statuses).toEqual([200, 200, 200, 429]); // PHONE_VERIFY_TENANTLESS_DAILY_LIMIT=3
    // An hour later (the per-user hourly bucket has refilled) the daily cap still holds.
    clock.advance(3_700_000);
    const later = (await login(app, loner)).accessToken; // the access token above has expired by then
    expect((await app.api('POST', '/auth/phone/verify', { token: later, body: { phoneNumber: randomPhone() } })).status).toBe(429);
    // A member of an organisation is not under that cap.
    const tenant = await createTenant(app);
    const memberToken = (await login(app, tenant.orgTechnician)).accessToken;
    const member: number[] = [];
    for (let i = 0; i < 4; i++) member.push((await app.api('POST', '/auth/phone/verify', { token: memberToken, body: { phoneNumber: randomPhone() } })).status);
    expect(member).toEqual([200, 200, 200, 200]);
  });
});

describe.skipIf(!backendAvailable())('D15: WebAuthn challenges are limited and expired records swept', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('passkey sign-in options are limited per temp token', async () => {
    const user = await createUser(app);
    await enrollTotp(app, (await login(app, user)).accessToken);
    const { tempToken } = await challenge(app, user);
    const statuses: number[] = [];
    for (let i = 0; i <= PASSKEY_CHALLENGES_PER_TEMP_TOKEN; i++) statuses.push((await app.api('POST', '/auth/mfa/passkey/options', { body: { tempToken } })).status);
    // This account has no passkey (409), but every call spent the budget before that answer.
    expect(statuses).toEqual([...Array<number>(PASSKEY_CHALLENGES_PER_TEMP_TOKEN).fill(409), 429]);
  });

  it('expired single-use records are swept by the next one created', async () => {
    const user = await createUser(app);
    await enrollTotp(app, (await login(app, user)).accessToken);
    await challenge(app, user);
    const live = () => app.server.keel.db.select().from(singleUseRecords).where(and(eq(singleUseRecords.subjectId, user.id), eq(singleUseRecords.purpose, 'mfa_login')));
    expect(await live()).toHaveLength(1);
    clock.advance(6 * 60_000); // the temp token (5 minutes) has expired
    const other = await createUser(app);
    await enrollTotp(app, (await login(app, other)).accessToken);
    await challenge(app, other); // creates a record: the sweep runs
    expect(await live()).toHaveLength(0);
  });
});
