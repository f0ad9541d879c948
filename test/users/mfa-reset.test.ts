import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { insertRole } from '../access/helpers.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { users } from '../../src/modules/identity/schema.js';
import { passkeys } from '../../src/modules/mfa/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';

/**
 * `POST /users/:id/mfa/reset` for a user who lost their authenticator: users:write, a
 * session with a second factor, covering the user's permissions, never one's own; clears TOTP, phone and
 * recovery codes (passkeys with `{passkeys: true}`), ends their sessions, emails them, audited.
 */
describe.skipIf(!backendAvailable())('administrator MFA reset', () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  let t: Tenant;
  let adminMfaToken: string;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000', MFA_VERIFY_LIMIT: '1000' } });
    t = await createTenant(app);
    adminMfaToken = (await enrollTotp(app, (await login(app, t.orgAdmin)).accessToken)).accessToken;
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });

  /** A member with TOTP and a passkey row (arranged in the table: the ceremony is tested in test/mfa). */
  async function enrolledMember() {
    const user = await createUser(app, { org: { orgId: t.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const enrolled = await enrollTotp(app, (await login(app, user)).accessToken);
    await app.server.keel.db.insert(passkeys).values({ userId: user.id, credentialId: `cred-${user.id}`, publicKey: 'AA', counter: 0, transports: [], name: 'Old phone' });
    return { user, token: enrolled.accessToken };
  }

  it('clears TOTP and recovery codes, keeps passkeys by default, ends the sessions, emails and audits', async () => {
    const { user, token } = await enrolledMember();
    const res = await app.api('POST', `/users/${user.id}/mfa/reset`, { token: adminMfaToken });
    expect(res.status).toBe(204);
    expect((await app.api('GET', '/auth/me', { token })).status).toBe(401);
    const [row] = await app.server.keel.db.select().from(users).where(eq(users.id, user.id));
    expect(row).toMatchObject({ mfaSecret: null, mfaRecoveryCodes: null, phoneNumber: null, mfaEnabled: true, mfaMethod: 'passkey' });
    expect(await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id))).toHaveLength(1);
    const mail = await smtp.waitFor((m) => m.to.includes(user.email) && /reset/i.test(m.subject));
    expect(mail.text).toContain('signed you out everywhere');
    const audit = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.mfa.reset'), eq(auditLogs.targetId, user.id)));
    expect(audit).toHaveLength(1);
    expect(audit[0]!.details).toEqual({ cleared: ['totp', 'phone', 'recovery_codes'] });

    // With {passkeys: true} the passkeys go too: the account signs in with its password alone.
    expect((await app.api('POST', `/users/${user.id}/mfa/reset`, { token: adminMfaToken, body: { passkeys: true } })).status).toBe(204);
    expect(await app.server.keel.db.select().from(passkeys).where(eq(passkeys.userId, user.id))).toHaveLength(0);
    const signIn = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
    expect(signIn.status).toBe(200);
    expect(signIn.body.accessToken).toEqual(expect.any(String));
  });

  it('needs a session with a second factor (403 mfa_required)', async () => {
    const { user } = await enrolledMember();
    const other = await createUser(app, { org: { orgId: t.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const passwordOnly = (await login(app, other)).accessToken;
    const res = await app.api('POST', `/users/${user.id}/mfa/reset`, { token: passwordOnly });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('mfa_required');
  });

  it('never one’s own, never without users:write, never a user holding more, never another tenant’s', async () => {
    const own = await app.api('POST', `/users/${t.orgAdmin.id}/mfa/reset`, { token: adminMfaToken });
    expect([own.status, own.body.code]).toEqual([403, 'self_change_forbidden']);

    const { user } = await enrolledMember();
    const reader = await enrollTotp(app, (await login(app, t.orgReadOnly)).accessToken);
    const denied = await app.api('POST', `/users/${user.id}/mfa/reset`, { token: reader.accessToken });
    expect([denied.status, denied.body.code]).toEqual([403, 'permission_denied']);

    const helpdeskRole = await insertRole(app, { scope: 'organization', orgId: t.orgId, perms: ['users:read', 'users:write'] });
    const helpdesk = await createUser(app, { org: { orgId: t.orgId, roleId: helpdeskRole } });
    const helpdeskToken = (await enrollTotp(app, (await login(app, helpdesk)).accessToken)).accessToken;
    const escalation = await app.api('POST', `/users/${t.orgAdmin.id}/mfa/reset`, { token: helpdeskToken });
    expect([escalation.status, escalation.body.code]).toEqual([403, 'privilege_escalation']);

    const elsewhere = await createTenant(app);
    const foreign = await app.api('POST', `/users/${elsewhere.orgTechnician.id}/mfa/reset`, { token: adminMfaToken });
    expect(foreign.status).toBe(404);
  });
});
