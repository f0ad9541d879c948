import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { createTenant, createUser, enrollTotp, login, STRONG_PASSWORD, uniqueEmail, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { createOrganization } from '../../src/modules/tenancy/service.js';
import { insertRole } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';

describe.skipIf(!backendAvailable())('users and invitations', () => {
  let app: TestApp;
  let smtp: SmtpTestServer;
  let tenant: Tenant;
  let adminToken: string;
  beforeAll(async () => {
    smtp = await startSmtpServer();
    app = await startTestApp({ env: { SMTP_URL: smtp.url, LOGIN_LIMIT: '1000', PUBLIC_URL: 'https://keel.example.com' } });
    tenant = await createTenant(app);
    adminToken = (await login(app, tenant.orgAdmin)).accessToken;
  });
  afterAll(async () => {
    await app?.close();
    await smtp?.close();
  });

  async function inviteLink(email: string): Promise<string> {
    const mail = await smtp.waitFor((m) => m.to.includes(email) && m.subject.includes('invited'));
    smtp.messages.splice(smtp.messages.indexOf(mail), 1);
    const url = mail.urls.find((u) => u.includes('/accept-invite?token='));
    expect(url?.startsWith('https://keel.example.com/accept-invite?token=')).toBe(true);
    return new URL(url!).searchParams.get('token')!;
  }

  const invite = (token: string, body: Record<string, unknown>) => app.api('POST', '/users/invite', { token, body });

  it('invites by email (the email names the organisation, the answer says it went by SMTP), and the invited user accepts, signs in and acts with the given role', async () => {
    const email = uniqueEmail('invitee');
    const res = await invite(adminToken, { email, name: 'Ivy', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ email, status: 'invited', scope: 'organization', orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id, siteIds: null });
    // The answer says where the email went; the email names the organisation.
    expect(res.body.invitationEmail).toBe('smtp');
    const mail = await smtp.waitFor((m) => m.to.includes(email) && m.subject.includes('invited'));
    expect(mail.subject).toBe('You are invited to Org A on Keel');
    expect(mail.text).toContain('invited you to Org A on Keel.');
    const token = await inviteLink(email);
    expect((await app.api('POST', '/auth/login', { body: { email, password: STRONG_PASSWORD } })).status).toBe(401);

    const weak = await app.api('POST', '/auth/accept-invite', { body: { token, password: 'weak' } });
    expect(weak.status).toBe(400);
    const accepted = await app.api('POST', '/auth/accept-invite', { body: { token, password: STRONG_PASSWORD, name: 'Ivy Reader' } });
    expect(accepted.status).toBe(200);
    expect(accepted.body.user).toMatchObject({ email, name: 'Ivy Reader', status: 'active', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect((await app.api('POST', '/auth/accept-invite', { body: { token, password: STRONG_PASSWORD } })).status).toBe(400);

    const { accessToken } = await login(app, { email, password: STRONG_PASSWORD });
    const list = await app.api('GET', '/users?limit=100', { token: accessToken });
    expect(list.status).toBe(200);
    // The new member reads its organisation's users: itself with the given role, and the admin who invited it.
    expect(list.body.pagination).toMatchObject({ page: 1, limit: 100 });
    expect(list.body.pagination.total).toBe(list.body.data.length);
    const me = list.body.data.find((u: { id: string }) => u.id === accepted.body.user.id);
    expect(me).toMatchObject({ email, name: 'Ivy Reader', status: 'active', orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(list.body.data.some((u: { email: string }) => u.email === tenant.orgAdmin.email)).toBe(true);
    expect(list.body.data.every((u: { orgId: string }) => u.orgId === tenant.orgId)).toBe(true);
    expect((await invite(accessToken, { email: uniqueEmail(), name: 'X', roleId: SYSTEM_ROLES.orgReadOnly.id })).status).toBe(403);
  });

  it('the accept page reads a valid invitation (its email and organisation); any other token gets accept-invite\'s own 400', async () => {
    const email = uniqueEmail('preview');
    expect((await invite(adminToken, { email, name: 'Pia', roleId: SYSTEM_ROLES.orgReadOnly.id })).status).toBe(201);
    const token = await inviteLink(email);
    const preview = await app.api('POST', '/auth/invitation', { body: { token } });
    expect(preview.status).toBe(200);
    expect(preview.body).toMatchObject({ email, invitedTo: { kind: 'organization', name: 'Org A' } });
    const unknown = await app.api('POST', '/auth/invitation', { body: { token: `${token}x` } });
    const acceptUnknown = await app.api('POST', '/auth/accept-invite', { body: { token: `${token}x`, password: STRONG_PASSWORD } });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toEqual(acceptUnknown.body);
    try {
      clock.advance(8 * 24 * 3600_000);
      expect((await app.api('POST', '/auth/invitation', { body: { token } })).body).toEqual(acceptUnknown.body);
    } finally {
      clock.reset();
    }
    expect((await app.api('POST', '/auth/accept-invite', { body: { token, password: STRONG_PASSWORD } })).status).toBe(200);
    expect((await app.api('POST', '/auth/invitation', { body: { token } })).body).toEqual(acceptUnknown.body);
  });

  it('refuses to invite someone already in the scope (409) or associated elsewhere (409)', async () => {
    const again = await invite(adminToken, { email: tenant.orgTechnician.email, name: 'Dup', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('User already exists in this scope');
    const elsewhere = await invite(adminToken, { email: tenant.partnerTechnician.email, name: 'Else', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(elsewhere.status).toBe(409);
  });

  it('validates the invitation body: empty site lists, foreign roles, partner fields in an org invite', async () => {
    const empty = await invite(adminToken, { email: uniqueEmail(), name: 'E', roleId: SYSTEM_ROLES.orgReadOnly.id, siteIds: [] });
    expect(empty.status).toBe(400);
    expect(empty.body.details.fields[0].path).toBe('siteIds');
    const partnerRole = await invite(adminToken, { email: uniqueEmail(), name: 'P', roleId: SYSTEM_ROLES.partnerAdmin.id });
    expect(partnerRole.status).toBe(400);
    const mixed = await invite(adminToken, { email: uniqueEmail(), name: 'M', roleId: SYSTEM_ROLES.orgReadOnly.id, orgAccess: 'all' });
    expect(mixed.status).toBe(400);
  });

  it('resends an invitation with a new link that replaces the old; only for invited users', async () => {
    const email = uniqueEmail('resend');
    const res = await invite(adminToken, { email, name: 'Rae', roleId: SYSTEM_ROLES.orgTechnician.id });
    const first = await inviteLink(email);
    const resend = await app.api('POST', '/users/resend-invite', { token: adminToken, body: { userId: res.body.id } });
    expect(resend.status).toBe(200);
    const second = await inviteLink(email);
    expect(second).not.toBe(first);
    expect((await app.api('POST', '/auth/accept-invite', { body: { token: first, password: STRONG_PASSWORD } })).status).toBe(400);
    expect((await app.api('POST', '/auth/accept-invite', { body: { token: second, password: STRONG_PASSWORD } })).status).toBe(200);
    const notInvited = await app.api('POST', '/users/resend-invite', { token: adminToken, body: { userId: res.body.id } });
    expect(notInvited.status).toBe(409);
  });

  it("disabling a user stops their access token and API keys on the next request", async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { accessToken } = await login(app, user);
    const key = await app.api('POST', '/api-keys', { token: accessToken, body: { name: 'ci', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(key.status).toBe(201);
    const groups = `/orgs/${tenant.orgId}/device-groups`;
    expect((await app.api('GET', groups, { token: key.body.key })).status).toBe(200);
    const disabled = await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { status: 'disabled' } });
    expect(disabled.status).toBe(200);
    expect(disabled.body.status).toBe('disabled');
    expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(401);
    expect((await app.api('GET', groups, { token: key.body.key })).status).toBe(401);
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(401);
    const enabled = await app.api('PATCH', `/users/${user.id}`, { token: adminToken, body: { status: 'active' } });
    expect(enabled.body.status).toBe('active');
    await login(app, user);
  });

  it('removes a user from the scope, keeps the account, and lets it be invited again', async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const before = await login(app, user);
    expect((await app.api('DELETE', `/users/${user.id}`, { token: adminToken })).status).toBe(204);
    expect((await app.api('GET', `/users/${user.id}`, { token: adminToken })).status).toBe(404);
    expect((await app.api('GET', '/auth/me', { token: before.accessToken })).status).toBe(401);
    const solo = await login(app, user);
    expect(solo.body.user.scope).toBeNull();
    expect((await app.api('GET', '/users', { token: solo.accessToken })).status).toBe(403);

    const again = await invite(adminToken, { email: user.email, name: 'Back', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(again.status).toBe(201);
    const token = await inviteLink(user.email);
    expect((await app.api('POST', '/auth/accept-invite', { body: { token, password: 'not-their-password-at-all' } })).status).toBe(401);
    const ok = await app.api('POST', '/auth/accept-invite', { body: { token, password: user.password } });
    expect(ok.status).toBe(200);
    expect(ok.body.user).toMatchObject({ scope: 'organization', orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id });
  });

  it('assigns roles within the caller’s own permissions; nobody changes their own role or status', async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const res = await app.api('POST', `/users/${user.id}/role`, { token: adminToken, body: { roleId: SYSTEM_ROLES.orgTechnician.id } });
    expect(res.status).toBe(200);
    expect(res.body.roleId).toBe(SYSTEM_ROLES.orgTechnician.id);

    // A user administrator who lacks devices:write cannot give the Technician role (which has it).
    const usersAdminRole = await insertRole(app, { scope: 'organization', orgId: tenant.orgId, perms: ['users:*', '*:read'] });
    const usersAdmin = await createUser(app, { org: { orgId: tenant.orgId, roleId: usersAdminRole } });
    const usersAdminToken = (await login(app, usersAdmin)).accessToken;
    const reader = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const beyond = await app.api('POST', `/users/${reader.id}/role`, { token: usersAdminToken, body: { roleId: SYSTEM_ROLES.orgTechnician.id } });
    expect(beyond.status).toBe(403);
    expect(beyond.body.code).toBe('privilege_escalation');
    expect(beyond.body.details.missing).toEqual(expect.arrayContaining(['devices:write']));
    // Within its permissions it may: Read Only is covered by `*:read`.
    const within = await app.api('POST', `/users/${reader.id}/role`, { token: usersAdminToken, body: { roleId: usersAdminRole } });
    expect(within.status).toBe(200);
    expect(within.body.roleId).toBe(usersAdminRole);

    for (const [method, path, body] of [
      ['POST', `/users/${tenant.orgAdmin.id}/role`, { roleId: SYSTEM_ROLES.orgReadOnly.id }],
      ['PATCH', `/users/${tenant.orgAdmin.id}`, { status: 'disabled' }],
      ['DELETE', `/users/${tenant.orgAdmin.id}`, undefined],
    ] as const) {
      const self = await app.api(method, path, { token: adminToken, ...(body ? { body } : {}) });
      expect(self.status).toBe(403);
      expect(self.body.code).toBe('self_change_forbidden');
    }
    expect((await app.api('GET', '/auth/me', { token: adminToken })).body).toMatchObject({ roleId: SYSTEM_ROLES.orgAdmin.id, status: 'active' });

    const techToken = (await login(app, tenant.orgTechnician)).accessToken;
    const denied = await app.api('GET', '/users', { token: techToken });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('permission_denied');
  });

  it('GET /users/roles lists the roles assignable in the scope: system ones and its own, no other tenant’s', async () => {
    const own = await insertRole(app, { scope: 'organization', orgId: tenant.orgId, name: 'Own Helpdesk', perms: ['users:read'] });
    const foreign = await insertRole(app, { scope: 'organization', orgId: tenant.otherOrgId, name: 'Foreign Helpdesk', perms: ['users:read'] });
    const res = await app.api('GET', '/users/roles?limit=100', { token: adminToken });
    expect(res.status).toBe(200);
    const ids = res.body.data.map((r: { id: string }) => r.id);
    expect(ids).toEqual(expect.arrayContaining([SYSTEM_ROLES.orgAdmin.id, SYSTEM_ROLES.orgTechnician.id, SYSTEM_ROLES.orgReadOnly.id, own]));
    expect(ids).not.toContain(foreign);
    expect(ids).not.toContain(SYSTEM_ROLES.partnerAdmin.id);
    expect(res.body.data.every((r: { scope: string }) => r.scope === 'organization')).toBe(true);
    expect(res.body.data.find((r: { id: string }) => r.id === own)).toMatchObject({ name: 'Own Helpdesk', isSystem: false, orgId: tenant.orgId });
    expect(res.body.pagination).toMatchObject({ page: 1, limit: 100, total: ids.length });
    const paged = await app.api('GET', '/users/roles?limit=2&page=2', { token: adminToken });
    expect(paged.status).toBe(200);
    expect(paged.body.data.map((r: { id: string }) => r.id)).toEqual(ids.slice(2, 4));
    const techToken = (await login(app, tenant.orgTechnician)).accessToken;
    expect((await app.api('GET', '/users/roles', { token: techToken })).status).toBe(403);
  });

  it('GET /users filters by status, roleId and search (email or name, case-insensitive, wildcards literal)', async () => {
    const org = await createOrganization(app.server.keel.db, { name: 'Filters', partnerId: tenant.partnerId });
    const admin = await createUser(app, { name: 'Filter Admin', org: { orgId: org.id, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const token = (await login(app, admin)).accessToken;
    const zed = await createUser(app, { name: 'Zed 100%_Tech', email: uniqueEmail('zed'), org: { orgId: org.id, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const off = await createUser(app, { name: 'Off Reader', status: 'disabled', org: { orgId: org.id, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const invited = await invite(token, { email: uniqueEmail('pending'), name: 'Pending Reader', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(invited.status).toBe(201);
    await inviteLink(invited.body.email);
    const ids = async (query: string) => {
      const res = await app.api('GET', `/users?limit=100&${query}`, { token });
      expect(res.status).toBe(200);
      expect(res.body.pagination.total).toBe(res.body.data.length);
      return res.body.data.map((u: { id: string }) => u.id).sort();
    };
    expect(await ids('')).toEqual([admin.id, zed.id, off.id, invited.body.id].sort());
    expect(await ids('status=disabled')).toEqual([off.id]);
    expect(await ids('status=invited')).toEqual([invited.body.id]);
    expect(await ids('status=active')).toEqual([admin.id, zed.id].sort());
    expect(await ids(`roleId=${SYSTEM_ROLES.orgReadOnly.id}`)).toEqual([off.id, invited.body.id].sort());
    expect(await ids(`roleId=${SYSTEM_ROLES.orgTechnician.id}&status=active`)).toEqual([zed.id]);
    expect(await ids('search=zed-')).toEqual([zed.id]); // email
    expect(await ids('search=OFF%20READ')).toEqual([off.id]); // name, any case
    expect(await ids('search=100%25_')).toEqual([zed.id]); // % and _ match themselves
    expect(await ids('search=%25')).toEqual([zed.id]);
    expect(await ids('search=nobody-here')).toEqual([]);
    expect((await app.api('GET', '/users?status=gone', { token })).status).toBe(400);
  });

  it('an invited user becomes active only by accepting: PATCH status active is 409 invitation_pending', async () => {
    const email = uniqueEmail('pending');
    const res = await invite(adminToken, { email, name: 'Pat', roleId: SYSTEM_ROLES.orgReadOnly.id });
    expect(res.status).toBe(201);
    const token = await inviteLink(email);
    const activate = await app.api('PATCH', `/users/${res.body.id}`, { token: adminToken, body: { status: 'active' } });
    expect(activate.status).toBe(409);
    expect(activate.body.code).toBe('invitation_pending');
    expect((await app.api('GET', `/users/${res.body.id}`, { token: adminToken })).body.status).toBe('invited');
    expect((await app.api('POST', '/auth/login', { body: { email, password: STRONG_PASSWORD } })).status).toBe(401);
    expect((await app.api('POST', '/auth/accept-invite', { body: { token, password: STRONG_PASSWORD } })).status).toBe(200);
  });

  it('hides other organisations’ users (404) and scopes partner users by orgAccess', async () => {
    const bUser = await createUser(app, { org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect((await app.api('GET', `/users/${bUser.id}`, { token: adminToken })).status).toBe(404);
    expect((await app.api('GET', `/users?orgId=${tenant.otherOrgId}`, { token: adminToken })).status).toBe(404);
    const list = await app.api('GET', '/users?limit=100', { token: adminToken });
    expect(list.status).toBe(200);
    const listed = list.body.data.map((u: { id: string }) => u.id);
    expect(listed).toEqual(expect.arrayContaining([tenant.orgAdmin.id, tenant.orgTechnician.id, tenant.orgReadOnly.id]));
    expect(listed).not.toContain(bUser.id);
    expect(list.body.data.every((u: { orgId: string }) => u.orgId === tenant.orgId)).toBe(true);

    // A partner user with full organisation access sees the members of every organisation of its partner.
    const all = await createUser(app, { partner: { partnerId: tenant.partnerId, roleId: SYSTEM_ROLES.partnerReadOnly.id, orgAccess: 'all' } });
    const allToken = (await login(app, all)).accessToken;
    const wide = await app.api('GET', '/users?limit=100', { token: allToken });
    expect(wide.status).toBe(200);
    const wideIds = wide.body.data.map((u: { id: string }) => u.id);
    expect(wideIds).toEqual(expect.arrayContaining([bUser.id, tenant.orgAdmin.id, tenant.partnerTechnician.id, all.id]));
    const narrowed = await app.api('GET', `/users?limit=100&orgId=${tenant.otherOrgId}`, { token: allToken });
    expect(narrowed.body.data.map((u: { id: string }) => u.id)).toContain(bUser.id);
    expect(narrowed.body.data.every((u: { orgId: string }) => u.orgId === tenant.otherOrgId)).toBe(true);

    // Without full organisation access a partner user administers and reads no users at all (docs/specification.md "Tenant hierarchy and scopes").
    const selected = await createUser(app, {
      partner: { partnerId: tenant.partnerId, roleId: SYSTEM_ROLES.partnerReadOnly.id, orgAccess: 'selected', orgIds: [tenant.orgId] },
    });
    const sToken = (await login(app, selected)).accessToken;
    for (const [method, path] of [['GET', '/users'], ['GET', `/users/${tenant.orgAdmin.id}`], ['GET', '/users/invitations'], ['POST', `/users/invite?orgId=${tenant.orgId}`]] as const) {
      const res = await app.api(method, path, { token: sToken, ...(method === 'POST' ? { body: { email: uniqueEmail(), name: 'N', roleId: SYSTEM_ROLES.orgReadOnly.id } } : {}) });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.code).toBe('full_org_access_required');
      expect(res.body.error).toMatch(/full partner organization access is required/i);
    }
  });

  it('lets a partner admin (after enrolling MFA) invite into a named organisation and at partner level', async () => {
    const first = await login(app, tenant.partnerAdmin);
    expect((await app.api('GET', '/users', { token: first.accessToken })).status).toBe(428);
    const { accessToken } = await enrollTotp(app, first.accessToken);
    const orgInvite = await invite(accessToken, { email: uniqueEmail(), name: 'O', roleId: SYSTEM_ROLES.orgTechnician.id, orgId: tenant.otherOrgId });
    expect(orgInvite.status).toBe(201);
    expect(orgInvite.body.orgId).toBe(tenant.otherOrgId);
    const noAccess = await invite(accessToken, { email: uniqueEmail(), name: 'P', roleId: SYSTEM_ROLES.partnerTechnician.id });
    expect(noAccess.status).toBe(400);
    expect(noAccess.body.details.fields[0].path).toBe('orgAccess');
    const partnerInvite = await invite(accessToken, { email: uniqueEmail(), name: 'P', roleId: SYSTEM_ROLES.partnerTechnician.id, orgAccess: 'selected', orgIds: [tenant.orgId] });
    expect(partnerInvite.status).toBe(201);
    expect(partnerInvite.body).toMatchObject({ scope: 'partner', partnerId: tenant.partnerId, orgAccess: 'selected', orgIds: [tenant.orgId] });

    // The last *:* holder of an organisation can be neither demoted, disabled nor removed.
    const soloOrg = await createOrganization(app.server.keel.db, { name: 'Solo', partnerId: tenant.partnerId });
    const soloOrgId = soloOrg.id;
    const soloAdminId = (await createUser(app, { org: { orgId: soloOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } })).id;
    for (const [method, path, body] of [
      ['POST', `/users/${soloAdminId}/role?orgId=${soloOrgId}`, { roleId: SYSTEM_ROLES.orgReadOnly.id }],
      ['PATCH', `/users/${soloAdminId}?orgId=${soloOrgId}`, { status: 'disabled' }],
      ['DELETE', `/users/${soloAdminId}?orgId=${soloOrgId}`, undefined],
    ] as const) {
      const res = await app.api(method, path, { token: accessToken, ...(body ? { body } : {}) });
      expect(res.status).toBe(409);
      expect(res.body.code).toBe('last_admin');
    }
    expect((await app.api('GET', `/users/${soloAdminId}?orgId=${soloOrgId}`, { token: accessToken })).body).toMatchObject({ status: 'active', roleId: SYSTEM_ROLES.orgAdmin.id });
    // Once there is another administrator, one of the two may go.
    const second = await createUser(app, { org: { orgId: soloOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    expect((await app.api('DELETE', `/users/${second.id}?orgId=${soloOrgId}`, { token: accessToken })).status).toBe(204);
  });
});
