/**
 * Saving the SCIM group mappings decides the roles of the members the directory already manages
 * (docs/decisions.md "SCIM at scale"): each change updated and audited, the first batch in the
 * request and the rest by the worker's job, never granting more than the saver may grant.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { and, eq, inArray } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { waitUntil } from '../helpers/wait.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { organizationUsers } from '../../src/modules/access/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { scimSettings } from '../../src/modules/scim/schema.js';
import { reevaluateBatch } from '../../src/modules/scim/reevaluation.js';

const CORE_USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';

describe.skipIf(!backendAvailable())('SCIM settings save re-decides managed members', () => {
  let app: TestApp;
  let tenant: Tenant;
  let other: Tenant;
  let adminToken: string;
  let members: string[] = [];
  let outsider: string;
  const readOnly = SYSTEM_ROLES.orgReadOnly.id;
  const technician = SYSTEM_ROLES.orgTechnician.id;

  const scim = (token: string, method: string, path: string, body: unknown) =>
    app.request(method, `/scim/v2${path}`, { token, body, headers: { 'content-type': 'application/scim+json' } });
  const rolesOf = async (ids: string[]) =>
    (await app.server.keel.db.select({ userId: organizationUsers.userId, roleId: organizationUsers.roleId }).from(organizationUsers).where(inArray(organizationUsers.userId, ids))).map((r) => r.roleId);
  const save = (groupRoleMappings: { group: string; roleId: string }[]) =>
    app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken, body: { defaultRoleId: readOnly, groupRoleMappings } });

  beforeAll(async () => {
    // Batches of two: five members take the request's batch and two of the job's.
    app = await startTestApp({ env: { SCIM_REEVALUATION_BATCH: '2' } });
    tenant = await createTenant(app);
    other = await createTenant(app);
    adminToken = (await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken)).accessToken;
    const token = (await app.api('POST', `/orgs/${tenant.orgId}/scim-tokens`, { token: adminToken, body: { name: 'Entra' } })).body.token as string;
    for (let i = 0; i < 5; i++) {
      const r = await scim(token, 'POST', '/Users', { schemas: [CORE_USER], userName: `re-${randomBytes(4).toString('hex')}@example.com`, active: true });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      members.push(r.body.id as string);
    }
    members = members.sort();
    expect((await scim(token, 'POST', '/Groups', { schemas: [GROUP], displayName: 'Techs', members: members.map((value) => ({ value })) })).status).toBe(201);
    // Another organisation's managed member in a group of the same name: never touched by this save.
    const otherAdmin = (await enrollTotp(app, (await login(app, other.orgAdmin)).accessToken)).accessToken;
    const otherToken = (await app.api('POST', `/orgs/${other.orgId}/scim-tokens`, { token: otherAdmin, body: { name: 'Okta' } })).body.token as string;
    outsider = (await scim(otherToken, 'POST', '/Users', { schemas: [CORE_USER], userName: `out-${randomBytes(4).toString('hex')}@example.com` })).body.id as string;
    expect((await scim(otherToken, 'POST', '/Groups', { schemas: [GROUP], displayName: 'Techs', members: [{ value: outsider }] })).status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    await app?.close();
  });

  it('a saved mapping gives existing members its role (first batch at once, the rest by the job), audited; a later save takes it back', async () => {
    expect(await rolesOf(members)).toEqual(members.map(() => readOnly));
    const put = await save([{ group: 'techs', roleId: technician }]);
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    // The request's batch: the first two members by id.
    const now = await rolesOf(members.slice(0, 2));
    expect(now).toEqual([technician, technician]);
    await waitUntil('every member re-decided by the job', () => rolesOf(members), (r) => r.every((id) => id === technician));
    const audits = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.role.assign'), inArray(auditLogs.targetId, members)));
    expect(audits).toHaveLength(5);
    for (const a of audits) {
      expect(a.actorType).toBe('user');
      expect(a.actorId).toBe(tenant.orgAdmin.id);
      expect(a.details).toMatchObject({ from: readOnly, to: technician, source: 'scim_settings' });
    }
    const [settled] = await app.server.keel.db.select().from(scimSettings).where(eq(scimSettings.orgId, tenant.orgId));
    expect(settled).toMatchObject({ reevaluationPending: false, reevaluationCursor: null });
    expect(await rolesOf([outsider])).toEqual([readOnly]);

    expect((await save([{ group: 'Nobody', roleId: technician }])).status).toBe(200);
    await waitUntil('every member back to the default role', () => rolesOf(members), (r) => r.every((id) => id === readOnly));
  });

  it('a re-decision grants nothing beyond what the saver may grant now', async () => {
    // The save as a member who may grant less than the mapped role (as after the saver was demoted).
    await app.server.keel.db
      .update(scimSettings)
      .set({ groupRoleMappings: [{ group: 'Techs', roleId: technician }], reevaluationPending: true, reevaluationCursor: null, reevaluationBy: tenant.orgReadOnly.id })
      .where(eq(scimSettings.orgId, tenant.orgId));
    while (await reevaluateBatch(app.server.keel, tenant.orgId));
    expect(await rolesOf(members)).toEqual(members.map(() => readOnly));
  });
});
