/**
 * SCIM Groups (docs/decisions.md "SCIM") over HTTP against a running Keel: the resource, the
 * directories' membership habits, and the role a person's groups give through the one rule SSO
 * shares (`roleFromGroups`), bounded by the token creator's permissions at the time of use.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { and, eq } from 'drizzle-orm';
import { parse } from 'scim2-parse-filter';
import { backendAvailable, startTestApp, type ApiResponse, type RequestOptions, type TestApp } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { organizationUsers } from '../../src/modules/access/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { pushDown } from '../../src/modules/scim/filter.js';
import { USER_FIELDS } from '../../src/modules/scim/users.js';
import { GROUP_FIELDS } from '../../src/modules/scim/groups.js';

const CORE_USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';
const PATCH = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

describe('SCIM filters SQL answers whole (no read of every user)', () => {
  const exact = (f: string, fields = USER_FIELDS) => pushDown(parse(f), fields).exact;
  it('userName, externalId, id, active eq and meta.lastModified/created compared are SQL; co and value paths are not', () => {
    for (const f of ['userName eq "a@b.example"', 'externalId eq "x"', 'id eq "0193"', 'active eq false', 'meta.lastModified gt "2026-01-01T00:00:00Z"', 'meta.lastModified le "2026-01-01T00:00:00Z"', 'meta.created ge "2026-01-01T00:00:00Z"', 'userName eq "a@b.example" or (active eq true and not (externalId eq "y"))']) {
      expect(exact(f), f).toBe(true);
    }
    for (const f of ['userName co "a"', 'emails[type eq "work"].value eq "a@b.example"', 'userName eq "a@b.example" or title eq "x"']) expect(exact(f), f).toBe(false);
    // An and keeps the part SQL says, so only those rows are read.
    const partial = pushDown(parse('userName eq "a@b.example" and title co "x"'), USER_FIELDS);
    expect(partial.exact).toBe(false);
    expect(partial.where).toBeDefined();
    expect(exact('displayName eq "Admins"', GROUP_FIELDS)).toBe(true);
    expect(exact('externalId eq "g1"', GROUP_FIELDS)).toBe(true);
  });
});

describe.skipIf(!backendAvailable())('SCIM groups', () => {
  let app: TestApp;
  let tenant: Tenant;
  let other: Tenant;
  let adminToken: string;
  let token: string;
  let otherToken: string;

  const email = () => `g-${randomBytes(5).toString('hex')}@example.com`;
  const call = <T = any>(bearer: string, method: string, path: string, o: RequestOptions = {}): Promise<ApiResponse<T>> =>
    app.request<T>(method, `/scim/v2${path}`, { token: bearer, ...o, ...(o.body !== undefined ? { headers: { 'content-type': 'application/scim+json' } } : {}) });
  const scim = <T = any>(method: string, path: string, o: RequestOptions = {}) => call<T>(token, method, path, o);
  const newUser = async (userName = email()): Promise<string> => {
    const r = await scim('POST', '/Users', { body: { schemas: [CORE_USER], userName, active: true } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.id as string;
  };
  const newGroup = (displayName: string, members: string[] = [], extra: Record<string, unknown> = {}) =>
    scim('POST', '/Groups', { body: { schemas: [GROUP], displayName, members: members.map((value) => ({ value })), ...extra } });
  const patch = (id: string, Operations: unknown[]) => scim('PATCH', `/Groups/${id}`, { body: { schemas: [PATCH], Operations } });
  const memberIds = (g: { members?: { value: string }[] }) => (g.members ?? []).map((m) => m.value).sort();
  const roleOf = async (userId: string) =>
    (await app.server.keel.db.select({ roleId: organizationUsers.roleId }).from(organizationUsers).where(eq(organizationUsers.userId, userId)))[0]?.roleId;
  const setMappings = async (groupRoleMappings: { group: string; roleId: string }[]) => {
    const put = await app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken, body: { defaultRoleId: SYSTEM_ROLES.orgReadOnly.id, groupRoleMappings } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
  };

  beforeAll(async () => {
    app = await startTestApp();
    tenant = await createTenant(app);
    other = await createTenant(app);
    adminToken = (await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken)).accessToken;
    const otherAdmin = (await enrollTotp(app, (await login(app, other.orgAdmin)).accessToken)).accessToken;
    token = (await app.api('POST', `/orgs/${tenant.orgId}/scim-tokens`, { token: adminToken, body: { name: 'Entra' } })).body.token;
    otherToken = (await app.api('POST', `/orgs/${other.orgId}/scim-tokens`, { token: otherAdmin, body: { name: 'Okta' } })).body.token;
  }, 120_000);

  afterAll(async () => {
    await app?.close();
  });

  it('create, read, filter, page, replace and delete; a retried POST is 409 uniqueness; discovery lists Group', async () => {
    const [a, b, c] = [await newUser(), await newUser(), await newUser()];
    const tag = randomBytes(3).toString('hex');
    const made = await newGroup(`Sales ${tag}`, [a, b], { externalId: `ext-${tag}` });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect(made.headers.get('content-type')).toContain('application/scim+json');
    expect(made.body).toMatchObject({ schemas: [GROUP], displayName: `Sales ${tag}`, externalId: `ext-${tag}`, meta: { resourceType: 'Group' } });
    expect(memberIds(made.body)).toEqual([a, b].sort());
    const again = await newGroup(`sales ${tag}`);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ status: '409', scimType: 'uniqueness' });

    const byName = await scim('GET', `/Groups?filter=${encodeURIComponent(`displayName eq "SALES ${tag}"`)}`);
    expect(byName.body).toMatchObject({ totalResults: 1, Resources: [{ id: made.body.id }] });
    const byExt = await scim('GET', `/Groups?filter=${encodeURIComponent(`externalId eq "ext-${tag}"`)}&excludedAttributes=members`);
    expect(byExt.body.totalResults).toBe(1);
    expect(byExt.body.Resources[0].members).toBeUndefined();
    const probe = await scim('GET', `/Groups?filter=${encodeURIComponent('displayName eq "nobody-here"')}`);
    expect(probe.body).toMatchObject({ totalResults: 0, Resources: [] });

    await newGroup(`Ops ${tag}`);
    const page = await scim('GET', '/Groups?startIndex=2&count=1');
    expect(page.body).toMatchObject({ startIndex: 2, itemsPerPage: 1 });
    expect(page.body.totalResults).toBeGreaterThanOrEqual(2);

    const put = await scim('PUT', `/Groups/${made.body.id}`, { body: { schemas: [GROUP], displayName: `Sales EU ${tag}`, members: [{ value: c }] } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toMatchObject({ displayName: `Sales EU ${tag}` });
    expect(put.body.externalId).toBeUndefined();
    expect(memberIds(put.body)).toEqual([c]);

    const types = await scim('GET', '/ResourceTypes/Group');
    expect(types.body).toMatchObject({ endpoint: '/Groups', schema: GROUP });
    expect((await scim('GET', `/Schemas/${GROUP}`)).status).toBe(200);

    expect((await scim('DELETE', `/Groups/${made.body.id}`)).status).toBe(204);
    expect((await scim('GET', `/Groups/${made.body.id}`)).status).toBe(404);
  });

  it("another organisation's token never reaches a group, nor adds this organisation's users to its own", async () => {
    const mine = await newUser();
    const g = (await newGroup(`Mine ${randomBytes(3).toString('hex')}`, [mine])).body;
    expect((await call(otherToken, 'GET', `/Groups/${g.id}`)).status).toBe(404);
    expect((await call(otherToken, 'PATCH', `/Groups/${g.id}`, { body: { schemas: [PATCH], Operations: [{ op: 'remove', path: 'members' }] } })).status).toBe(404);
    expect((await call(otherToken, 'DELETE', `/Groups/${g.id}`)).status).toBe(404);
    const theirs = await call(otherToken, 'POST', '/Groups', { body: { schemas: [GROUP], displayName: 'Theirs', members: [{ value: mine }] } });
    expect(theirs.status).toBe(400);
    expect(theirs.body).toMatchObject({ scimType: 'invalidValue' });
    expect(memberIds((await scim('GET', `/Groups/${g.id}`)).body)).toEqual([mine]);
  });

  it('PATCH members: add with and without path, Entra batches, members[value eq] removal, "Replace" of displayName; unknown members refused whole', async () => {
    const ids = [await newUser(), await newUser(), await newUser(), await newUser()];
    const [a, b, c, d] = ids as [string, string, string, string];
    const g = (await newGroup(`Batch ${randomBytes(3).toString('hex')}`)).body;
    let r = await patch(g.id, [{ op: 'Add', path: 'members', value: [{ value: a }, { value: b }] }]);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(memberIds(r.body)).toEqual([a, b].sort());
    r = await patch(g.id, [{ op: 'add', value: { members: [{ value: c }] } }]);
    expect(memberIds(r.body)).toEqual([a, b, c].sort());
    // Entra ID: removal of a batch by path with a value, and by a value filter in the path.
    r = await patch(g.id, [{ op: 'Remove', path: 'members', value: [{ value: a }] }, { op: 'Add', path: 'members', value: [{ value: d }] }]);
    expect(memberIds(r.body)).toEqual([b, c, d].sort());
    r = await patch(g.id, [{ op: 'remove', path: `members[value eq "${b}"]` }]);
    expect(memberIds(r.body)).toEqual([c, d].sort());
    r = await patch(g.id, [{ op: 'Replace', value: { displayName: `${g.displayName} renamed` } }]);
    expect(r.body.displayName).toBe(`${g.displayName} renamed`);
    const bad = await patch(g.id, [{ op: 'add', path: 'members', value: [{ value: a }, { value: '0193aaaa-0000-7000-8000-000000000000' }] }]);
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ status: '400', scimType: 'invalidValue' });
    expect(memberIds((await scim('GET', `/Groups/${g.id}`)).body)).toEqual([c, d].sort());
    r = await patch(g.id, [{ op: 'replace', path: 'members', value: [{ value: a }] }]);
    expect(memberIds(r.body)).toEqual([a]);
    r = await patch(g.id, [{ op: 'remove', path: 'members' }]);
    expect(memberIds(r.body)).toEqual([]);
    expect((await patch(g.id, [{ op: 'add', path: 'owner', value: 'x' }])).body).toMatchObject({ scimType: 'invalidPath' });
  });

  it("a person's role follows their groups: the mapping with the most permissions, at once on a live session, audited; back to the default without them", async () => {
    const tag = randomBytes(3).toString('hex');
    // Readers is listed first: the order of the mappings does not decide, the permissions do.
    await setMappings([
      { group: `Readers ${tag}`, roleId: SYSTEM_ROLES.orgReadOnly.id },
      { group: `Techs ${tag}`, roleId: SYSTEM_ROLES.orgTechnician.id },
    ]);
    const person = tenant.orgReadOnly;
    const adopted = await scim('POST', '/Users', { body: { schemas: [CORE_USER], userName: person.email } });
    expect(adopted.status, JSON.stringify(adopted.body)).toBe(201);
    const session = await login(app, person);
    expect((await app.api('GET', '/users/me', { token: session.accessToken })).body.roleId).toBe(SYSTEM_ROLES.orgReadOnly.id);

    const readers = (await newGroup(`readers ${tag}`, [person.id])).body;
    const techs = (await newGroup(`Techs ${tag}`)).body;
    expect(await roleOf(person.id)).toBe(SYSTEM_ROLES.orgReadOnly.id);
    expect((await patch(techs.id, [{ op: 'add', path: 'members', value: [{ value: person.id }] }])).status).toBe(200);
    expect(await roleOf(person.id)).toBe(SYSTEM_ROLES.orgTechnician.id);
    expect((await app.api('GET', '/users/me', { token: session.accessToken })).body.roleId).toBe(SYSTEM_ROLES.orgTechnician.id);
    const audits = (await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.role.assign'), eq(auditLogs.targetId, person.id))));
    expect(audits.at(-1)).toMatchObject({ actorType: 'scim_token', details: expect.objectContaining({ source: 'scim_group_mapping', to: SYSTEM_ROLES.orgTechnician.id }) as unknown });

    expect((await patch(techs.id, [{ op: 'remove', path: `members[value eq "${person.id}"]` }])).status).toBe(200);
    expect(await roleOf(person.id)).toBe(SYSTEM_ROLES.orgReadOnly.id);
    expect((await app.api('GET', '/users/me', { token: session.accessToken })).body.roleId).toBe(SYSTEM_ROLES.orgReadOnly.id);
    await scim('DELETE', `/Groups/${readers.id}`);
    await scim('DELETE', `/Groups/${techs.id}`);
    await setMappings([]);
  });

  it("a mapping never grants more than the token's creator may grant now (re-checked at use, not only at save)", async () => {
    const tag = randomBytes(3).toString('hex');
    await setMappings([
      { group: `Techs ${tag}`, roleId: SYSTEM_ROLES.orgTechnician.id },
      { group: `Admins ${tag}`, roleId: SYSTEM_ROLES.orgAdmin.id },
    ]);
    const person = await newUser();
    const techs = (await newGroup(`Techs ${tag}`, [person])).body;
    expect(await roleOf(person)).toBe(SYSTEM_ROLES.orgTechnician.id);
    // The token's creator is demoted after the mappings were saved: Admins no longer applies.
    const db = app.server.keel.db;
    await db.update(organizationUsers).set({ roleId: SYSTEM_ROLES.orgTechnician.id }).where(eq(organizationUsers.userId, tenant.orgAdmin.id));
    try {
      const admins = (await newGroup(`Admins ${tag}`, [person])).body;
      expect(await roleOf(person)).toBe(SYSTEM_ROLES.orgTechnician.id);
      const skipped = (await db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.role.assign'), eq(auditLogs.targetId, person))));
      expect(skipped.every((a) => (a.details as { to?: string }).to !== SYSTEM_ROLES.orgAdmin.id)).toBe(true);
      await db.update(organizationUsers).set({ roleId: SYSTEM_ROLES.orgAdmin.id }).where(eq(organizationUsers.userId, tenant.orgAdmin.id));
      // Restored: the next membership change decides with the creator's permissions as they are now.
      expect((await patch(admins.id, [{ op: 'add', path: 'members', value: [{ value: await newUser() }] }])).status).toBe(200);
      expect((await patch(techs.id, [{ op: 'remove', path: 'members' }])).status).toBe(200);
      expect(await roleOf(person)).toBe(SYSTEM_ROLES.orgAdmin.id);
    } finally {
      await db.update(organizationUsers).set({ roleId: SYSTEM_ROLES.orgAdmin.id }).where(eq(organizationUsers.userId, tenant.orgAdmin.id));
      await setMappings([]);
    }
  });

  it('users: active eq and meta.lastModified filters answer through SQL with the same results', async () => {
    const on = await newUser();
    const off = await newUser();
    await scim('PATCH', `/Users/${off}`, { body: { schemas: [PATCH], Operations: [{ op: 'replace', path: 'active', value: false }] } });
    const inactive = await scim('GET', `/Users?filter=${encodeURIComponent('active eq false')}&count=200`);
    const ids = (inactive.body.Resources as { id: string }[]).map((r) => r.id);
    expect(ids).toContain(off);
    expect(ids).not.toContain(on);
    const since = (await scim('GET', `/Users/${off}`)).body.meta.lastModified as string;
    const later = await scim('GET', `/Users?filter=${encodeURIComponent(`meta.lastModified ge "${since}" and active eq false`)}`);
    expect((later.body.Resources as { id: string }[]).map((r) => r.id)).toEqual([off]);
  });

  it("the console's reads: GET /users marks managed accounts (managedBy), /orgs/{orgId}/scim-users lists them; another organisation's list is 404", async () => {
    const id = await newUser();
    const listed = await app.api('GET', `/users?orgId=${tenant.orgId}&limit=100`, { token: adminToken });
    const rows = listed.body.data as { id: string; managedBy: string | null }[];
    expect(rows.find((u) => u.id === id)?.managedBy).toBe('scim');
    expect(rows.find((u) => u.id === tenant.orgTechnician.id)?.managedBy).toBeNull();
    expect((await app.api('GET', `/users/${id}`, { token: adminToken })).body.managedBy).toBe('scim');
    const managed = await app.api('GET', `/orgs/${tenant.orgId}/scim-users?limit=100`, { token: adminToken });
    expect(managed.status).toBe(200);
    expect((managed.body.data as { id: string; active: boolean }[]).find((u) => u.id === id)).toMatchObject({ active: true });
    expect((await app.api('GET', `/orgs/${other.orgId}/scim-users`, { token: adminToken })).status).toBe(404);
  });

  raceTest('batches of members added to one group at once are serialised: none is lost; a displayName POSTed at once makes one group', async () => {
    const ids = await Promise.all(Array.from({ length: 6 }, () => newUser()));
    const g = (await newGroup(`Race ${randomBytes(3).toString('hex')}`)).body;
    const answers = await together(6, (i) => patch(g.id, [{ op: 'add', path: 'members', value: [{ value: ids[i] }] }]));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(memberIds((await scim('GET', `/Groups/${g.id}`)).body)).toEqual([...ids].sort());
    const name = `Once ${randomBytes(3).toString('hex')}`;
    const posts = await together(5, () => newGroup(name));
    expect(posts.filter((p) => p.status === 201)).toHaveLength(1);
    for (const p of posts.filter((x) => x.status !== 201)) expect(p.body).toMatchObject({ status: '409', scimType: 'uniqueness' });
  });
});
