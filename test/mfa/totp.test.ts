import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, jwtClaims, login, nextTotpStep, totpCode } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { users } from '../../src/modules/identity/schema.js';
import { organizations } from '../../src/modules/tenancy/schema.js';
import { singleUseRecords } from '../../src/platform/db/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';

afterEach(() => clock.reset());

describe.skipIf(!backendAvailable())('TOTP and recovery codes', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => app?.close());

  async function mfaUser() {
    const user = await createUser(app);
    const first = await login(app, user);
    const enrolled = await enrollTotp(app, first.accessToken);
    return { user, first, ...enrolled };
  }

  it('sets up with a secret, an otpauth URL, a PNG QR code and 10 recovery codes; the secret is sealed at rest', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const setup = await app.api('POST', '/auth/mfa/setup', { token: accessToken });
    expect(setup.status).toBe(200);
    const { secret, otpAuthUrl, qrCodeDataUrl, recoveryCodes } = setup.body;
    expect(secret).toMatch(/^[A-Z2-7]{16,}$/);
    expect(otpAuthUrl).toMatch(/^otpauth:\/\/totp\/Keel:/);
    expect(otpAuthUrl).toContain(`secret=${secret}`);
    expect(qrCodeDataUrl).toMatch(/^data:image\/png;base64,/);
    expect(recoveryCodes).toHaveLength(10);
    for (const c of recoveryCodes) expect(c).toMatch(/^[A-Z2-9]{4}-[A-Z2-9]{4}$/);
    const pending = await app.server.keel.db.select().from(singleUseRecords).where(eq(singleUseRecords.subjectId, user.id));
    expect(JSON.stringify(pending)).not.toContain(secret);

    const wrong = await app.api('POST', '/auth/mfa/enable', { token: accessToken, body: { code: '000000' } });
    expect(wrong.status).toBe(400);
    const ok = await app.api('POST', '/auth/mfa/enable', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(ok.status).toBe(200);
    expect(ok.body.recoveryCodes).toEqual(recoveryCodes);
    expect(jwtClaims(ok.body.accessToken).mfa).toBe(true);
    expect(ok.body.user).toMatchObject({ mfaEnabled: true, mfaMethod: 'totp' });

    const [row] = await app.server.keel.db.select().from(users).where(eq(users.id, user.id));
    expect(row!.mfaSecret).toBeTruthy();
    expect(row!.mfaSecret).not.toContain(secret);
    expect(JSON.stringify(row!.mfaRecoveryCodes)).not.toContain(recoveryCodes[0]);
    // The access token issued before enrolment still works, now on an MFA session.
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(200);
  });

  it('confirms setup through /auth/mfa/verify without a temp token too', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const setup = await app.api('POST', '/auth/mfa/setup', { token: accessToken });
    const res = await app.api('POST', '/auth/mfa/verify', { token: accessToken, body: { code: await totpCode(setup.body.secret) } });
    expect(res.status).toBe(200);
    expect(res.body.recoveryCodes).toHaveLength(10);
    expect(jwtClaims(res.body.accessToken).mfa).toBe(true);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { code: '123456' } })).status).toBe(401);
  });

  it('asks for the second factor at login and issues mfa tokens only after it; a refresh keeps mfa', async () => {
    const { user, secret } = await mfaUser();
    await nextTotpStep();
    const res = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ mfaRequired: true, mfaMethod: 'totp', tempToken: expect.any(String), availableMethods: ['totp'] });
    expect(res.cookies.find((c) => c.startsWith('service_refresh_token='))).toBeUndefined();
    const wrong = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: res.body.tempToken, code: '000000' } });
    expect(wrong.status).toBe(401);
    expect(wrong.body.code).toBe('invalid_code');
    const ok = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: res.body.tempToken, code: await totpCode(secret) } });
    expect(ok.status).toBe(200);
    expect(jwtClaims(ok.body.accessToken).mfa).toBe(true);
    const refreshed = await app.api('POST', '/auth/refresh', { body: { refreshToken: ok.body.refreshToken } });
    expect(refreshed.status).toBe(200);
    expect(jwtClaims(refreshed.body.accessToken).mfa).toBe(true);
    // The temp token was single use.
    await nextTotpStep();
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: res.body.tempToken, code: await totpCode(secret) } })).status).toBe(401);
  });

  it('refuses a TOTP code used once already', async () => {
    const { user, secret } = await mfaUser();
    await nextTotpStep();
    const code = await totpCode(secret);
    const t1 = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
    const t2 = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: t1, code } })).status).toBe(200);
    const replay = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: t2, code } });
    expect(replay.status).toBe(401);
    // An older step's code is refused too.
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: t2, code: await totpCode(secret, -30) } })).status).toBe(401);
  });

  it('accepts each recovery code once, and rotation replaces them all', async () => {
    const { user, secret, recoveryCodes, accessToken } = await mfaUser();
    const temp = async () => (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
    const used = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: recoveryCodes[0]!.toLowerCase() } });
    expect(used.status).toBe(200);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: recoveryCodes[0] } })).status).toBe(401);

    const notTotp = await app.api('POST', '/auth/mfa/recovery-codes', { token: accessToken, body: { code: recoveryCodes[1] } });
    expect(notTotp.status).toBe(400);
    await nextTotpStep();
    const rotated = await app.api('POST', '/auth/mfa/recovery-codes', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(rotated.status).toBe(200);
    expect(rotated.body.recoveryCodes).toHaveLength(10);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: recoveryCodes[2] } })).status).toBe(401);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: rotated.body.recoveryCodes[0] } })).status).toBe(200);
    const actions = (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, user.id))).map((a) => a.action);
    expect(actions).toEqual(expect.arrayContaining(['auth.mfa.setup', 'auth.mfa.recovery_codes.rotate']));
  });

  it('stores codes tagged with the key id, and still accepts a code stored untagged (as before tags)', async () => {
    const { user, recoveryCodes } = await mfaUser();
    const keel = app.server.keel;
    const [row] = await keel.db.select().from(users).where(eq(users.id, user.id));
    const stored = row!.mfaRecoveryCodes as string[];
    expect(stored).toHaveLength(10);
    for (const h of stored) expect(h).toMatch(new RegExp(`^${keel.secrets.sealer.currentKeyId}\\.[0-9a-f]{64}$`));
    // The untagged form earlier versions stored.
    await keel.db.update(users).set({ mfaRecoveryCodes: [keel.secrets.keyed.make(`recovery:${recoveryCodes[3]}`)] }).where(eq(users.id, user.id));
    const temp = async () => (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: recoveryCodes[3] } })).status).toBe(200);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: await temp(), code: recoveryCodes[3] } })).status).toBe(401);
  });

  it('refuses an expired temp token and an expired setup (controllable clock)', async () => {
    const { user, secret } = await mfaUser();
    const tempToken = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
    clock.advance(5 * 60_000 + 1000);
    const late = await app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: await totpCode(secret) } });
    expect(late.status).toBe(401);
    expect(late.body.code).toBe('invalid_temp_token');

    const other = await createUser(app);
    const { accessToken } = await login(app, other);
    const setup = await app.api('POST', '/auth/mfa/setup', { token: accessToken });
    clock.advance(10 * 60_000 + 1000);
    const expired = await app.api('POST', '/auth/mfa/enable', { token: accessToken, body: { code: await totpCode(setup.body.secret) } });
    expect(expired.status).toBe(400);
    expect(expired.body.code).toBe('mfa_setup_expired');
  });

  it('disables MFA with a current code, and refuses while the organisation requires MFA', async () => {
    const tenant = await createTenant(app);
    const first = await login(app, tenant.orgTechnician);
    const { secret, accessToken } = await enrollTotp(app, first.accessToken);
    await app.server.keel.db.update(organizations).set({ settings: { security: { requireMfa: true } } }).where(eq(organizations.id, tenant.orgId));
    await nextTotpStep();
    const refused = await app.api('POST', '/auth/mfa/disable', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatch(/organization requires MFA/i);
    await app.server.keel.db.update(organizations).set({ settings: {} }).where(eq(organizations.id, tenant.orgId));
    expect((await app.api('POST', '/auth/mfa/disable', { token: accessToken, body: { code: '000000' } })).status).toBe(400);
    const ok = await app.api('POST', '/auth/mfa/disable', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(ok.status).toBe(200);
    const me = await app.api('GET', '/auth/me', { token: accessToken });
    expect(me.body).toMatchObject({ mfaEnabled: false, mfaMethod: null });
    const [row] = await app.server.keel.db.select().from(users).where(eq(users.id, tenant.orgTechnician.id));
    expect(row).toMatchObject({ mfaSecret: null, mfaRecoveryCodes: null, phoneNumber: null });
    expect((await app.api('POST', '/auth/login', { body: { email: tenant.orgTechnician.email, password: tenant.orgTechnician.password } })).body.accessToken).toBeTruthy();
  });

  it('puts a Force-MFA user behind 428 on protected routes until a factor is enrolled', async () => {
    const tenant = await createTenant(app);
    const { accessToken } = await login(app, tenant.partnerAdmin);
    const gated = await app.api('GET', '/auth/sessions', { token: accessToken });
    expect(gated.status).toBe(428);
    expect(gated.body.code).toBe('mfa_enrollment_required');
    for (const path of ['/auth/me', '/users/me']) expect((await app.api('GET', path, { token: accessToken })).status).toBe(200);
    await enrollTotp(app, accessToken);
    // The token issued before enrolment now passes the gate.
    expect((await app.api('GET', '/auth/sessions', { token: accessToken })).status).toBe(200);
    // A user whose role does not force MFA is never gated.
    const tech = await login(app, tenant.orgTechnician);
    expect((await app.api('GET', '/auth/sessions', { token: tech.accessToken })).status).toBe(200);
  });

  it('limits MFA verification per user, apart from the login limit', async () => {
    const limited = await startTestApp({ env: { MFA_VERIFY_LIMIT: '3', LOGIN_LIMIT: '1000' } });
    try {
      const user = await createUser(limited);
      const first = await login(limited, user);
      await enrollTotp(limited, first.accessToken); // one attempt spent on enable
      const tempToken = (await limited.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await limited.api('POST', '/auth/mfa/verify', { body: { tempToken, code: '000000' } })).status);
      expect(statuses).toEqual([401, 401, 429]);
      const blocked = await limited.api('POST', '/auth/mfa/verify', { body: { tempToken, code: '000000' } });
      expect(blocked.body.retryAfter).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });
});

