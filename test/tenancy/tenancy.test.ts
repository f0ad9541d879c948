import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { organizationUsers, partnerUsers, roles } from '../../src/modules/access/schema.js';
import { organizations } from '../../src/modules/tenancy/schema.js';
import { effectiveSecurity } from '../../src/modules/tenancy/service.js';
import { createWorld, insertRole, orgUserWithRole, partnerUserWithRole, ROLE, type World } from '../access/helpers.js';

const NOWHERE = '00000000-0000-7000-8000-0000000000ff';

describe.skipIf(!backendAvailable())(`tenancy API (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const audited = async (targetId: string) =>
    (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, targetId))).map((a) => a.action).sort();

  describe('partners', () => {
    it('platform admins list and create partners; nobody else can', async () => {
      const created = await app.api('POST', '/partners', { token: w.tokens.platformAdmin, body: { name: 'Acme MSP', settings: { security: { requireMfa: true } } } });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({ name: 'Acme MSP', settings: { security: { requireMfa: true } } });
      const list = await app.api('GET', '/partners?limit=100', { token: w.tokens.platformAdmin });
      expect(list.status).toBe(200);
      expect(list.body.data.map((p: any) => p.id)).toEqual(expect.arrayContaining([created.body.id, w.partnerId]));
      expect(list.body.pagination).toMatchObject({ page: 1, limit: 100 });
      for (const token of [w.tokens.partnerFull, w.tokens.orgAdmin]) {
        expect((await app.api('GET', '/partners', { token })).status).toBe(403);
        expect((await app.api('POST', '/partners', { token, body: { name: 'x' } })).status).toBe(403);
      }
      expect(await audited(created.body.id)).toEqual(['partner.create']);
    });

    it('partner users read and change their own partner only', async () => {
      const own = await app.api('GET', `/partners/${w.partnerId}`, { token: w.tokens.partnerFull });
      expect(own.status).toBe(200);
      expect(own.body.id).toBe(w.partnerId);
      const other = await app.api('POST', '/partners', { token: w.tokens.platformAdmin, body: { name: 'Other' } });
      expect((await app.api('GET', `/partners/${other.body.id}`, { token: w.tokens.partnerFull })).status).toBe(404);
      expect((await app.api('GET', `/partners/${w.partnerId}`, { token: w.tokens.orgAdmin })).status).toBe(404);
      const patch = await app.api('PATCH', `/partners/${w.partnerId}`, {
        token: w.tokens.partnerFull, body: { settings: { security: { allowedMfaMethods: { sms: false } } } },
      });
      expect(patch.status).toBe(200);
      expect(patch.body.settings).toEqual({ security: { allowedMfaMethods: { sms: false } } });
      expect((await app.api('PATCH', `/partners/${other.body.id}`, { token: w.tokens.partnerFull, body: { name: 'mine' } })).status).toBe(404);
      // Technicians lack organizations:write.
      expect((await app.api('PATCH', `/partners/${w.partnerId}`, { token: w.tokens.partnerTechnician, body: { name: 'x' } })).status).toBe(403);
    });
  });

  describe('organisations', () => {
    it('create, read, patch settings.security (merged and validated) and audit', async () => {
      const created = await app.api('POST', '/orgs', { token: w.tokens.partnerFull, body: { name: 'Org C' } });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({ name: 'Org C', partnerId: w.partnerId, settings: {} });
      const id = created.body.id;
      const p1 = await app.api('PATCH', `/orgs/${id}`, { token: w.tokens.partnerFull, body: { settings: { security: { requireMfa: true } } } });
      expect(p1.status).toBe(200);
      const p2 = await app.api('PATCH', `/orgs/${id}`, {
        token: w.tokens.partnerFull, body: { name: 'Org C2', settings: { security: { allowedMfaMethods: { passkey: false } } } },
      });
      expect(p2.body).toMatchObject({ name: 'Org C2', settings: { security: { requireMfa: true, allowedMfaMethods: { passkey: false } } } });
      const bad = await app.api('PATCH', `/orgs/${id}`, { token: w.tokens.partnerFull, body: { settings: { security: { requireMfa: 'yes' } } } });
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe('validation_failed');
      const unknown = await app.api('PATCH', `/orgs/${id}`, { token: w.tokens.partnerFull, body: { settings: { colour: 'red' } } });
      expect(unknown.status).toBe(400);
      const get = await app.api('GET', `/orgs/${id}`, { token: w.tokens.partnerFull });
      expect(get.body.settings).toEqual({ security: { requireMfa: true, allowedMfaMethods: { passkey: false } } });
      expect(await audited(id)).toEqual(['organization.create', 'organization.update', 'organization.update']);
    });

    it('the stricter of organisation and partner security settings wins', async () => {
      const org = (await app.api('POST', '/orgs', { token: w.tokens.partnerFull, body: { name: 'Strict' } })).body.id;
      await app.api('PATCH', `/partners/${w.partnerId}`, { token: w.tokens.partnerFull, body: { settings: { security: { requireMfa: false, allowedMfaMethods: { sms: false } } } } });
      await app.api('PATCH', `/orgs/${org}`, { token: w.tokens.partnerFull, body: { settings: { security: { requireMfa: true, allowedMfaMethods: { sms: true, totp: true } } } } });
      const policy = await effectiveSecurity(app.server.keel.db, { orgId: org });
      expect(policy).toEqual({ requireMfa: true, allowedMfaMethods: { totp: true, sms: false, passkey: true } });
    });

    it('organisation users see and change only their own organisation', async () => {
      const list = await app.api('GET', '/orgs', { token: w.tokens.orgAdmin });
      expect(list.body.data.map((o: any) => o.id)).toEqual([w.orgId]);
      expect((await app.api('GET', `/orgs/${w.otherOrgId}`, { token: w.tokens.orgAdmin })).status).toBe(404);
      expect((await app.api('PATCH', `/orgs/${w.otherOrgId}`, { token: w.tokens.orgAdmin, body: { name: 'x' } })).status).toBe(404);
      expect((await app.api('POST', '/orgs', { token: w.tokens.orgAdmin, body: { name: 'x' } })).status).toBe(403);
      expect((await app.api('DELETE', `/orgs/${w.orgId}`, { token: w.tokens.orgAdmin })).status).toBe(403);
      expect((await app.api('PATCH', `/orgs/${w.orgId}`, { token: w.tokens.orgReadOnly, body: { name: 'x' } })).status).toBe(403);
    });

    it('system callers must name the partner of an organisation: without one, or with a misspelled ?partnerid=, 400 naming partnerId and nothing created', async () => {
      const before = (await app.api('GET', '/orgs?limit=100', { token: w.tokens.platformAdmin })).body.total as number;
      const none = await app.api('POST', '/orgs', { token: w.tokens.platformAdmin, body: { name: 'Solo' } });
      expect(none.status).toBe(400);
      expect(none.body).toMatchObject({ code: 'validation_failed', details: { fields: [{ path: 'partnerId', message: expect.stringMatching(/^is required/) }] } });
      const misspelled = await app.api('POST', `/orgs?partnerid=${w.partnerId}`, { token: w.tokens.platformAdmin, body: { name: 'Solo' } });
      expect(misspelled.status).toBe(400);
      expect(misspelled.body.details.fields).toEqual([{ path: 'query.partnerid', message: 'is not a known field' }]);
      expect((await app.api('GET', '/orgs?limit=100', { token: w.tokens.platformAdmin })).body.total).toBe(before);
      const byQuery = await app.api('POST', `/orgs?partnerId=${w.partnerId}`, { token: w.tokens.platformAdmin, body: { name: 'By query' } });
      expect(byQuery.status).toBe(201);
      expect(byQuery.body.partnerId).toBe(w.partnerId);
    });

    it('system callers create organisations under a named partner', async () => {
      const under = await app.api('POST', '/orgs', { token: w.tokens.platformAdmin, body: { name: 'Under', partnerId: w.partnerId } });
      expect(under.body.partnerId).toBe(w.partnerId);
      expect((await app.api('POST', '/orgs', { token: w.tokens.platformAdmin, body: { name: 'x', partnerId: NOWHERE } })).status).toBe(404);
      const filtered = await app.api('GET', `/orgs?partnerId=${w.partnerId}&limit=100`, { token: w.tokens.platformAdmin });
      expect(filtered.status).toBe(200);
      const ids = filtered.body.data.map((o: any) => o.id);
      // Non-empty and the right ones: the partner's organisations, the new one included.
      expect(ids).toEqual(expect.arrayContaining([w.orgId, w.otherOrgId, under.body.id]));
      expect(filtered.body.data.every((o: any) => o.partnerId === w.partnerId)).toBe(true);
    });

    it('delete removes the organisation, its roles and memberships (accounts stay)', async () => {
      const org = (await app.api('POST', '/orgs', { token: w.tokens.partnerFull, body: { name: 'Doomed' } })).body.id;
      const role = await insertRole(app, { scope: 'organization', orgId: org, perms: ['devices:read'] });
      const child = await insertRole(app, { scope: 'organization', orgId: org, perms: [], parentRoleId: role });
      const member = await orgUserWithRole(app, org, child);
      await app.api('POST', `/orgs/${org}/sites`, { token: w.tokens.partnerFull, body: { name: 'S' } });
      const sel = await partnerUserWithRole(app, w.partnerId, ROLE.partnerReadOnly, 'selected', [org, w.orgId]);
      const res = await app.api('DELETE', `/orgs/${org}`, { token: w.tokens.partnerFull });
      expect(res.status).toBe(204);
      const db = app.server.keel.db;
      expect(await db.select().from(organizations).where(eq(organizations.id, org))).toHaveLength(0);
      expect(await db.select().from(roles).where(eq(roles.orgId, org))).toHaveLength(0);
      expect(await db.select().from(organizationUsers).where(eq(organizationUsers.userId, member.user.id))).toHaveLength(0);
      const [pu] = await db.select().from(partnerUsers).where(eq(partnerUsers.userId, sel.user.id));
      expect(pu!.orgIds).toEqual([w.orgId]);
      expect(await audited(org)).toContain('organization.delete');
      // The former member has no association any more.
      expect((await app.api('GET', '/orgs', { token: member.token })).body.code).toBe('context_required');
    });
  });

  describe('partner users with selected organisation access', () => {
    it('reach only the selected organisations and cannot administer users or roles', async () => {
      const { token } = await partnerUserWithRole(app, w.partnerId, ROLE.partnerTechnician, 'selected', [w.orgId]);
      const list = await app.api('GET', '/orgs', { token });
      expect(list.body.data.map((o: any) => o.id)).toEqual([w.orgId]);
      expect((await app.api('GET', `/orgs/${w.orgId}`, { token })).status).toBe(200);
      expect((await app.api('GET', `/orgs/${w.otherOrgId}`, { token })).status).toBe(404);
      expect((await app.api('GET', `/orgs/${w.orgId}/sites`, { token })).status).toBe(200);
      expect((await app.api('GET', `/orgs/${w.otherOrgId}/sites`, { token })).status).toBe(404);
      expect((await app.api('GET', `/orgs/${w.otherOrgId}/device-groups`, { token })).status).toBe(404);

      const adminRole = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, perms: ['*:*'] });
      const admin = await partnerUserWithRole(app, w.partnerId, adminRole, 'selected', [w.orgId]);
      const roleWrite = await app.api('POST', '/roles', { token: admin.token, body: { name: 'x', orgId: w.orgId } });
      expect(roleWrite.status).toBe(403);
      expect(roleWrite.body).toEqual({ error: 'Full partner organization access is required', code: 'full_org_access_required' });
      expect((await app.api('POST', '/orgs', { token: admin.token, body: { name: 'x' } })).body.code).toBe('full_org_access_required');
      // Inviting into the selected organisation is user administration: refused the same way.
      const invite = await app.api('POST', `/users/invite?orgId=${w.orgId}`, {
        token: admin.token, body: { email: 'new@example.com', name: 'New', roleId: ROLE.orgReadOnly },
      });
      expect(invite.status).toBe(403);
      expect(invite.body).toEqual({ error: 'Full partner organization access is required', code: 'full_org_access_required' });
    });

    it('with orgAccess none reach no organisation', async () => {
      const { token } = await partnerUserWithRole(app, w.partnerId, ROLE.partnerReadOnly, 'none');
      expect((await app.api('GET', '/orgs', { token })).body.data).toEqual([]);
      expect((await app.api('GET', `/orgs/${w.orgId}`, { token })).status).toBe(404);
    });

    it('partners never reach another partner’s organisations', async () => {
      const other = await app.api('POST', '/partners', { token: w.tokens.platformAdmin, body: { name: 'Rival' } });
      const theirs = await app.api('POST', '/orgs', { token: w.tokens.platformAdmin, body: { name: 'Rival org', partnerId: other.body.id } });
      expect((await app.api('GET', `/orgs/${theirs.body.id}`, { token: w.tokens.partnerFull })).status).toBe(404);
      expect((await app.api('GET', `/orgs/${theirs.body.id}/sites`, { token: w.tokens.partnerFull })).status).toBe(404);
      expect((await app.api('GET', `/roles?orgId=${theirs.body.id}`, { token: w.tokens.partnerFull })).status).toBe(404);
      expect((await app.api('GET', `/roles?partnerId=${other.body.id}`, { token: w.tokens.partnerFull })).status).toBe(404);
    });
  });

  describe('sites and device groups', () => {
    it('CRUD with permissions, audit and the pagination shape', async () => {
      const site = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'HQ' } });
      expect(site.status).toBe(201);
      expect(site.body).toMatchObject({ orgId: w.orgId, name: 'HQ' });
      const group = await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgTechnician, body: { name: 'Laptops', siteId: site.body.id } });
      expect(group.status).toBe(201);
      expect(group.body).toMatchObject({ orgId: w.orgId, siteId: site.body.id, name: 'Laptops' });
      const sites = await app.api('GET', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgReadOnly });
      expect(sites.body.pagination).toEqual({ page: 1, limit: 50, total: sites.body.data.length });
      expect(sites.body.data.map((s: any) => s.id)).toContain(site.body.id);
      expect((await app.api('GET', `/orgs/${w.orgId}/sites?limit=101`, { token: w.tokens.orgReadOnly })).status).toBe(400);

      // Technicians have sites:read only, devices:write but not devices:delete.
      expect((await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgTechnician, body: { name: 'no' } })).status).toBe(403);
      expect((await app.api('DELETE', `/device-groups/${group.body.id}`, { token: w.tokens.orgTechnician })).status).toBe(403);

      const renamed = await app.api('PATCH', `/sites/${site.body.id}`, { token: w.tokens.orgAdmin, body: { name: 'Head office' } });
      expect(renamed.body.name).toBe('Head office');
      const moved = await app.api('PATCH', `/device-groups/${group.body.id}`, { token: w.tokens.orgAdmin, body: { siteId: null, name: 'All laptops' } });
      expect(moved.body).toMatchObject({ siteId: null, name: 'All laptops' });
      expect((await app.api('DELETE', `/device-groups/${group.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
      expect((await app.api('DELETE', `/sites/${site.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(204);
      expect((await app.api('PATCH', `/sites/${site.body.id}`, { token: w.tokens.orgAdmin, body: { name: 'gone' } })).status).toBe(404);
      expect(await audited(site.body.id)).toEqual(['site.create', 'site.delete', 'site.update']);
      expect(await audited(group.body.id)).toEqual(['device_group.create', 'device_group.delete', 'device_group.update']);
    });

    it('a group’s site must belong to the same organisation', async () => {
      const foreignSite = await app.api('POST', `/orgs/${w.otherOrgId}/sites`, { token: w.tokens.partnerFull, body: { name: 'B site' } });
      const res = await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'x', siteId: foreignSite.body.id } });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('invalid_site');
    });

    it('an organisation user of org A gets 404 for org B’s sites and groups', async () => {
      const bSite = await app.api('POST', `/orgs/${w.otherOrgId}/sites`, { token: w.tokens.partnerFull, body: { name: 'B' } });
      const bGroup = await app.api('POST', `/orgs/${w.otherOrgId}/device-groups`, { token: w.tokens.partnerFull, body: { name: 'B' } });
      expect(bSite.status).toBe(201);
      expect(bGroup.status).toBe(201);
      const t = w.tokens.orgAdmin;
      expect((await app.api('GET', `/orgs/${w.otherOrgId}/sites`, { token: t })).status).toBe(404);
      expect((await app.api('POST', `/orgs/${w.otherOrgId}/sites`, { token: t, body: { name: 'x' } })).status).toBe(404);
      expect((await app.api('PATCH', `/sites/${bSite.body.id}`, { token: t, body: { name: 'x' } })).status).toBe(404);
      expect((await app.api('DELETE', `/sites/${bSite.body.id}`, { token: t })).status).toBe(404);
      expect((await app.api('GET', `/orgs/${w.otherOrgId}/device-groups`, { token: t })).status).toBe(404);
      expect((await app.api('PATCH', `/device-groups/${bGroup.body.id}`, { token: t, body: { name: 'x' } })).status).toBe(404);
      expect((await app.api('DELETE', `/device-groups/${bGroup.body.id}`, { token: t })).status).toBe(404);
      expect((await app.api('GET', `/orgs/not-a-uuid/sites`, { token: t })).status).toBe(404);
    });

    it('site and group restrictions filter what a member sees', async () => {
      const s1 = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'R1' } })).body.id;
      const s2 = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name: 'R2' } })).body.id;
      const g1 = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'G1', siteId: s1 } })).body.id;
      const g2 = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'G2', siteId: s2 } })).body.id;
      const { token } = await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { siteIds: [s1] });
      const sites = await app.api('GET', `/orgs/${w.orgId}/sites?limit=100`, { token });
      expect(sites.body.data.map((s: any) => s.id)).toEqual([s1]);
      const groups = await app.api('GET', `/orgs/${w.orgId}/device-groups?limit=100`, { token });
      const ids = groups.body.data.map((g: any) => g.id);
      expect(ids).toContain(g1);
      expect(ids).not.toContain(g2);
      // Writing groups (any of them) needs whole-organisation access.
      const write = await app.api('PATCH', `/device-groups/${g2}`, { token, body: { name: 'x' } });
      expect([write.status, write.body.code]).toEqual([403, 'whole_org_access_required']);
      const grouped = await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { deviceGroupIds: [g2] });
      const only = await app.api('GET', `/orgs/${w.orgId}/device-groups?limit=100`, { token: grouped.token });
      expect(only.body.data.map((g: any) => g.id)).toEqual([g2]);
    });
  });
});
