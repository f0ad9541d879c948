import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { auditLogs } from '../../src/modules/audit/schema.js';

/**
 * `POST /users/:id/sessions/revoke` (ASVS 7.4.5): an administrator signs a user out everywhere without
 * disabling the account: users:write over the user, every permission the user holds, never one's own.
 */
describe.skipIf(!backendAvailable())(`an administrator signs a user out everywhere (${backend})`, () => {
  let app: TestApp;
  let t: Tenant;
  let adminToken: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    t = await createTenant(app);
    adminToken = (await login(app, t.orgAdmin)).accessToken;
  });
  afterAll(async () => app?.close());

  const revoke = (id: string, token: string) => app.api('POST', `/users/${id}/sessions/revoke`, { token });

  it('ends every session of the user at once: access tokens 401, refresh tokens refused; the account still signs in; audited', async () => {
    const member = await createUser(app, { org: { orgId: t.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const laptop = await login(app, member);
    const phone = await login(app, member);
    expect((await app.api('GET', '/auth/me', { token: laptop.accessToken })).status).toBe(200);

    const res = await revoke(member.id, adminToken);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ revoked: 2 });
    expect((await app.api('GET', '/auth/me', { token: laptop.accessToken })).status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: phone.accessToken })).status).toBe(401);
    expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: phone.refreshToken } })).status).toBe(401);
    // Not disabled: a new sign-in works.
    expect((await app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } })).status).toBe(200);

    const audit = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.sessions.revoke'), eq(auditLogs.targetId, member.id)));
    expect(audit).toHaveLength(1);
    expect(audit[0]!.details).toEqual({ revoked: 2 });
    expect(audit[0]!.orgId).toBe(t.orgId);
  });

  it('never one’s own, never without users:write, never a user holding more, never another tenant’s', async () => {
    const own = await revoke(t.orgAdmin.id, adminToken);
    expect(own.status).toBe(403);
    expect(own.body.code).toBe('self_change_forbidden');

    const reader = (await login(app, t.orgReadOnly)).accessToken;
    expect((await revoke(t.orgTechnician.id, reader)).status).toBe(403);

    // A technician of the organisation cannot sign out its administrator (users:write missing or more held).
    const tech = (await login(app, t.orgTechnician)).accessToken;
    expect((await revoke(t.orgAdmin.id, tech)).status).toBe(403);

    // Another organisation's member is not there at all.
    const elsewhere = await createUser(app, { org: { orgId: t.otherOrgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const hidden = await revoke(elsewhere.id, adminToken);
    expect(hidden.status).toBe(404);
    expect((await login(app, elsewhere)).accessToken).toBeTruthy();
  });

  it('the OpenAPI document describes it', async () => {
    const doc = (await app.api('GET', '/openapi.json')).body;
    const op = doc.paths['/api/v1/users/{id}/sessions/revoke'].post;
    expect(op.operationId).toBeTruthy();
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['200', '401', '403', '404']));
  });
});
