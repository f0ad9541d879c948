import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, enrollTotp, login, nextTotpStep, totpCode } from '../helpers/fixtures.js';
import { startSmtpServer, type SmtpMessage, type SmtpTestServer } from '../helpers/smtp.js';
import { clock } from '../../src/platform/clock.js';

/**
 * ASVS 6.3.7 (docs/security.md): the owner of an account is emailed when how it signs in changes:
 * password, second factors, recovery codes. The mail says what, when and from where, and carries no
 * secret: not the password, not a code.
 */
describe.skipIf(!backendAvailable())(`sign-in changes are told to the account's owner (${backend})`, () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
    clock.reset();
  });

  const notice = (email: string, subject: RegExp): Promise<SmtpMessage> => smtp.waitFor((m) => m.to.includes(email) && subject.test(m.subject));

  it('password change, authenticator set up, recovery codes replaced, two-step sign-in off: one notice each, without secrets', async () => {
    const user = await createUser(app);
    const first = await login(app, user);
    const changed = await app.api('POST', '/auth/change-password', {
      token: first.accessToken,
      headers: { 'user-agent': 'NoticeTest/1.0' },
      body: { currentPassword: user.password, newPassword: 'a-Brand-new-passphrase-77' },
    });
    expect(changed.status).toBe(200);
    const password = await notice(user.email, /password was changed/);
    expect(password.text).toContain(app.ip);
    expect(password.text).toContain('NoticeTest/1.0');
    expect(password.text).toMatch(/When: \d{4}-\d{2}-\d{2}T/);
    expect(password.text).toContain('/forgot-password');
    expect(password.text).not.toContain('a-Brand-new-passphrase-77');
    expect(password.text).not.toContain(user.password);

    const { accessToken: token } = await login(app, { email: user.email, password: 'a-Brand-new-passphrase-77' });
    const { secret, recoveryCodes, accessToken } = await enrollTotp(app, token);
    const totp = await notice(user.email, /authenticator app was set up/);
    for (const c of recoveryCodes) expect(totp.text).not.toContain(c);
    expect(totp.text).not.toContain(secret);

    await nextTotpStep();
    const rotated = await app.api('POST', '/auth/mfa/recovery-codes', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(rotated.status).toBe(200);
    const codes = await notice(user.email, /recovery codes/);
    for (const c of rotated.body.recoveryCodes as string[]) expect(codes.text).not.toContain(c);

    await nextTotpStep();
    const off = await app.api('POST', '/auth/mfa/disable', { token: accessToken, body: { code: await totpCode(secret) } });
    expect(off.status).toBe(200);
    await notice(user.email, /turned off/);
    expect(smtp.messages.filter((m) => m.to.includes(user.email))).toHaveLength(4);
  });

  it('a refused change sends nothing', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const wrong = await app.api('POST', '/auth/change-password', { token: accessToken, body: { currentPassword: 'not-the-password-1', newPassword: 'another-Long-passphrase-88' } });
    expect(wrong.status).toBe(400);
    const { identityOf } = await import('../../src/modules/identity/context.js');
    await identityOf(app.server.keel).deferred.idle();
    expect(smtp.messages.filter((m) => m.to.includes(user.email))).toHaveLength(0);
  });
});
