import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { roles } from '../../src/modules/access/schema.js';
import { createWorld, insertRole, keys, orgUserWithRole, partnerUserWithRole, ROLE, type World } from './helpers.js';

describe.skipIf(!backendAvailable())(`roles API (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const create = (token: string, body: Record<string, unknown>, query = '') => app.api('POST', `/roles${query}`, { token, body });

  describe('permission vocabulary', () => {
    it('publishes the catalog with canonical pairs and wildcards', async () => {
      const res = await app.api('GET', '/permissions/catalog', { token: w.tokens.orgReadOnly });
      expect(res.status).toBe(200);
      const all = keys(res.body.data);
      expect(all).toEqual(expect.arrayContaining(['*:*', '*:read', 'users:read', 'users:invite', 'alerts:acknowledge', 'devices:*', 'webhooks:write', 'events:publish', 'audit:export']));
      expect(all).not.toContain('devices:view');
      expect(res.body.pagination).toEqual({ page: 1, limit: 100, total: res.body.data.length });
      expect(res.body.data[0]).toHaveProperty('description');
    });

    it('lists builder resources, actions and the mapping', async () => {
      const res = await app.api('GET', '/roles/permissions/available', { token: w.tokens.orgAdmin });
      expect(res.status).toBe(200);
      expect(res.body.resources).toEqual(expect.arrayContaining(['devices', 'scripts', 'users', 'remote']));
      expect(res.body.actions).toEqual(['view', 'create', 'update', 'delete', 'execute']);
      expect(res.body.mapping).toEqual({ view: 'read', create: 'write', update: 'write', delete: 'delete', execute: 'execute' });
    });

    it('accepts the builder vocabulary and stores and shows canonical pairs', async () => {
      const res = await create(w.tokens.orgAdmin, {
        name: 'Builder',
        permissions: [
          { resource: 'devices', action: 'view' },
          { resource: 'devices', action: 'create' },
          { resource: 'devices', action: 'update' },
          { resource: 'scripts', action: 'execute' },
          { resource: 'alerts', action: 'acknowledge' },
          { resource: 'sites', action: 'read' },
        ],
      });
      expect(res.status).toBe(201);
      expect(keys(res.body.permissions)).toEqual(['alerts:acknowledge', 'devices:read', 'devices:write', 'scripts:execute', 'sites:read']);
      const again = await app.api('GET', `/roles/${res.body.id}`, { token: w.tokens.orgAdmin });
      expect(keys(again.body.permissions)).toEqual(keys(res.body.permissions));
    });

    it('rejects unknown pairs with 400 naming each', async () => {
      const res = await create(w.tokens.orgAdmin, {
        name: 'Bad',
        permissions: [{ resource: 'devices', action: 'read' }, { resource: 'devices', action: 'fly' }, { resource: 'spaceships', action: 'view' }],
      });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('validation_failed');
      expect(res.body.details.fields.map((f: any) => f.path)).toEqual(['permissions.1', 'permissions.2']);
      const patch = await app.api('PATCH', `/roles/${await insertRole(app, { scope: 'organization', orgId: w.orgId })}`, {
        token: w.tokens.orgAdmin, body: { permissions: [{ resource: 'users', action: 'teleport' }] },
      });
      expect(patch.status).toBe(400);
    });
  });

  describe('response shapes', () => {
    // Counts and holder lists are of a world of their own, which no other test changes: they hold in any order.
    let own: World;
    beforeAll(async () => {
      own = await createWorld(app);
    });

    it('answers the role shape with user counts of the caller’s scope', async () => {
      const res = await app.api('GET', '/roles', { token: own.tokens.orgAdmin });
      expect(res.status).toBe(200);
      expect(res.body.pagination).toMatchObject({ page: 1, limit: 50 });
      const names = res.body.data.map((r: any) => r.name);
      expect(names).toEqual(expect.arrayContaining(['Organization Admin', 'Organization Technician', 'Organization Read Only']));
      expect(names).not.toContain('Partner Admin');
      const admin = res.body.data.find((r: any) => r.id === ROLE.orgAdmin);
      expect(Object.keys(admin).sort()).toEqual(
        ['createdAt', 'description', 'forceMfa', 'id', 'isSystem', 'name', 'orgId', 'parentRoleId', 'partnerId', 'permissions', 'scope', 'updatedAt', 'userCount'].sort(),
      );
      expect(admin).toMatchObject({ isSystem: true, scope: 'organization', userCount: 1, permissions: [{ resource: '*', action: '*' }] });
    });

    it('rejects a page limit over 100', async () => {
      const res = await app.api('GET', '/roles?limit=101', { token: w.tokens.orgAdmin });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('validation_failed');
    });

    it('shows the Partner Admin role with Force MFA on', async () => {
      const res = await app.api('GET', `/roles/${ROLE.partnerAdmin}`, { token: own.tokens.partnerFull });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ name: 'Partner Admin', forceMfa: true, isSystem: true, userCount: 1 });
    });

    it('lists the users holding a role', async () => {
      const res = await app.api('GET', `/roles/${ROLE.orgTechnician}/users`, { token: own.tokens.orgAdmin });
      expect(res.status).toBe(200);
      expect(res.body.data.map((u: any) => u.email)).toEqual([own.orgTechnician.email]);
      expect(res.body.pagination.total).toBe(1);
      expect(res.body.data[0]).toMatchObject({ scope: 'organization', orgId: own.orgId, roleId: ROLE.orgTechnician, siteIds: null, mfaEnabled: false });
      expect(res.body.data[0]).not.toHaveProperty('passwordHash');
    });
  });

  describe('system roles', () => {
    const all = Object.entries(ROLE);
    it.each(all)('%s rejects PATCH (403 system_role_immutable) and DELETE, for any caller', async (_name, id) => {
      for (const token of [w.tokens.orgAdmin, w.tokens.partnerFull, w.tokens.platformAdmin]) {
        const patch = await app.api('PATCH', `/roles/${id}`, { token, body: { name: 'Renamed' } });
        expect(patch.status).toBe(403);
        expect(patch.body).toEqual({ error: 'System roles cannot be modified', code: 'system_role_immutable' });
        const del = await app.api('DELETE', `/roles/${id}`, { token });
        expect(del.status).toBe(403);
        expect(del.body).toEqual({ error: 'System roles cannot be deleted', code: 'system_role_immutable' });
      }
      const [row] = await app.server.keel.db.select().from(roles).where(eq(roles.id, id));
      expect(row?.name).not.toBe('Renamed');
    });

    it('can be cloned; the clone is a custom role with the permissions, parent and forceMfa', async () => {
      const res = await app.api('POST', `/roles/${ROLE.partnerAdmin}/clone`, { token: w.tokens.partnerFull, body: { name: 'My admins' } });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ name: 'My admins', isSystem: false, scope: 'partner', partnerId: w.partnerId, orgId: null, forceMfa: true, userCount: 0 });
      expect(keys(res.body.permissions)).toEqual(['*:*']);
      const tech = await app.api('POST', `/roles/${ROLE.orgTechnician}/clone`, { token: w.tokens.orgAdmin, body: { name: 'Techs' } });
      expect(tech.status).toBe(201);
      expect(tech.body).toMatchObject({ scope: 'organization', orgId: w.orgId, partnerId: null });
      expect(keys(tech.body.permissions)).toContain('remote:access');
      // The clone is editable.
      const patch = await app.api('PATCH', `/roles/${tech.body.id}`, { token: w.tokens.orgAdmin, body: { forceMfa: true, description: 'd' } });
      expect(patch.status).toBe(200);
      expect(patch.body).toMatchObject({ forceMfa: true, description: 'd' });
    });

    it('refuses to clone a role into the other scope', async () => {
      const res = await app.api('POST', `/roles/${ROLE.partnerTechnician}/clone`, { token: w.tokens.orgAdmin, body: { name: 'x' } });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('scope_mismatch');
    });
  });

  describe('inheritance', () => {
    it('a role grants its ancestors’ permissions at request time and stops the moment the parent loses them', async () => {
      const grand = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Grand', perms: ['users:read'] });
      const parent = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Parent', perms: ['devices:read'], parentRoleId: grand });
      const child = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Child', perms: ['alerts:read'], parentRoleId: parent });
      const { token } = await orgUserWithRole(app, w.orgId, child);
      // users:read comes only from the grandparent: the user can list users and roles.
      expect((await app.api('GET', '/users', { token })).status).toBe(200);
      expect((await app.api('GET', '/roles', { token })).status).toBe(200);
      const me = await app.api('GET', '/auth/me', { token });
      expect(keys(me.body.permissions)).toEqual(['alerts:read', 'devices:read', 'users:read']);

      const patched = await app.api('PATCH', `/roles/${grand}`, { token: w.tokens.orgAdmin, body: { permissions: [{ resource: 'devices', action: 'read' }] } });
      expect(patched.status).toBe(200);
      // The answer came after the change was published: the very next request is refused.
      expect((await app.api('GET', '/users', { token })).status).toBe(403);
      const denied = await app.api('GET', '/roles', { token });
      expect(denied.body).toMatchObject({ code: 'permission_denied' });

      // And it comes back when the parent regains it.
      await app.api('PATCH', `/roles/${grand}`, { token: w.tokens.orgAdmin, body: { permissions: [{ resource: 'users', action: 'view' }] } });
      expect((await app.api('GET', '/roles', { token })).status).toBe(200);
      // Cutting the chain (parent → none) removes the inherited grant too.
      await app.api('PATCH', `/roles/${parent}`, { token: w.tokens.orgAdmin, body: { parentRoleId: null } });
      expect((await app.api('GET', '/roles', { token })).status).toBe(403);
    });

    it('answers direct and inherited permissions, each inherited one naming its source', async () => {
      const base = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Base', perms: ['users:read', 'devices:read'] });
      const mid = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Mid', perms: ['devices:read', 'scripts:read'], parentRoleId: base });
      const top = await create(w.tokens.orgAdmin, { name: 'Top', permissions: [{ resource: 'alerts', action: 'view' }], parentRoleId: mid });
      expect(top.status).toBe(201);
      const res = await app.api('GET', `/roles/${top.body.id}/effective-permissions`, { token: w.tokens.orgAdmin });
      expect(res.status).toBe(200);
      expect(res.body.direct).toEqual([{ resource: 'alerts', action: 'read' }]);
      expect(res.body.inherited).toEqual([
        { resource: 'devices', action: 'read', sourceRoleId: mid, sourceRoleName: 'Mid' },
        { resource: 'scripts', action: 'read', sourceRoleId: mid, sourceRoleName: 'Mid' },
        { resource: 'users', action: 'read', sourceRoleId: base, sourceRoleName: 'Base' },
      ]);
    });

    it('rejects cycles, including a role as its own parent', async () => {
      const a = (await create(w.tokens.orgAdmin, { name: 'A' })).body.id;
      const b = (await create(w.tokens.orgAdmin, { name: 'B', parentRoleId: a })).body.id;
      const c = (await create(w.tokens.orgAdmin, { name: 'C', parentRoleId: b })).body.id;
      const self = await app.api('PATCH', `/roles/${a}`, { token: w.tokens.orgAdmin, body: { parentRoleId: a } });
      expect(self.status).toBe(400);
      expect(self.body.code).toBe('circular_inheritance');
      expect(self.body.error).toMatch(/circular inheritance/i);
      const loop = await app.api('PATCH', `/roles/${a}`, { token: w.tokens.orgAdmin, body: { parentRoleId: c } });
      expect(loop.status).toBe(400);
      expect(loop.body.error).toMatch(/circular inheritance/i);
      const [row] = await app.server.keel.db.select().from(roles).where(eq(roles.id, a));
      expect(row?.parentRoleId).toBeNull();
    });

    it('requires the parent to have the same scope and be a system role or of the same owner', async () => {
      const cross = await create(w.tokens.orgAdmin, { name: 'x', parentRoleId: ROLE.partnerTechnician });
      expect(cross.status).toBe(400);
      expect(cross.body.code).toBe('invalid_parent_role');
      const otherOrgRole = await insertRole(app, { scope: 'organization', orgId: w.otherOrgId, perms: ['devices:read'] });
      const foreign = await create(w.tokens.orgAdmin, { name: 'x', parentRoleId: otherOrgRole });
      expect(foreign.status).toBe(400);
      expect(foreign.body.code).toBe('invalid_parent_role');
      const system = await create(w.tokens.orgAdmin, { name: 'x', parentRoleId: ROLE.orgReadOnly });
      expect(system.status).toBe(201);
      expect(system.body.parentRoleId).toBe(ROLE.orgReadOnly);
    });
  });

  describe('delete', () => {
    it('is blocked with counts while users or child roles remain, then succeeds', async () => {
      const role = (await create(w.tokens.orgAdmin, { name: 'Busy', permissions: [{ resource: 'devices', action: 'view' }] })).body.id;
      const child = (await create(w.tokens.orgAdmin, { name: 'Kid', parentRoleId: role })).body.id;
      await createUser(app, { org: { orgId: w.orgId, roleId: role } });
      const blocked = await app.api('DELETE', `/roles/${role}`, { token: w.tokens.orgAdmin });
      expect(blocked.status).toBe(400);
      expect(blocked.body.code).toBe('role_in_use');
      expect(blocked.body.details).toEqual({ users: 1, childRoles: 1 });
      expect((await app.api('DELETE', `/roles/${child}`, { token: w.tokens.orgAdmin })).status).toBe(204);
      const stillUsers = await app.api('DELETE', `/roles/${role}`, { token: w.tokens.orgAdmin });
      expect(stillUsers.body.details).toEqual({ users: 1, childRoles: 0 });
      const empty = (await create(w.tokens.orgAdmin, { name: 'Empty' })).body.id;
      expect((await app.api('DELETE', `/roles/${empty}`, { token: w.tokens.orgAdmin })).status).toBe(204);
      expect((await app.api('GET', `/roles/${empty}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    });
  });

  describe('privilege caps', () => {
    it('a caller cannot create, patch or clone a role beyond its own effective permissions', async () => {
      const limited = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Role admin', perms: ['users:read', 'users:write', 'devices:read'] });
      const { token } = await orgUserWithRole(app, w.orgId, limited);
      const ok = await create(token, { name: 'Sub', permissions: [{ resource: 'devices', action: 'view' }] });
      expect(ok.status).toBe(201);
      const over = await create(token, { name: 'Over', permissions: [{ resource: 'devices', action: 'delete' }, { resource: 'devices', action: 'view' }] });
      expect(over.status).toBe(403);
      expect(over.body).toMatchObject({ code: 'privilege_escalation', details: { permissions: ['devices:delete'] } });
      // A wildcard is wider than the pairs the caller holds.
      expect((await create(token, { name: 'W', permissions: [{ resource: 'devices', action: '*' }] })).status).toBe(403);
      // Through a parent.
      const viaParent = await create(token, { name: 'P', parentRoleId: ROLE.orgAdmin });
      expect(viaParent.status).toBe(403);
      // Clone of a stronger role.
      const clone = await app.api('POST', `/roles/${ROLE.orgTechnician}/clone`, { token, body: { name: 'T' } });
      expect(clone.status).toBe(403);
      expect(clone.body.code).toBe('privilege_escalation');
      // PATCH that adds a permission beyond the caller's.
      const patch = await app.api('PATCH', `/roles/${ok.body.id}`, { token, body: { permissions: [{ resource: 'scripts', action: 'execute' }] } });
      expect(patch.status).toBe(403);
      const reparent = await app.api('PATCH', `/roles/${ok.body.id}`, { token, body: { parentRoleId: ROLE.orgTechnician } });
      expect(reparent.status).toBe(403);
    });

    it('nobody changes their own role', async () => {
      const own = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Own', perms: ['*:*'] });
      const { token } = await orgUserWithRole(app, w.orgId, own);
      const res = await app.api('PATCH', `/roles/${own}`, { token, body: { name: 'Mine now' } });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('own_role');
    });

    it('users:write is needed to write and users:read to read', async () => {
      expect((await create(w.tokens.orgReadOnly, { name: 'no' })).status).toBe(403);
      expect((await app.api('GET', '/roles', { token: w.tokens.orgTechnician })).status).toBe(403);
      expect((await app.api('GET', '/roles', { token: w.tokens.orgReadOnly })).status).toBe(200);
    });
  });

  describe('scopes', () => {
    it('an organisation user gets 404 for another organisation’s roles', async () => {
      const foreign = await insertRole(app, { scope: 'organization', orgId: w.otherOrgId, perms: ['devices:read'] });
      for (const [method, path] of [
        ['GET', `/roles/${foreign}`],
        ['GET', `/roles/${foreign}/users`],
        ['GET', `/roles/${foreign}/effective-permissions`],
        ['PATCH', `/roles/${foreign}`],
        ['DELETE', `/roles/${foreign}`],
        ['POST', `/roles/${foreign}/clone`],
      ] as const) {
        const res = await app.api(method, path, { token: w.tokens.orgAdmin, ...(method === 'PATCH' || method === 'POST' ? { body: { name: 'x' } } : {}) });
        expect(res.status, `${method} ${path}`).toBe(404);
      }
      const list = await app.api('GET', '/roles', { token: w.tokens.orgAdmin });
      expect(list.body.data.map((r: any) => r.id)).not.toContain(foreign);
      // Naming another organisation is 404 too.
      expect((await app.api('GET', `/roles?orgId=${w.otherOrgId}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    });

    it('partner users create partner roles, or organisation roles when they name the organisation', async () => {
      const p = await create(w.tokens.partnerFull, { name: 'Partner custom' });
      expect(p.body).toMatchObject({ scope: 'partner', partnerId: w.partnerId, orgId: null });
      const o = await create(w.tokens.partnerFull, { name: 'Org custom', orgId: w.otherOrgId });
      expect(o.status).toBe(201);
      expect(o.body).toMatchObject({ scope: 'organization', orgId: w.otherOrgId });
      const viaQuery = await create(w.tokens.partnerFull, { name: 'Org custom 2' }, `?orgId=${w.orgId}`);
      expect(viaQuery.body).toMatchObject({ scope: 'organization', orgId: w.orgId });
      const mismatch = await create(w.tokens.partnerFull, { name: 'x', orgId: w.orgId }, `?orgId=${w.otherOrgId}`);
      expect(mismatch.status).toBe(400);
      // Listing in an organisation shows that organisation's roles, not the partner's.
      const list = await app.api('GET', `/roles?orgId=${w.otherOrgId}`, { token: w.tokens.partnerFull });
      const ids = list.body.data.map((r: any) => r.id);
      expect(ids).toContain(o.body.id);
      expect(ids).not.toContain(p.body.id);
      expect(ids).not.toContain(viaQuery.body.id);
    });

    it('platform admins name the partner or organisation', async () => {
      const none = await create(w.tokens.platformAdmin, { name: 'Nowhere' });
      expect(none.status).toBe(400);
      expect(none.body.code).toBe('scope_required');
      const res = await create(w.tokens.platformAdmin, { name: 'By admin', partnerId: w.partnerId });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ scope: 'partner', partnerId: w.partnerId });
      const unknown = await create(w.tokens.platformAdmin, { name: 'x', orgId: '00000000-0000-7000-8000-0000000000ff' });
      expect(unknown.status).toBe(404);
    });

    it('a partner user without full organisation access can neither administer nor read roles', async () => {
      const admin = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, perms: ['*:*'] });
      const sel = await partnerUserWithRole(app, w.partnerId, admin, 'selected', [w.orgId]);
      const custom = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, perms: ['devices:read'] });
      for (const [method, path] of [
        ['POST', '/roles'],
        ['PATCH', `/roles/${custom}`],
        ['DELETE', `/roles/${custom}`],
        ['POST', `/roles/${ROLE.partnerTechnician}/clone`],
        ['GET', '/roles'],
        ['GET', `/roles/${custom}`],
      ] as const) {
        const res = await app.api(method, path, { token: sel.token, ...(method === 'POST' || method === 'PATCH' ? { body: { name: 'x' } } : {}) });
        expect(res.status, `${method} ${path}`).toBe(403);
        expect(res.body).toEqual({ error: 'Full partner organization access is required', code: 'full_org_access_required' });
      }
      // Every users and roles route, for selected and none: test/security/access-full-org.test.ts.
    });

    it('users without a partner or organisation get 403 context_required', async () => {
      const loner = await createUser(app);
      const { accessToken } = await login(app, loner);
      const res = await app.api('GET', '/roles', { token: accessToken });
      expect(res.status).toBe(403);
      expect(res.body).toEqual({ error: 'Partner or organization context is required', code: 'context_required' });
      // /auth/* still works.
      expect((await app.api('GET', '/auth/me', { token: accessToken })).status).toBe(200);
    });
  });

  describe('audit', () => {
    it('records role.create, role.update, role.clone and role.delete', async () => {
      const created = await create(w.tokens.orgAdmin, { name: 'Audited' });
      const id = created.body.id;
      await app.api('PATCH', `/roles/${id}`, { token: w.tokens.orgAdmin, body: { name: 'Audited 2', forceMfa: true } });
      const clone = await app.api('POST', `/roles/${id}/clone`, { token: w.tokens.orgAdmin, body: { name: 'Copy' } });
      await app.api('DELETE', `/roles/${clone.body.id}`, { token: w.tokens.orgAdmin });
      const db = app.server.keel.db;
      const forRole = await db.select().from(auditLogs).where(eq(auditLogs.targetId, id));
      expect(forRole.map((e) => e.action).sort()).toEqual(['role.create', 'role.update']);
      const update = forRole.find((e) => e.action === 'role.update');
      expect(update).toMatchObject({ actorType: 'user', actorId: w.orgAdmin.id, orgId: w.orgId, changes: ['name', 'forceMfa'] });
      const forClone = await db.select().from(auditLogs).where(and(eq(auditLogs.targetId, clone.body.id)));
      expect(forClone.map((e) => e.action).sort()).toEqual(['role.clone', 'role.delete']);
      expect(forClone.find((e) => e.action === 'role.clone')?.details).toMatchObject({ sourceRoleId: id });
    });
  });
});
