/**
 * docs/security.md "Findings", 11, and full organisation access on reads too: partner users whose `orgAccess` is `selected` or `none` get 403
 * `full_org_access_required` on every users and roles route (reads included) and on every
 * partner-wide write, decided in one place (the guard's `fullOrgAccess`). The users and roles routes
 * are taken from the app's own route table, so a route added later is covered without editing this
 * file; every tenancy route of the table must be classified below.
 */
import { randomUUID } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type ApiResponse, type TestApp } from '../helpers/app.js';
import { buildApp } from '../../src/app.js';
import { organizations } from '../../src/modules/tenancy/schema.js';
import { createWorld, insertRole, partnerUserWithRole, ROLE, type World } from '../access/helpers.js';

const API = '/api/v1';
const FULL_ORG = { error: 'Full partner organization access is required', code: 'full_org_access_required' };

function routesOf(app: TestApp, keep: (path: string) => boolean): { method: string; path: string }[] {
  const seen = new Set<string>();
  const out: { method: string; path: string }[] = [];
  for (const r of buildApp(app.server.keel).routes) {
    if (r.method === 'ALL' || !r.path.startsWith(API)) continue;
    const path = r.path.slice(API.length);
    const key = `${r.method} ${path}`;
    if (!keep(path) || seen.has(key)) continue;
    seen.add(key);
    out.push({ method: r.method, path });
  }
  return out;
}

/** Every users and roles route: `/users…` (but not the caller's own `/users/me…`) and `/roles…`. */
const isUsersOrRoles = (p: string) => (p === '/users' || p.startsWith('/users/') || p === '/roles' || p.startsWith('/roles/')) && p !== '/users/me' && !p.startsWith('/users/me/');
const isTenancy = (p: string) => ['/partners', '/orgs', '/sites', '/device-groups'].some((root) => p === root || p.startsWith(`${root}/`));

const hasBody = (method: string) => method === 'POST' || method === 'PATCH' || method === 'PUT';

