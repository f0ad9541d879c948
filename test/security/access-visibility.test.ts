/**
 * docs/security.md "Findings", 4: partner users with `orgAccess` `selected` or `none` never read an organisation they
 * may not enter. One function (`visibleOrgs` in access/scope.ts) decides which organisations a
 * principal sees, and every read that spans organisations filters through it: the audit log and its
 * export, role holders and user counts, the user list. Over HTTP such users read the audit log; users
 * and roles answer them 403 (test/security/access-full-org.test.ts), so those
 * reads are also called past the route guard, straight at the service, to show that the filter holds
 * on its own; the same filter is shown over HTTP with the callers that do reach those routes
 * (a platform administrator naming a partner or an organisation, an organisation user).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { createOrganization, createPartner } from '../../src/modules/tenancy/service.js';
import { accessContextFor, type AccessContext } from '../../src/modules/access/scope.js';
import { getRole, roleUsers } from '../../src/modules/access/roles.js';
import { getVisibleUser, listUsers } from '../../src/modules/users/service.js';
import { createWorld, insertRole, partnerUserWithRole, ROLE, type World } from '../access/helpers.js';

const FULL_ORG = { error: 'Full partner organization access is required', code: 'full_org_access_required' };

interface Entry {
  action: string;
  orgId: string | null;
  partnerId: string | null;
  targetId: string | null;
}

describe.skipIf(!backendAvailable())(`organisation visibility of partner users (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let bAdmin: TestUser;
  let bReader: TestUser;
  let rivalReader: TestUser;
  let rivalPartnerId: string;
  let invitee: string;
  let siteA: string;
  let siteB: string;
  const secretSite = 'Secret B site';
  const tokens = { selected: '', none: '' };
  const users = { selected: { id: '', email: '' }, none: { id: '', email: '' } };

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    const db = app.server.keel.db;
    bAdmin = await createUser(app, { name: 'B admin', org: { orgId: w.otherOrgId, roleId: ROLE.orgAdmin } });
    bReader = await createUser(app, { name: 'B reader', org: { orgId: w.otherOrgId, roleId: ROLE.orgReadOnly } });
    const rival = await createPartner(db, { name: 'Rival' });
    rivalPartnerId = rival.id;
    const rivalOrg = await createOrganization(db, { name: 'Rival org', partnerId: rival.id });
    rivalReader = await createUser(app, { org: { orgId: rivalOrg.id, roleId: ROLE.orgReadOnly } });

    // Activity in B that A-only and none users must never see: a site name and an invitee's email.
    const t = w.tokens.partnerFull;
    const b = await app.api('POST', `/orgs/${w.otherOrgId}/sites`, { token: t, body: { name: secretSite } });
    expect(b.status).toBe(201);
    siteB = b.body.id;
    invitee = uniqueEmail('secret-invitee');
    const invite = await app.api('POST', `/users/invite?orgId=${w.otherOrgId}`, { token: t, body: { email: invitee, name: 'Secret Invitee', roleId: ROLE.orgReadOnly } });
    expect(invite.status, JSON.stringify(invite.body)).toBe(201);
    // Activity in A (selected) and of the partner itself (no organisation).
    const a = await app.api('POST', `/orgs/${w.orgId}/sites`, { token: t, body: { name: 'Visible A site' } });
    expect(a.status).toBe(201);
    siteA = a.body.id;
    expect((await app.api('PATCH', `/partners/${w.partnerId}`, { token: t, body: { name: 'Partner renamed' } })).status).toBe(200);

    const auditors = await insertRole(app, { scope: 'partner', partnerId: w.partnerId, name: 'Auditors', perms: ['audit:read', 'audit:export', 'users:read'] });
    const sel = await partnerUserWithRole(app, w.partnerId, auditors, 'selected', [w.orgId]);
    const none = await partnerUserWithRole(app, w.partnerId, auditors, 'none');
    tokens.selected = sel.token;
    tokens.none = none.token;
    users.selected = sel.user;
    users.none = none.user;
  });
  afterAll(async () => app?.close());

  /** What each kind of caller may see: `orgIds` of organisations, and the partner's own entries. */
  const allowed = { selected: (e: Entry) => e.orgId === w.orgId || (e.orgId === null && e.partnerId === w.partnerId), none: (e: Entry) => e.orgId === null && e.partnerId === w.partnerId };
  const secrets = () => [secretSite, invitee, w.otherOrgId, siteB, bAdmin.email];

  describe('GET /audit-logs and its export', () => {
    it.each(['selected', 'none'] as const)('a %s partner user reads its partner’s own entries and its organisations’, never an excluded organisation’s', async (who) => {
      const res = await app.api('GET', '/audit-logs?limit=100', { token: tokens[who] });
      expect(res.status).toBe(200);
      const entries = res.body.data as Entry[];
      expect(entries.length).toBeGreaterThan(0);
      for (const e of entries) expect(allowed[who](e), `${e.action} org ${e.orgId} partner ${e.partnerId}`).toBe(true);
      // The partner's own change shows; the selected organisation's site only to the selected user.
      expect(entries.some((e) => e.action === 'partner.update')).toBe(true);
      expect(entries.some((e) => e.action === 'site.create' && e.targetId === siteA)).toBe(who === 'selected');
      for (const s of secrets()) expect(JSON.stringify(res.body)).not.toContain(s);
      expect(res.body.pagination.total).toBe(entries.length);
    });

    it.each(['selected', 'none'] as const)('the %s partner user’s export (JSON lines and CSV) holds the same entries', async (who) => {
      const jsonl = await app.api('GET', '/audit-logs/export?format=jsonl', { token: tokens[who] });
      expect(jsonl.status).toBe(200);
      const lines = (jsonl.body as string).trim().split('\n').map((l) => JSON.parse(l) as Entry);
      expect(lines.length).toBeGreaterThan(0);
      for (const e of lines) expect(allowed[who](e), `${e.action} org ${e.orgId}`).toBe(true);
      const csv = await app.api('GET', '/audit-logs/export?format=csv', { token: tokens[who] });
      expect(csv.status).toBe(200);
      expect((csv.body as string).trim().split('\n').length - 1).toBe(lines.length);
      for (const text of [jsonl.body as string, csv.body as string]) for (const s of secrets()) expect(text).not.toContain(s);
    });

    it('naming an organisation narrows to it, and an excluded one is 404', async () => {
      const inA = await app.api('GET', `/audit-logs?limit=100&orgId=${w.orgId}`, { token: tokens.selected });
      expect(inA.status).toBe(200);
      expect(inA.body.data.length).toBeGreaterThan(0);
      for (const e of inA.body.data as Entry[]) expect(e.orgId).toBe(w.orgId);
      for (const [who, orgId] of [['selected', w.otherOrgId], ['none', w.orgId], ['none', w.otherOrgId]] as const) {
        expect((await app.api('GET', `/audit-logs?orgId=${orgId}`, { token: tokens[who] })).status, `${who} ${orgId}`).toBe(404);
        expect((await app.api('GET', `/audit-logs/export?orgId=${orgId}`, { token: tokens[who] })).status, `${who} export ${orgId}`).toBe(404);
      }
    });

    it('a partner user with orgAccess all sees every organisation’s entries (what the others are spared)', async () => {
      const res = await app.api('GET', '/audit-logs?limit=100', { token: w.tokens.partnerFull });
      expect(JSON.stringify(res.body)).toContain(secretSite);
      expect(JSON.stringify(res.body)).toContain(invitee);
    });
  });

  describe('role holders, user counts and the user list', () => {
    const ctx = async (who: 'selected' | 'none'): Promise<AccessContext> =>
      accessContextFor(app.server.keel, { kind: 'user', userId: users[who].id, email: users[who].email, sessionId: 'test', mfa: false, isPlatformAdmin: false, apiKeyId: null });
    const page = { page: 1, limit: 100 };

    it.each(['selected', 'none'] as const)('over HTTP the %s partner user gets 403 on holders and users, with nothing of them in the answer', async (who) => {
      for (const path of [`/roles/${ROLE.orgReadOnly}/users`, `/roles/${ROLE.orgReadOnly}`, '/roles', '/users', `/users/${bReader.id}`]) {
        const res = await app.api('GET', path, { token: tokens[who] });
        expect({ status: res.status, body: res.body }, path).toEqual({ status: 403, body: FULL_ORG });
      }
    });

    it('past the guard, a selected user’s holders, counts and users are those of its organisations only', async () => {
      const access = await ctx('selected');
      const holders = await roleUsers(app.server.keel, access, ROLE.orgReadOnly, page);
      expect(holders.data.map((u) => u.email)).toEqual([w.orgReadOnly.email]);
      expect(holders.total).toBe(1);
      expect((await getRole(app.server.keel.db, access, ROLE.orgReadOnly)).userCount).toBe(1);
      expect((await getRole(app.server.keel.db, access, ROLE.orgAdmin)).userCount).toBe(1);

      const list = await listUsers(app.server.keel.db, access, page);
      const emails = list.data.map((u) => u.email);
      expect(emails).toEqual(expect.arrayContaining([w.orgAdmin.email, w.orgReadOnly.email, w.partnerFull.email, users.selected.email]));
      for (const hidden of [bAdmin.email, bReader.email, invitee, rivalReader.email]) expect(emails).not.toContain(hidden);
      expect(list.data.every((u) => u.orgId === w.orgId || u.partnerId === w.partnerId)).toBe(true);
      await expect(getVisibleUser(app.server.keel.db, access, bReader.id)).rejects.toMatchObject({ status: 404 });
    });

    it('past the guard, a none user sees no organisation’s holders or members, only the partner’s own', async () => {
      const access = await ctx('none');
      expect(await roleUsers(app.server.keel, access, ROLE.orgReadOnly, page)).toEqual({ data: [], total: 0 });
      expect((await getRole(app.server.keel.db, access, ROLE.orgAdmin)).userCount).toBe(0);
      const list = await listUsers(app.server.keel.db, access, page);
      expect(list.data.length).toBeGreaterThan(0);
      for (const u of list.data) expect(u.partnerId, u.email).toBe(w.partnerId);
      await expect(getVisibleUser(app.server.keel.db, access, w.orgAdmin.id)).rejects.toMatchObject({ status: 404 });
    });

    it('the callers that reach these routes see through the same filter', async () => {
      const emails = (res: { body: { data: { email: string }[] } }) => res.body.data.map((u) => u.email).sort();
      const path = `/roles/${ROLE.orgReadOnly}/users?limit=100`;
      // Everything of the partner (both organisations), never the rival's.
      const full = await app.api('GET', path, { token: w.tokens.partnerFull });
      expect(emails(full)).toEqual([w.orgReadOnly.email, bReader.email, invitee].sort());
      const named = await app.api('GET', `${path}&partnerId=${w.partnerId}`, { token: w.tokens.platformAdmin });
      expect(emails(named)).toEqual([w.orgReadOnly.email, bReader.email, invitee].sort());
      expect((await app.api('GET', `/roles/${ROLE.orgReadOnly}?partnerId=${w.partnerId}`, { token: w.tokens.platformAdmin })).body.userCount).toBe(3);
      // One organisation named, or an organisation user's own.
      const inA = await app.api('GET', `${path}&orgId=${w.orgId}`, { token: w.tokens.partnerFull });
      expect(emails(inA)).toEqual([w.orgReadOnly.email]);
      expect(emails(await app.api('GET', path, { token: w.tokens.orgAdmin }))).toEqual([w.orgReadOnly.email]);
      // The user list of a named partner holds none of the rival's members.
      const listed = await app.api('GET', `/users?limit=100&partnerId=${w.partnerId}`, { token: w.tokens.platformAdmin });
      expect(emails(listed)).toEqual(expect.arrayContaining([bAdmin.email, w.orgAdmin.email, w.partnerFull.email]));
      expect(emails(listed)).not.toContain(rivalReader.email);
      const rival = await app.api('GET', `/users?limit=100&partnerId=${rivalPartnerId}`, { token: w.tokens.platformAdmin });
      expect(emails(rival)).toEqual([rivalReader.email]);
    });
  });
});