describe.skipIf(!backendAvailable())('ENABLE_2FA=false', () => {
  it('turns the second factor, the 428 gate and MFA routes off: an enrolled user signs in with the password alone', async () => {
    const off = await startTestApp({ env: { ENABLE_2FA: 'false' } });
    try {
      // An account enrolled while MFA was on (the routes to enrol are off now: set it as enrolment leaves it).
      const user = await createUser(off);
      const keel = off.server.keel;
      await keel.db
        .update(users)
        .set({ mfaEnabled: true, mfaMethod: 'totp', mfaSecret: keel.secrets.sealer.seal('JBSWY3DPEHPK3PXP', `users.mfa_secret:${user.id}`) })
        .where(eq(users.id, user.id));
      await keel.invalidation.publish('user', user.id);
      const signedIn = await off.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
      expect(signedIn.status).toBe(200);
      expect(signedIn.body.mfaRequired).toBeUndefined();
      expect(signedIn.body.accessToken).toEqual(expect.any(String));

      const tenant = await createTenant(off);
      const admin = await login(off, tenant.partnerAdmin);
      expect((await off.api('GET', '/auth/sessions', { token: admin.accessToken })).status).toBe(200);
      expect((await off.api('POST', '/auth/mfa/setup', { token: admin.accessToken })).status).toBe(404);
    } finally {
      await off.close();
    }
  });
});