describe.skipIf(!backendAvailable())(`full partner organisation access (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let selected: string;
  let none: string;
  let all: string;
  let adminRole: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    // The strongest partner role there is (`*:*`, no Force MFA): only orgAccess can refuse them.
    adminRole = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, name: 'Admins', perms: ['*:*'] });
    selected = (await partnerUserWithRole(app, w.partnerId, adminRole, 'selected', [w.orgId])).token;
    none = (await partnerUserWithRole(app, w.partnerId, adminRole, 'none')).token;
    all = (await partnerUserWithRole(app, w.partnerId, adminRole, 'all')).token;
  });
  afterAll(async () => app?.close());

  const call = (token: string, method: string, path: string, body: unknown = {}): Promise<ApiResponse> =>
    app.api(method, path, { token, ...(hasBody(method) ? { body } : {}) });

  it('every users and roles route of the route table answers 403 full_org_access_required to selected and none partner users, reads included', async () => {
    const routes = routesOf(app, isUsersOrRoles);
    const keys = routes.map((r) => `${r.method} ${r.path}`);
    // The table is the one the app serves: the user and role routes of docs/specification.md are all in it.
    expect(keys).toEqual(expect.arrayContaining([
      'GET /users', 'GET /users/:id', 'POST /users/invite', 'POST /users/resend-invite', 'PATCH /users/:id', 'DELETE /users/:id',
      'POST /users/:id/role', 'GET /users/roles', 'GET /roles', 'POST /roles', 'GET /roles/permissions/available', 'GET /roles/:id',
      'PATCH /roles/:id', 'DELETE /roles/:id', 'POST /roles/:id/clone', 'GET /roles/:id/users', 'GET /roles/:id/effective-permissions',
    ]));
    for (const { method, path } of routes) {
      // Real ids where there are some: a member of the selected organisation, a role it holds.
      const concrete = path
        .replace(/^\/users\/:id/, `/users/${w.orgTechnician.id}`)
        .replace(/^\/roles\/:id/, `/roles/${ROLE.orgTechnician}`)
        .replace(/:[A-Za-z]+/g, () => randomUUID());
      for (const [who, token] of [['selected', selected], ['none', none]] as const) {
        const res = await call(token, method, concrete);
        expect({ status: res.status, body: res.body }, `${who}: ${method} ${path}`).toEqual({ status: 403, body: FULL_ORG });
      }
    }
    // The same role with orgAccess all reads them (the 403 is the orgAccess, nothing else).
    for (const path of ['/users', `/users/${w.orgTechnician.id}`, '/users/roles', '/roles', `/roles/${ROLE.orgTechnician}/users`, `/roles/${ROLE.orgTechnician}/effective-permissions`]) {
      expect((await call(all, 'GET', path)).status, path).toBe(200);
    }
  });

  it('an API key of a selected partner user is refused the same way', async () => {
    const key = await app.api('POST', '/api-keys', { token: selected, body: { name: 'reader', permissions: [{ resource: 'users', action: 'read' }] } });
    expect(key.status).toBe(201);
    for (const path of ['/users', '/roles']) {
      const res = await app.api('GET', path, { token: key.body.key });
      expect({ status: res.status, body: res.body }, path).toEqual({ status: 403, body: FULL_ORG });
    }
  });

  it('partner-level SSO providers (docs/decisions.md "Partner-level SSO") are partner-wide: selected and none partner users get 403 full_org_access_required', async () => {
    const rows: [string, string, unknown?][] = [
      ['GET', `/sso/providers?partnerId=${w.partnerId}`],
      ['POST', '/sso/providers', { partnerId: w.partnerId, name: 'MSP IdP', type: 'oidc' }],
      ['PATCH', `/sso/providers/${randomUUID()}`, { name: 'x' }],
      ['POST', `/sso/providers/${randomUUID()}/status`, { status: 'active' }],
      ['DELETE', `/sso/providers/${randomUUID()}`],
    ];
    for (const [method, path, body] of rows) {
      for (const [who, token] of [['selected', selected], ['none', none]] as const) {
        const res = await call(token, method, path, body);
        expect({ status: res.status, body: res.body }, `${who}: ${method} ${path}`).toEqual({ status: 403, body: FULL_ORG });
      }
    }
    // With orgAccess all the same role lists them (the 403 is the orgAccess, nothing else).
    expect((await call(all, 'GET', `/sso/providers?partnerId=${w.partnerId}`)).status).toBe(200);
  });

  describe('every tenancy route', () => {
    type Expect = { selected: number | 'full'; none: number | 'full' };
    let siteA: string;
    let siteB: string;
    let groupA: string;
    let groupB: string;
    beforeAll(async () => {
      const site = async (orgId: string) => (await app.api('POST', `/orgs/${orgId}/sites`, { token: w.tokens.partnerFull, body: { name: 'Site' } })).body.id as string;
      const group = async (orgId: string) => (await app.api('POST', `/orgs/${orgId}/device-groups`, { token: w.tokens.partnerFull, body: { name: 'Group' } })).body.id as string;
      siteA = await site(w.orgId);
      siteB = await site(w.otherOrgId);
      groupA = await group(w.orgId);
      groupB = await group(w.otherOrgId);
    });

    /**
     * Each route, what a selected user (orgIds: [A]) and a none user get. `full`: 403
     * full_org_access_required (partner-wide writes, even on the selected organisation). Organisation
     * routes: the selected organisation works for the selected user; B (not selected) and every
     * organisation for the none user are 404, as if they did not exist.
     */
    const table = (): { method: string; route: string; path: string; body?: unknown; expect: Expect }[] => [
      { method: 'GET', route: '/partners', path: '/partners', expect: { selected: 403, none: 403 } },
      { method: 'POST', route: '/partners', path: '/partners', body: { name: 'x' }, expect: { selected: 403, none: 403 } },
      { method: 'GET', route: '/partners/:id', path: `/partners/${w.partnerId}`, expect: { selected: 200, none: 200 } },
      { method: 'PATCH', route: '/partners/:id', path: `/partners/${w.partnerId}`, body: { settings: { security: { requireMfa: false } } }, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/orgs', path: '/orgs', expect: { selected: 200, none: 200 } },
      { method: 'POST', route: '/orgs', path: '/orgs', body: { name: 'Mine now' }, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/orgs/:id', path: `/orgs/${w.orgId}`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:id', path: `/orgs/${w.otherOrgId}`, expect: { selected: 404, none: 404 } },
      { method: 'PATCH', route: '/orgs/:id', path: `/orgs/${w.orgId}`, body: { name: 'Org A' }, expect: { selected: 200, none: 404 } },
      { method: 'PATCH', route: '/orgs/:id', path: `/orgs/${w.otherOrgId}`, body: { name: 'Org B' }, expect: { selected: 404, none: 404 } },
      { method: 'DELETE', route: '/orgs/:id', path: `/orgs/${w.orgId}`, expect: { selected: 'full', none: 'full' } },
      { method: 'DELETE', route: '/orgs/:id', path: `/orgs/${w.otherOrgId}`, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/orgs/:orgId/sites', path: `/orgs/${w.orgId}/sites`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/sites', path: `/orgs/${w.otherOrgId}/sites`, expect: { selected: 404, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/sites', path: `/orgs/${w.orgId}/sites`, body: { name: 'S' }, expect: { selected: 201, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/sites', path: `/orgs/${w.otherOrgId}/sites`, body: { name: 'S' }, expect: { selected: 404, none: 404 } },
      { method: 'PATCH', route: '/sites/:id', path: `/sites/${siteA}`, body: { name: 'S2' }, expect: { selected: 200, none: 404 } },
      { method: 'PATCH', route: '/sites/:id', path: `/sites/${siteB}`, body: { name: 'S2' }, expect: { selected: 404, none: 404 } },
      { method: 'DELETE', route: '/sites/:id', path: `/sites/${siteB}`, expect: { selected: 404, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/device-groups', path: `/orgs/${w.orgId}/device-groups`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/device-groups', path: `/orgs/${w.otherOrgId}/device-groups`, expect: { selected: 404, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/device-groups', path: `/orgs/${w.orgId}/device-groups`, body: { name: 'G' }, expect: { selected: 201, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/device-groups', path: `/orgs/${w.otherOrgId}/device-groups`, body: { name: 'G' }, expect: { selected: 404, none: 404 } },
      { method: 'PATCH', route: '/device-groups/:id', path: `/device-groups/${groupA}`, body: { name: 'G2' }, expect: { selected: 200, none: 404 } },
      { method: 'PATCH', route: '/device-groups/:id', path: `/device-groups/${groupB}`, body: { name: 'G2' }, expect: { selected: 404, none: 404 } },
      { method: 'DELETE', route: '/device-groups/:id', path: `/device-groups/${groupB}`, expect: { selected: 404, none: 404 } },
      // Agents: enrolment keys and update settings of an organisation; the partner's settings are partner-wide.
      { method: 'GET', route: '/orgs/:orgId/enrollment-keys', path: `/orgs/${w.orgId}/enrollment-keys`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/enrollment-keys', path: `/orgs/${w.otherOrgId}/enrollment-keys`, expect: { selected: 404, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/enrollment-keys', path: `/orgs/${w.orgId}/enrollment-keys`, body: {}, expect: { selected: 201, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/enrollment-keys', path: `/orgs/${w.otherOrgId}/enrollment-keys`, body: {}, expect: { selected: 404, none: 404 } },
      { method: 'DELETE', route: '/orgs/:orgId/enrollment-keys/:id', path: `/orgs/${w.otherOrgId}/enrollment-keys/${randomUUID()}`, expect: { selected: 404, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/agent-update-settings', path: `/orgs/${w.orgId}/agent-update-settings`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/agent-update-settings', path: `/orgs/${w.otherOrgId}/agent-update-settings`, expect: { selected: 404, none: 404 } },
      { method: 'PUT', route: '/orgs/:orgId/agent-update-settings', path: `/orgs/${w.orgId}/agent-update-settings`, body: { maintenanceWindow: null }, expect: { selected: 200, none: 404 } },
      { method: 'PUT', route: '/orgs/:orgId/agent-update-settings', path: `/orgs/${w.otherOrgId}/agent-update-settings`, body: { maintenanceWindow: null }, expect: { selected: 404, none: 404 } },
      { method: 'GET', route: '/partners/:partnerId/agent-update-settings', path: `/partners/${w.partnerId}/agent-update-settings`, expect: { selected: 200, none: 200 } },
      { method: 'PUT', route: '/partners/:partnerId/agent-update-settings', path: `/partners/${w.partnerId}/agent-update-settings`, body: { maintenanceWindow: null }, expect: { selected: 'full', none: 'full' } },
      // Verified domains: reads like the organisation's (and the partner's); every write is partner-wide (it decides
      // whose addresses an SSO provider may sign in), so selected and none users get full_org_access_required.
      { method: 'GET', route: '/orgs/:orgId/domains', path: `/orgs/${w.orgId}/domains`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/orgs/:orgId/domains', path: `/orgs/${w.otherOrgId}/domains`, expect: { selected: 404, none: 404 } },
      { method: 'POST', route: '/orgs/:orgId/domains', path: `/orgs/${w.orgId}/domains`, body: { domain: 'selected.example' }, expect: { selected: 'full', none: 'full' } },
      { method: 'POST', route: '/orgs/:orgId/domains/:id/verify', path: `/orgs/${w.orgId}/domains/${randomUUID()}/verify`, expect: { selected: 'full', none: 'full' } },
      { method: 'DELETE', route: '/orgs/:orgId/domains/:id', path: `/orgs/${w.orgId}/domains/${randomUUID()}`, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/partners/:partnerId/domains', path: `/partners/${w.partnerId}/domains`, expect: { selected: 200, none: 200 } },
      { method: 'POST', route: '/partners/:partnerId/domains', path: `/partners/${w.partnerId}/domains`, body: { domain: 'partner.example' }, expect: { selected: 'full', none: 'full' } },
      { method: 'POST', route: '/partners/:partnerId/domains/:id/verify', path: `/partners/${w.partnerId}/domains/${randomUUID()}/verify`, expect: { selected: 'full', none: 'full' } },
      { method: 'DELETE', route: '/partners/:partnerId/domains/:id', path: `/partners/${w.partnerId}/domains/${randomUUID()}`, expect: { selected: 'full', none: 'full' } },
      // A partner is deleted by platform administrators only (partner users: 403, their own partner included).
      { method: 'DELETE', route: '/partners/:id', path: `/partners/${w.partnerId}`, expect: { selected: 403, none: 403 } },
      // SCIM tokens and settings decide who a directory may create and disable: whole-partner access only.
      { method: 'GET', route: '/orgs/:orgId/scim-tokens', path: `/orgs/${w.orgId}/scim-tokens`, expect: { selected: 'full', none: 'full' } },
      { method: 'POST', route: '/orgs/:orgId/scim-tokens', path: `/orgs/${w.orgId}/scim-tokens`, body: { name: 'Entra' }, expect: { selected: 'full', none: 'full' } },
      { method: 'DELETE', route: '/orgs/:orgId/scim-tokens/:id', path: `/orgs/${w.orgId}/scim-tokens/${randomUUID()}`, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/orgs/:orgId/scim-users', path: `/orgs/${w.orgId}/scim-users`, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/orgs/:orgId/scim-settings', path: `/orgs/${w.orgId}/scim-settings`, expect: { selected: 'full', none: 'full' } },
      { method: 'PUT', route: '/orgs/:orgId/scim-settings', path: `/orgs/${w.orgId}/scim-settings`, body: { defaultRoleId: ROLE.orgReadOnly, groupRoleMappings: [] }, expect: { selected: 'full', none: 'full' } },
      // Update pins of a site or a device group: like the organisation's settings, within the organisations a user reaches.
      { method: 'GET', route: '/sites/:id/agent-update-settings', path: `/sites/${siteA}/agent-update-settings`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/sites/:id/agent-update-settings', path: `/sites/${siteB}/agent-update-settings`, expect: { selected: 404, none: 404 } },
      { method: 'PUT', route: '/sites/:id/agent-update-settings', path: `/sites/${siteA}/agent-update-settings`, body: { pinnedVersions: null }, expect: { selected: 200, none: 404 } },
      { method: 'PUT', route: '/sites/:id/agent-update-settings', path: `/sites/${siteB}/agent-update-settings`, body: { pinnedVersions: null }, expect: { selected: 404, none: 404 } },
      { method: 'GET', route: '/device-groups/:id/agent-update-settings', path: `/device-groups/${groupA}/agent-update-settings`, expect: { selected: 200, none: 404 } },
      { method: 'GET', route: '/device-groups/:id/agent-update-settings', path: `/device-groups/${groupB}/agent-update-settings`, expect: { selected: 404, none: 404 } },
      { method: 'PUT', route: '/device-groups/:id/agent-update-settings', path: `/device-groups/${groupA}/agent-update-settings`, body: { pinnedVersions: null }, expect: { selected: 200, none: 404 } },
      { method: 'PUT', route: '/device-groups/:id/agent-update-settings', path: `/device-groups/${groupB}/agent-update-settings`, body: { pinnedVersions: null }, expect: { selected: 404, none: 404 } },
      // Audit streams send every entry of the partner: whole-partner access only.
      { method: 'GET', route: '/partners/:partnerId/audit-streams', path: `/partners/${w.partnerId}/audit-streams`, expect: { selected: 'full', none: 'full' } },
      { method: 'POST', route: '/partners/:partnerId/audit-streams', path: `/partners/${w.partnerId}/audit-streams`, body: { type: 'syslog', url: 'syslog+tls://siem.example.com:6514' }, expect: { selected: 'full', none: 'full' } },
      { method: 'GET', route: '/partners/:partnerId/audit-streams/:id', path: `/partners/${w.partnerId}/audit-streams/${randomUUID()}`, expect: { selected: 'full', none: 'full' } },
      { method: 'PATCH', route: '/partners/:partnerId/audit-streams/:id', path: `/partners/${w.partnerId}/audit-streams/${randomUUID()}`, body: { url: 'syslog+tls://siem.example.com:6514' }, expect: { selected: 'full', none: 'full' } },
      { method: 'DELETE', route: '/partners/:partnerId/audit-streams/:id', path: `/partners/${w.partnerId}/audit-streams/${randomUUID()}`, expect: { selected: 'full', none: 'full' } },
      // Last: deletes that succeed for the selected user in its own organisation.
      { method: 'DELETE', route: '/sites/:id', path: `/sites/${siteA}`, expect: { selected: 204, none: 404 } },
      { method: 'DELETE', route: '/device-groups/:id', path: `/device-groups/${groupA}`, expect: { selected: 204, none: 404 } },
    ];

    it('each answers selected and none partner users as the table says; partner-wide writes are 403 full_org_access_required', async () => {
      const rows = table();
      // Every tenancy route the app serves is in the table (a new one must be classified here).
      const served = routesOf(app, isTenancy).map((r) => `${r.method} ${r.path}`).sort();
      expect(served.length).toBeGreaterThanOrEqual(17);
      expect([...new Set(rows.map((r) => `${r.method} ${r.route}`))].sort()).toEqual(served);

      for (const row of rows) {
        // none first: its 404s must not depend on what the selected user did.
        for (const who of ['none', 'selected'] as const) {
          const res = await call(who === 'selected' ? selected : none, row.method, row.path, row.body);
          const want = row.expect[who];
          const label = `${who}: ${row.method} ${row.path}`;
          if (want === 'full') expect({ status: res.status, body: res.body }, label).toEqual({ status: 403, body: FULL_ORG });
          else expect(res.status, `${label} ${JSON.stringify(res.body)}`).toBe(want);
        }
      }
      // Both organisations survived the delete attempts.
      const db = app.server.keel.db;
      for (const id of [w.orgId, w.otherOrgId]) expect(await db.select().from(organizations).where(eq(organizations.id, id)), id).toHaveLength(1);
    });

    it('lists only what orgAccess reaches', async () => {
      const sel = await app.api('GET', '/orgs?limit=100', { token: selected });
      expect(sel.body.data.map((o: { id: string }) => o.id)).toEqual([w.orgId]);
      expect((await app.api('GET', '/orgs?limit=100', { token: none })).body).toMatchObject({ data: [], pagination: { total: 0 } });
      const full = await app.api('GET', '/orgs?limit=100', { token: all });
      expect(full.body.data.map((o: { id: string }) => o.id).sort()).toEqual([w.orgId, w.otherOrgId].sort());
    });

    it('the partner user with orgAccess all does each partner-wide write', async () => {
      expect((await app.api('PATCH', `/partners/${w.partnerId}`, { token: all, body: { name: 'Renamed partner' } })).status).toBe(200);
      const created = await app.api('POST', '/orgs', { token: all, body: { name: 'Org C' } });
      expect(created.status).toBe(201);
      expect((await app.api('DELETE', `/orgs/${created.body.id}`, { token: all })).status).toBe(204);
    });
  });
});
