/**
 * SCIM 2.0 provisioning (docs/decisions.md "SCIM provisioning") over HTTP against a running Keel: an
 * organisation's tokens and settings under /api/v1, and the SCIM service at /scim/v2 with the habits
 * of Microsoft Entra ID and Okta.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { backendAvailable, startTestApp, type ApiResponse, type RequestOptions, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { organizationUsers } from '../../src/modules/access/schema.js';
import { scimTokens } from '../../src/modules/scim/schema.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { users } from '../../src/modules/identity/schema.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { clock } from '../../src/platform/clock.js';
import type { KeelEvent } from '../../src/events.js';
import { KEEL_EVENT_DATA } from '../../src/event-catalogue.js';

const CORE = 'urn:ietf:params:scim:schemas:core:2.0:User';
const ENTERPRISE = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
const PATCH = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

describe.skipIf(!backendAvailable())('SCIM provisioning', () => {
  let app: TestApp;
  let tenant: Tenant;
  let other: Tenant;
  let adminToken: string;
  let otherAdminToken: string;
  let token: string;
  let otherToken: string;
  const events: KeelEvent[] = [];

  const domain = () => `scim-${randomBytes(4).toString('hex')}.example`;
  const email = (d = 'example.com') => `p-${randomBytes(5).toString('hex')}@${d}`;
  const scim = <T = any>(method: string, path: string, o: RequestOptions = {}): Promise<ApiResponse<T>> =>
    app.request<T>(method, `/scim/v2${path}`, { token, ...o, ...(o.body !== undefined ? { headers: { 'content-type': 'application/scim+json', ...(o.headers ?? {}) } } : {}) });
  const newUser = (userName: string, extra: Record<string, unknown> = {}) =>
    scim('POST', '/Users', { body: { schemas: [CORE], userName, name: { givenName: 'Ada', familyName: 'Lovelace' }, active: true, ...extra } });
  const patch = (id: string, Operations: unknown[], o: RequestOptions = {}) => scim('PATCH', `/Users/${id}`, { ...o, body: { schemas: [PATCH], Operations } });
  const makeToken = async (bearer: string, orgId: string, body: Record<string, unknown> = { name: 'Directory' }) => app.api('POST', `/orgs/${orgId}/scim-tokens`, { token: bearer, body });
  const auditOf = async (action: string, targetId: string) =>
    (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.action, action))).filter((r) => r.targetId === targetId);

  beforeAll(async () => {
    app = await startTestApp();
    tenant = await createTenant(app);
    other = await createTenant(app);
    adminToken = (await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken)).accessToken;
    otherAdminToken = (await enrollTotp(app, (await login(app, other.orgAdmin)).accessToken)).accessToken;
    const made = await makeToken(adminToken, tenant.orgId);
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    token = made.body.token;
    otherToken = (await makeToken(otherAdminToken, other.orgId)).body.token;
    app.server.keel.events.subscribe('user.deactivated', (_tx, e) => {
      events.push(e);
      return Promise.resolve();
    });
  }, 120_000);

  afterAll(async () => {
    await app?.close();
  });
  afterEach(() => clock.reset());

  describe('tokens and settings', () => {
    it('a token is answered once with the kscim_ prefix, stored as its SHA-256, listed without it, audited', async () => {
      const res = await makeToken(adminToken, tenant.orgId, { name: 'Entra ID' });
      expect(res.status).toBe(201);
      expect(res.body.token).toMatch(/^kscim_[A-Za-z0-9_-]{40,}$/);
      expect(res.body).toMatchObject({ name: 'Entra ID', prefix: res.body.token.slice(0, 12), expiresAt: null, lastUsedAt: null });
      const [row] = await app.server.keel.db.select().from(scimTokens).where(eq(scimTokens.id, res.body.id));
      expect(row!.tokenHash).toBe(sha256Hex(res.body.token));
      expect(JSON.stringify(row)).not.toContain(res.body.token);
      const list = await app.api('GET', `/orgs/${tenant.orgId}/scim-tokens`, { token: adminToken });
      expect(list.status).toBe(200);
      expect(JSON.stringify(list.body)).not.toContain(res.body.token);
      expect(list.body.data.find((t: { id: string }) => t.id === res.body.id)).toMatchObject({ prefix: res.body.prefix });
      expect(await auditOf('scim_token.create', res.body.id)).toHaveLength(1);
    });

    it('managing tokens needs users:write and an MFA session; another organisation is 404', async () => {
      const second = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
      const plain = (await login(app, second)).accessToken;
      const noMfa = await makeToken(plain, tenant.orgId);
      expect(noMfa.status).toBe(403);
      expect(noMfa.body.code).toBe('mfa_required');
      const tech = (await login(app, tenant.orgTechnician)).accessToken;
      expect((await makeToken(tech, tenant.orgId)).status).toBe(403);
      const foreign = await makeToken(otherAdminToken, tenant.orgId);
      expect(foreign.status).toBe(404);
      const list = await app.api('GET', `/orgs/${tenant.orgId}/scim-tokens`, { token: otherAdminToken });
      expect(list.status).toBe(404);
    });

    it("managing tokens needs the cover of every member's permissions: users:write alone is 403 privilege_escalation", async () => {
      const role = await app.api('POST', '/roles', { token: adminToken, body: { name: `Provisioners ${randomBytes(3).toString('hex')}`, permissions: [{ resource: 'users', action: 'read' }, { resource: 'users', action: 'write' }] } });
      expect(role.status, JSON.stringify(role.body)).toBe(201);
      const provisioner = await createUser(app, { org: { orgId: tenant.orgId, roleId: role.body.id } });
      const bearer = (await enrollTotp(app, (await login(app, provisioner)).accessToken)).accessToken;
      const res = await makeToken(bearer, tenant.orgId);
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('privilege_escalation');
      const settings = await app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: bearer, body: { defaultRoleId: SYSTEM_ROLES.orgReadOnly.id, groupRoleMappings: [] } });
      expect(settings.status).toBe(403);
    });

    it('a SCIM token authenticates /scim/v2 only: /api/v1/users/me answers 401', async () => {
      expect((await app.api('GET', '/users/me', { token })).status).toBe(401);
      expect((await scim('GET', '/ServiceProviderConfig')).status).toBe(200);
      const none = await scim('GET', '/Users', { token: 'kscim_nope' });
      expect(none.status).toBe(401);
      expect(none.body).toMatchObject({ schemas: [ERROR], status: '401' });
      expect((await scim('GET', '/Users', { token: adminToken })).status).toBe(401);
    });

    it('a revoked token stops at once; an expired one too', async () => {
      const made = await makeToken(adminToken, tenant.orgId, { name: 'short', expiresAt: new Date(Date.now() + 3600_000).toISOString() });
      expect((await scim('GET', '/Users', { token: made.body.token })).status).toBe(200);
      clock.advance(2 * 3600_000);
      expect((await scim('GET', '/Users', { token: made.body.token })).status).toBe(401);
      clock.reset();
      const gone = await makeToken(adminToken, tenant.orgId, { name: 'gone' });
      // In use first, so this process holds it in its token cache: the revocation must drop it there.
      expect((await scim('GET', '/Users', { token: gone.body.token })).status).toBe(200);
      expect((await app.api('DELETE', `/orgs/${tenant.orgId}/scim-tokens/${gone.body.id}`, { token: adminToken })).status).toBe(204);
      expect((await scim('GET', '/Users', { token: gone.body.token })).status).toBe(401);
      expect((await app.api('DELETE', `/orgs/${tenant.orgId}/scim-tokens/${gone.body.id}`, { token: adminToken })).status).toBe(404);
    });

    it("another organisation's token never reaches this organisation's users", async () => {
      const mine = await newUser(email());
      expect(mine.status).toBe(201);
      expect((await scim('GET', `/Users/${mine.body.id}`, { token: otherToken })).status).toBe(404);
      expect((await patch(mine.body.id, [{ op: 'replace', path: 'active', value: false }], { token: otherToken })).status).toBe(404);
      expect((await scim('DELETE', `/Users/${mine.body.id}`, { token: otherToken })).status).toBe(404);
      const listed = await scim('GET', `/Users?filter=${encodeURIComponent(`userName eq "${mine.body.userName}"`)}`, { token: otherToken });
      expect(listed.body.totalResults).toBe(0);
    });

    it('settings: the default role must be assignable here; a provisioned user gets it', async () => {
      const bad = await app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken, body: { defaultRoleId: SYSTEM_ROLES.partnerAdmin.id, groupRoleMappings: [] } });
      expect(bad.status).toBe(400);
      const before = await app.api('GET', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken });
      expect(before.body.defaultRoleId).toBe(SYSTEM_ROLES.orgReadOnly.id);
      const put = await app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken, body: { defaultRoleId: SYSTEM_ROLES.orgTechnician.id, groupRoleMappings: [] } });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      const created = await newUser(email());
      const [m] = await app.server.keel.db.select().from(organizationUsers).where(eq(organizationUsers.userId, created.body.id));
      expect(m).toMatchObject({ orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id });
      await app.api('PUT', `/orgs/${tenant.orgId}/scim-settings`, { token: adminToken, body: { defaultRoleId: SYSTEM_ROLES.orgReadOnly.id, groupRoleMappings: [] } });
    });
  });

  describe('discovery', () => {
    it('ServiceProviderConfig, ResourceTypes and Schemas in application/scim+json', async () => {
      const config = await scim('GET', '/ServiceProviderConfig');
      expect(config.headers.get('content-type')).toMatch(/^application\/scim\+json/);
      expect(config.body).toMatchObject({ patch: { supported: true }, filter: { supported: true, maxResults: 200 }, bulk: { supported: false } });
      const types = await scim('GET', '/ResourceTypes');
      expect(types.body.Resources.map((r: { id: string }) => r.id)).toContain('User');
      const schemas = await scim('GET', '/Schemas');
      expect(schemas.body.Resources.map((s: { id: string }) => s.id)).toEqual(expect.arrayContaining([CORE, ENTERPRISE]));
      expect((await scim('GET', `/Schemas/${CORE}`)).body.attributes.map((a: { name: string }) => a.name)).toContain('userName');
    });
  });

  describe('users', () => {
    it('create keeps the attributes, makes a passwordless member, audited with the token id; GET answers it', async () => {
      const userName = email();
      const res = await newUser(userName, {
        externalId: 'ext-1',
        displayName: 'Ada L.',
        title: 'Engineer',
        emails: [{ value: userName, type: 'work', primary: true }],
        [ENTERPRISE]: { department: 'R&D', manager: { value: 'mgr-1' } },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      expect(res.headers.get('location')).toBe(`${app.server.keel.config.publicUrl}/scim/v2/Users/${res.body.id}`);
      expect(res.body).toMatchObject({ userName, externalId: 'ext-1', displayName: 'Ada L.', title: 'Engineer', active: true, name: { givenName: 'Ada' }, [ENTERPRISE]: { department: 'R&D', manager: { value: 'mgr-1' } } });
      const [u] = await app.server.keel.db.select().from(users).where(eq(users.id, res.body.id));
      expect(u).toMatchObject({ email: userName, name: 'Ada L.', passwordHash: null, status: 'active' });
      const [entry] = await auditOf('user.scim.create', res.body.id);
      const [tokenRow] = await app.server.keel.db.select().from(scimTokens).where(eq(scimTokens.tokenHash, sha256Hex(token)));
      expect(entry).toMatchObject({ actorType: 'scim_token', actorId: tokenRow!.id, orgId: tenant.orgId });
      const got = await scim('GET', `/Users/${res.body.id}`);
      expect(got.body).toEqual(res.body);
    });

    it('a duplicate userName is 409 uniqueness in the SCIM error schema (Entra ID and Okta)', async () => {
      const userName = email();
      expect((await newUser(userName)).status).toBe(201);
      const dup = await newUser(userName.toUpperCase());
      expect(dup.status).toBe(409);
      expect(dup.headers.get('content-type')).toMatch(/^application\/scim\+json/);
      expect(dup.body).toMatchObject({ schemas: [ERROR], status: '409', scimType: 'uniqueness' });
      expect(typeof dup.body.detail).toBe('string');
      const elsewhere = await scim('POST', '/Users', { token: otherToken, body: { userName } });
      expect(elsewhere.status).toBe(409);
    });

    it('an email in a domain another organisation verified is refused (409)', async () => {
      const d = domain();
      await app.server.keel.db.insert(verifiedDomains).values({ orgId: other.orgId, domain: d, status: 'verified', token: 't', verifiedAt: new Date() });
      const res = await newUser(email(d));
      expect(res.status).toBe(409);
      expect(res.body.schemas).toEqual([ERROR]);
      expect((await scim('POST', '/Users', { token: otherToken, body: { userName: email(d) } })).status).toBe(201);
    });

    it('Entra ID probes with filter=userName eq "<random>" and gets an empty list, not 404', async () => {
      const res = await scim('GET', `/Users?filter=${encodeURIComponent(`userName eq "${randomBytes(8).toString('hex')}"`)}`);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ schemas: ['urn:ietf:params:scim:api:messages:2.0:ListResponse'], totalResults: 0, Resources: [] });
    });

    it('filters: eq ne co sw ew pr, dates, and/or/not, grouping, value paths; paging and attribute selection', async () => {
      const tag = randomBytes(3).toString('hex');
      const a = (await newUser(`alpha-${tag}@example.com`, { title: `T-${tag}`, emails: [{ value: `alpha-${tag}@work.example`, type: 'work' }] })).body;
      const b = (await newUser(`beta-${tag}@example.com`, { title: `T-${tag}`, emails: [{ value: `beta-${tag}@home.example`, type: 'home' }] })).body;
      const ids = async (filter: string) => {
        const res = await scim('GET', `/Users?count=200&filter=${encodeURIComponent(filter)}`);
        expect(res.status, `${filter}: ${JSON.stringify(res.body)}`).toBe(200);
        return (res.body.Resources as { id: string }[]).map((r) => r.id).filter((id) => id === a.id || id === b.id).sort();
      };
      const both = [a.id, b.id].sort();
      expect(await ids(`userName eq "ALPHA-${tag}@example.com"`)).toEqual([a.id]);
      expect(await ids(`title eq "T-${tag}" and userName ne "alpha-${tag}@example.com"`)).toEqual([b.id]);
      expect(await ids(`userName co "${tag}"`)).toEqual(both);
      expect(await ids(`userName sw "beta-${tag}"`)).toEqual([b.id]);
      expect(await ids(`userName ew "${tag}@example.com" and title pr`)).toEqual(both);
      expect(await ids(`title eq "T-${tag}" and not (userName sw "alpha")`)).toEqual([b.id]);
      expect(await ids(`(userName sw "alpha-${tag}" or userName sw "beta-${tag}") and title eq "T-${tag}"`)).toEqual(both);
      expect(await ids(`emails[type eq "work"].value ew "@work.example" and title eq "T-${tag}"`)).toEqual([a.id]);
      expect(await ids(`emails[type eq "work" and value co "${tag}"]`)).toEqual([a.id]);
      expect(await ids(`title eq "T-${tag}" and meta.created ge "${a.meta.created}"`)).toEqual(both);
      expect(await ids(`title eq "T-${tag}" and meta.created gt "${new Date(Date.parse(b.meta.created) + 1000).toISOString()}"`)).toEqual([]);
      expect(await ids(`title eq "T-${tag}" and meta.lastModified lt "2000-01-01T00:00:00Z"`)).toEqual([]);
      const bad = await scim('GET', `/Users?filter=${encodeURIComponent('userName eq')}`);
      expect(bad.status).toBe(400);
      expect(bad.body.scimType).toBe('invalidFilter');

      const page1 = await scim('GET', `/Users?filter=${encodeURIComponent(`title eq "T-${tag}"`)}&startIndex=1&count=1`);
      expect(page1.body).toMatchObject({ totalResults: 2, startIndex: 1, itemsPerPage: 1 });
      const page2 = await scim('GET', `/Users?filter=${encodeURIComponent(`title eq "T-${tag}"`)}&startIndex=2&count=1`);
      expect(page2.body.Resources[0].id).not.toBe(page1.body.Resources[0].id);
      const capped = await scim('GET', '/Users?count=100000');
      expect(capped.status).toBe(200);
      expect(capped.body.Resources.length).toBeLessThanOrEqual(200);

      const only = await scim('GET', `/Users/${a.id}?attributes=userName,name.givenName`);
      expect(only.body).toEqual({ schemas: [CORE], id: a.id, userName: a.userName, name: { givenName: 'Ada' } });
      const without = await scim('GET', `/Users/${a.id}?excludedAttributes=emails,meta`);
      expect(without.body.emails).toBeUndefined();
      expect(without.body.meta).toBeUndefined();
      expect(without.body.userName).toBe(a.userName);
    });

    it('PUT replaces: what the body leaves out is cleared; the email and name follow', async () => {
      const created = (await newUser(email(), { title: 'Old', displayName: 'Old Name' })).body;
      const next = email();
      const res = await scim('PUT', `/Users/${created.id}`, { body: { schemas: [CORE], userName: next, name: { givenName: 'Grace', familyName: 'Hopper' }, active: true } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.userName).toBe(next);
      expect(res.body.title).toBeUndefined();
      const [u] = await app.server.keel.db.select().from(users).where(eq(users.id, created.id));
      expect(u).toMatchObject({ email: next, name: 'Grace Hopper' });
      expect(await auditOf('user.scim.update', created.id)).toHaveLength(1);
    });

    it('PATCH: add, replace and remove with paths, value paths and the enterprise extension', async () => {
      const created = (await newUser(email(), { emails: [{ value: 'a@work.example', type: 'work' }] })).body;
      const res = await patch(created.id, [
        { op: 'add', path: 'title', value: 'Lead' },
        { op: 'replace', path: 'emails[type eq "work"].value', value: 'b@work.example' },
        { op: 'replace', path: `${ENTERPRISE}:department`, value: 'Ops' },
        { op: 'replace', path: 'name.givenName', value: 'Grace' },
      ]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({ title: 'Lead', emails: [{ value: 'b@work.example', type: 'work' }], name: { givenName: 'Grace' }, [ENTERPRISE]: { department: 'Ops' } });
      const removed = await patch(created.id, [{ op: 'remove', path: 'title' }]);
      expect(removed.status).toBe(200);
      expect(removed.body.title).toBeUndefined();
      const bad = await patch(created.id, [{ op: 'replace', path: 'id', value: 'x' }]);
      expect(bad.status).toBe(400);
      expect((await patch(created.id, [{ op: 'explode', path: 'title' }])).body.scimType).toBe('invalidSyntax');
    });

    it('Entra ID: "Replace" capitalised with the string boolean "False" deactivates', async () => {
      const created = (await newUser(email())).body;
      const res = await patch(created.id, [{ op: 'Replace', path: 'active', value: 'False' }]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.active).toBe(false);
      const back = await patch(created.id, [{ op: 'Replace', path: 'active', value: 'True' }]);
      expect(back.body.active).toBe(true);
      expect(await auditOf('user.scim.activate', created.id)).toHaveLength(1);
    });

    it('Entra ID: PATCH without path carrying {active: false} deactivates; dotted keys in a path-less value apply', async () => {
      const created = (await newUser(email())).body;
      const res = await patch(created.id, [{ op: 'Replace', value: { active: false, 'name.familyName': 'Byron', displayName: 'Ada B.', [`${ENTERPRISE}:department`]: 'Ops' } }]);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body).toMatchObject({ active: false, displayName: 'Ada B.', name: { givenName: 'Ada', familyName: 'Byron' }, [ENTERPRISE]: { department: 'Ops' } });
    });

    it('Okta: PUT with active=false deactivates and never deletes', async () => {
      const created = (await newUser(email())).body;
      const res = await scim('PUT', `/Users/${created.id}`, { body: { ...created, active: false } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.active).toBe(false);
      const [u] = await app.server.keel.db.select().from(users).where(eq(users.id, created.id));
      expect(u!.status).toBe('disabled');
      expect((await scim('GET', `/Users/${created.id}`)).status).toBe(200);
    });

    it('deactivation ends a live session and the user\'s API keys at once, audited user.scim.deactivate, event user.deactivated; re-enabling lets them sign in again', async () => {
      const member = await createUser(app, { email: email(), org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
      const session = await login(app, member);
      const untouched = await login(app, member);
      const key = await app.api('POST', '/api-keys', { token: session.accessToken, body: { name: 'ci', permissions: [{ resource: 'devices', action: 'read' }] } });
      expect(key.status).toBe(201);
      expect((await app.api('GET', '/users/me', { token: session.accessToken })).status).toBe(200);
      expect((await app.api('GET', '/devices', { token: key.body.key })).status).toBe(200);

      // An account that is already a plain member is taken under management by the directory's POST.
      const adopted = await newUser(member.email);
      expect(adopted.status, JSON.stringify(adopted.body)).toBe(201);
      expect(adopted.body.id).toBe(member.id);

      const off = await patch(member.id, [{ op: 'replace', path: 'active', value: false }]);
      expect(off.status).toBe(200);
      expect((await app.api('GET', '/users/me', { token: session.accessToken })).status).toBe(401);
      expect((await app.api('GET', '/devices', { token: key.body.key })).status).toBe(401);
      const refreshed = await app.api('POST', '/auth/refresh', { body: { refreshToken: session.refreshToken } });
      expect(refreshed.status).toBe(401);
      expect((await app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } })).status).toBe(401);
      expect(await auditOf('user.scim.deactivate', member.id)).toHaveLength(1);
      expect(events.filter((e) => (e.data as { userId?: string }).userId === member.id)).toMatchObject([{ type: 'user.deactivated', orgId: tenant.orgId, data: { email: member.email, source: 'scim' } }]);
      // As the event catalogue publishes it (a webhook's body is this event as JSON).
      const published = events.find((e) => (e.data as { userId?: string }).userId === member.id)!;
      const zodSchema = KEEL_EVENT_DATA['user.deactivated'];
      expect(zodSchema.safeParse(JSON.parse(JSON.stringify(published.data))).success).toBe(true);

      // Re-enabled, the account signs in again; the sessions the deactivation ended stay ended.
      await patch(member.id, [{ op: 'replace', path: 'active', value: true }]);
      expect((await app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } })).status).toBe(200);
      expect((await app.api('GET', '/users/me', { token: untouched.accessToken })).status).toBe(401);
      expect((await app.api('POST', '/auth/refresh', { body: { refreshToken: untouched.refreshToken } })).status).toBe(401);
    });

    it("a managed account's name and status change only through SCIM or a platform administrator (409 account_managed)", async () => {
      const member = await createUser(app, { email: email(), org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
      const own = (await login(app, member)).accessToken;
      expect((await app.api('PATCH', '/users/me', { token: own, body: { name: 'Before' } })).status).toBe(200);
      expect((await newUser(member.email)).status).toBe(201);
      const self = await app.api('PATCH', '/users/me', { token: own, body: { name: 'Mine' } });
      expect(self.status).toBe(409);
      expect(self.body).toMatchObject({ code: 'account_managed', details: { managedBy: 'scim', fields: ['name'] } });
      expect((await app.api('PATCH', '/users/me', { token: own, body: { avatarUrl: 'https://example.com/a.png' } })).status).toBe(200);
      const byAdmin = await app.api('PATCH', `/users/${member.id}`, { token: adminToken, body: { status: 'disabled' } });
      expect(byAdmin.status).toBe(409);
      expect(byAdmin.body.code).toBe('account_managed');
      const root = await createUser(app, { platformAdmin: true });
      const rootToken = (await enrollTotp(app, (await login(app, root)).accessToken)).accessToken;
      const byRoot = await app.api('PATCH', `/users/${member.id}`, { token: rootToken, body: { name: 'Fixed By Operator' } });
      expect(byRoot.status, JSON.stringify(byRoot.body)).toBe(200);
      expect(byRoot.body.name).toBe('Fixed By Operator');
    });

    it('DELETE removes the membership and the account; a second DELETE is 404', async () => {
      const created = (await newUser(email())).body;
      expect((await scim('DELETE', `/Users/${created.id}`)).status).toBe(204);
      expect((await scim('GET', `/Users/${created.id}`)).status).toBe(404);
      expect((await scim('DELETE', `/Users/${created.id}`)).status).toBe(404);
      expect(await app.server.keel.db.select().from(users).where(eq(users.id, created.id))).toEqual([]);
      expect(await auditOf('user.scim.delete', created.id)).toHaveLength(1);
    });

    it('bad input is a SCIM 400, an unknown path 404, another media type 415, never a 500', async () => {
      expect((await scim('POST', '/Users', { body: { userName: 'not-an-email' } })).body).toMatchObject({ status: '400', scimType: 'invalidValue' });
      expect((await scim('POST', '/Users', { body: { userName: email(), active: 'maybe' } })).status).toBe(400);
      expect((await scim('POST', '/Users', { raw: '{nope', headers: { 'content-type': 'application/scim+json' } })).body.scimType).toBe('invalidSyntax');
      expect((await scim('POST', '/Users', { raw: 'userName=x', headers: { 'content-type': 'text/plain' } })).status).toBe(415);
      expect((await scim('GET', '/Users/not-a-uuid')).status).toBe(404);
      expect((await scim('GET', '/Nothing')).status).toBe(404);
      expect((await scim('GET', '/Users?count=abc')).status).toBe(400);
      const big = await scim('POST', '/Users', { raw: JSON.stringify({ userName: email(), title: 'x'.repeat(2 * 1024 * 1024) }), headers: { 'content-type': 'application/scim+json' } });
      expect(big.status).toBe(413);
    });
  });

  describe('concurrency', () => {
    raceTest('concurrent PATCHes of one user are serialised: no operation is lost', async () => {
      const created = (await newUser(email())).body;
      const answers = await together(6, (i) => patch(created.id, [{ op: 'add', path: 'emails', value: [{ value: `n${i}@work.example`, type: 'other' }] }]));
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
      const final = await scim('GET', `/Users/${created.id}`);
      expect((final.body.emails as { value: string }[]).map((e) => e.value).sort()).toEqual([0, 1, 2, 3, 4, 5].map((i) => `n${i}@work.example`));
    });

    raceTest('the same userName POSTed at once makes one user; the others are 409 uniqueness', async () => {
      const userName = email();
      const answers = await together(5, () => newUser(userName));
      expect(answers.filter((a) => a.status === 201)).toHaveLength(1);
      for (const a of answers.filter((x) => x.status !== 201)) expect(a.body).toMatchObject({ status: '409', scimType: 'uniqueness' });
    });
  });
});