describe.skipIf(backend !== 'postgres' || !backendAvailable())('race: single use under parallel requests (PostgreSQL)', () => {
  it('a recovery code raced by 10 parallel requests succeeds exactly once', async () => {
    const app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
    try {
      const user = await createUser(app);
      const { recoveryCodes } = await enrollTotp(app, (await login(app, user)).accessToken);
      const temps: string[] = [];
      for (let i = 0; i < 10; i++) temps.push((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken);
      const answers = await Promise.all(temps.map((tempToken) => app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: recoveryCodes[3] } })));
      expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
      expect(answers.filter((a) => a.status === 401)).toHaveLength(9);
    } finally {
      await app.close();
    }
  });

  raceTest('one temp token raced by 10 parallel verifies with 10 different valid recovery codes signs in once', async () => {
    const app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
    try {
      const user = await createUser(app);
      const { recoveryCodes } = await enrollTotp(app, (await login(app, user)).accessToken);
      const { tempToken } = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body;
      const answers = await together(10, (i) => app.api('POST', '/auth/mfa/verify', { body: { tempToken, code: recoveryCodes[i] } }));
      const winner = expectOneWinner(answers, 200, [401]);
      for (const a of answers.filter((x) => x !== winner)) expect(a.body.code).toBe('invalid_temp_token');
      // Only the winner's code was spent: the losers' nine still sign in, each once.
      const [row] = await app.server.keel.db.select({ codes: users.mfaRecoveryCodes }).from(users).where(eq(users.id, user.id));
      expect(row!.codes).toHaveLength(recoveryCodes.length - 1);
      const unused = recoveryCodes.filter((_, i) => answers[i] !== winner);
      const again = (await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken;
      expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: again, code: unused[0] } })).status).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('one TOTP code raced by 10 parallel requests succeeds exactly once', async () => {
    const app = await startTestApp({ env: { LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
    try {
      const user = await createUser(app);
      const { secret } = await enrollTotp(app, (await login(app, user)).accessToken);
      await nextTotpStep();
      const temps: string[] = [];
      for (let i = 0; i < 10; i++) temps.push((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).body.tempToken);
      const code = await totpCode(secret);
      const answers = await Promise.all(temps.map((tempToken) => app.api('POST', '/auth/mfa/verify', { body: { tempToken, code } })));
      expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
      const losers = answers.filter((a) => a.status !== 200);
      expect(losers).toHaveLength(9);
      for (const l of losers) expect([l.status, l.body.code]).toEqual([401, 'invalid_code']);
    } finally {
      await app.close();
    }
  });
});
