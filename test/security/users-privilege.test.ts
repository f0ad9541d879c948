/**
 * docs/security.md "Findings", 5 (the user side), and its mutation checks: who may change whom.
 * - Changing a user (status, name, role, membership, their invitation) needs every permission that
 *   user holds now (and, for a role change, the new role's): else 403 `privilege_escalation`.
 * - PATCH / DELETE /users/:id and POST /users/:id/role need users:write / users:delete / users:write.
 * - A role may be given (invite or assignment) only by someone holding all of its permissions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { createWorld, insertRole, orgUserWithRole, ROLE, type World } from '../access/helpers.js';

describe.skipIf(!backendAvailable())('users: changing a user needs that user’s permissions', () => {
  let app: TestApp;
  let w: World;
  /** Helpdesk: users:read, users:write, users:invite, users:delete, nothing else. */
  let helpdeskRole: string;
  let helpdesk: { user: TestUser; token: string };
  /** A custom `*:*` role with two holders ("Security Admins"). */
  let securityAdmins: TestUser[];

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    helpdeskRole = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Helpdesk', perms: ['users:read', 'users:write', 'users:invite', 'users:delete'] });
    helpdesk = await orgUserWithRole(app, w.orgId, helpdeskRole);
    const adminsRole = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Security Admins', perms: ['*:*'] });
    securityAdmins = [
      await createUser(app, { name: 'Sec One', org: { orgId: w.orgId, roleId: adminsRole } }),
      await createUser(app, { name: 'Sec Two', org: { orgId: w.orgId, roleId: adminsRole } }),
    ];
  });
  afterAll(async () => {
    await app?.close();
  });

  const get = (id: string) => app.api('GET', `/users/${id}`, { token: w.tokens.orgAdmin });

  it('a Helpdesk user cannot disable, rename, demote or remove a *:* administrator (403 privilege_escalation)', async () => {
    const target = securityAdmins[0]!;
    for (const [method, path, body] of [
      ['PATCH', `/users/${target.id}`, { status: 'disabled' }],
      ['PATCH', `/users/${target.id}`, { name: 'Renamed' }],
      ['POST', `/users/${target.id}/role`, { roleId: helpdeskRole }],
      ['DELETE', `/users/${target.id}`, undefined],
    ] as const) {
      const res = await app.api(method, path, { token: helpdesk.token, ...(body ? { body } : {}) });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.code).toBe('privilege_escalation');
      expect(res.body.details.missing).toEqual(['*:*']);
    }
    const after = await get(target.id);
    expect(after.body).toMatchObject({ status: 'active', name: 'Sec One', orgId: w.orgId });
    expect((await login(app, target)).accessToken).toBeTruthy();
  });

  it('nor a Technician, whose devices:write it lacks; a user within its permissions it may change', async () => {
    const tech = await createUser(app, { org: { orgId: w.orgId, roleId: ROLE.orgTechnician } });
    const denied = await app.api('PATCH', `/users/${tech.id}`, { token: helpdesk.token, body: { status: 'disabled' } });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('privilege_escalation');
    expect(denied.body.details.missing).toEqual(expect.arrayContaining(['devices:write', 'devices:read']));
    expect((await get(tech.id)).body.status).toBe('active');

    // A colleague holding only users:read is within the Helpdesk's permissions.
    const readerRole = await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['users:read'] });
    const colleague = await createUser(app, { org: { orgId: w.orgId, roleId: readerRole } });
    const disabled = await app.api('PATCH', `/users/${colleague.id}`, { token: helpdesk.token, body: { status: 'disabled' } });
    expect(disabled.status).toBe(200);
    expect(disabled.body.status).toBe('disabled');
    const promoted = await app.api('POST', `/users/${colleague.id}/role`, { token: helpdesk.token, body: { roleId: helpdeskRole } });
    expect(promoted.status).toBe(200);
    expect((await app.api('DELETE', `/users/${colleague.id}`, { token: helpdesk.token })).status).toBe(204);
  });

  it('inherited permissions count: a role whose parent grants *:* is covered only by *:*', async () => {
    const parent = await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['*:*'] });
    const child = await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['users:read'], parentRoleId: parent });
    const heir = await createUser(app, { org: { orgId: w.orgId, roleId: child } });
    const res = await app.api('PATCH', `/users/${heir.id}`, { token: helpdesk.token, body: { status: 'disabled' } });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('privilege_escalation');
    expect(res.body.details.missing).toEqual(['*:*']);
  });

  it('a Helpdesk user cannot resend or revoke the invitation of an invited administrator', async () => {
    const invited = await app.api('POST', '/users/invite', { token: w.tokens.orgAdmin, body: { email: uniqueEmail('inv-admin'), name: 'New Admin', roleId: ROLE.orgAdmin } });
    expect(invited.status).toBe(201);
    const list = await app.api('GET', '/users/invitations?limit=100', { token: helpdesk.token });
    expect(list.status).toBe(200);
    const invitation = list.body.data.find((i: { userId: string | null }) => i.userId === invited.body.id);
    expect(invitation).toBeDefined();
    const resend = await app.api('POST', '/users/resend-invite', { token: helpdesk.token, body: { userId: invited.body.id } });
    expect(resend.status).toBe(403);
    expect(resend.body.code).toBe('privilege_escalation');
    const revoke = await app.api('DELETE', `/users/invitations/${invitation.id}`, { token: helpdesk.token });
    expect(revoke.status).toBe(403);
    expect(revoke.body.code).toBe('privilege_escalation');
    const still = await app.api('GET', '/users/invitations?limit=100', { token: w.tokens.orgAdmin });
    expect(still.body.data.map((i: { id: string }) => i.id)).toContain(invitation.id);
    // The organisation administrator covers it.
    expect((await app.api('POST', '/users/resend-invite', { token: w.tokens.orgAdmin, body: { userId: invited.body.id } })).status).toBe(200);

    // An account that existed holds nothing yet, but a resend re-issues the role: that must be covered too.
    const existing = await createUser(app, { name: 'Outsider' });
    const toExisting = await app.api('POST', '/users/invite', { token: w.tokens.orgAdmin, body: { email: existing.email, name: 'Boss', roleId: ROLE.orgAdmin } });
    expect(toExisting.status).toBe(201);
    const resendExisting = await app.api('POST', '/users/resend-invite', { token: helpdesk.token, body: { userId: toExisting.body.id } });
    expect(resendExisting.status).toBe(403);
    expect(resendExisting.body.code).toBe('privilege_escalation');
    expect(resendExisting.body.details.missing).toEqual(['*:*']);
  });

  it('Organization Read Only (users:read) gets 403 permission_denied on PATCH, DELETE and role assignment', async () => {
    // The target is within `*:read`, so only the permission guard stands in the way.
    const peer = await createUser(app, { org: { orgId: w.orgId, roleId: ROLE.orgReadOnly } });
    for (const [method, path, body, required] of [
      ['PATCH', `/users/${peer.id}`, { status: 'disabled' }, 'users:write'],
      ['PATCH', `/users/${peer.id}`, { name: 'Renamed' }, 'users:write'],
      ['DELETE', `/users/${peer.id}`, undefined, 'users:delete'],
      ['POST', `/users/${peer.id}/role`, { roleId: ROLE.orgReadOnly }, 'users:write'],
    ] as const) {
      const res = await app.api(method, path, { token: w.tokens.orgReadOnly, ...(body ? { body } : {}) });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.code).toBe('permission_denied');
      expect(res.body.details.required).toBe(required);
    }
    expect((await get(peer.id)).body).toMatchObject({ status: 'active', name: 'Test User', roleId: ROLE.orgReadOnly });
  });

  it('a user holding only users:* cannot invite an Organization Admin or give that role (403 privilege_escalation)', async () => {
    const usersOnly = await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['users:*'] });
    const caller = await orgUserWithRole(app, w.orgId, usersOnly);
    const email = uniqueEmail('escalate');
    const inv = await app.api('POST', '/users/invite', { token: caller.token, body: { email, name: 'Boss', roleId: ROLE.orgAdmin } });
    expect(inv.status).toBe(403);
    expect(inv.body.code).toBe('privilege_escalation');
    const search = await app.api('GET', `/users?search=${encodeURIComponent(email)}`, { token: w.tokens.orgAdmin });
    expect(search.body.data).toEqual([]);

    // The target holds users:read only (within users:*), so the role cap alone refuses the assignment.
    const small = await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['users:read'] });
    const target = await createUser(app, { org: { orgId: w.orgId, roleId: small } });
    const assign = await app.api('POST', `/users/${target.id}/role`, { token: caller.token, body: { roleId: ROLE.orgAdmin } });
    expect(assign.status).toBe(403);
    expect(assign.body.code).toBe('privilege_escalation');
    expect((await get(target.id)).body.roleId).toBe(small);
    // Within users:* both work.
    expect((await app.api('POST', `/users/${target.id}/role`, { token: caller.token, body: { roleId: usersOnly } })).status).toBe(200);
    expect((await app.api('POST', '/users/invite', { token: caller.token, body: { email: uniqueEmail(), name: 'Peer', roleId: small } })).status).toBe(201);
  });
});
