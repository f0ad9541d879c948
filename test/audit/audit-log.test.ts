import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, STRONG_PASSWORD, uniqueEmail, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

describe.skipIf(!backendAvailable())('audit log: read and export', () => {
  let app: TestApp;
  let tenant: Tenant;
  let adminToken: string;
  const secrets: string[] = [];

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    tenant = await createTenant(app);
    const admin = await login(app, tenant.orgAdmin);
    adminToken = admin.accessToken;
    secrets.push(tenant.orgAdmin.password, admin.accessToken, admin.refreshToken);

    // Accounts: login (above), profile update, logout of another user.
    expect((await app.api('PATCH', '/users/me', { token: adminToken, body: { name: 'Audited Admin' } })).status).toBe(200);
    const tech = await login(app, tenant.orgTechnician);
    secrets.push(tech.accessToken, tech.refreshToken);
    expect((await app.api('POST', '/auth/logout', { token: tech.accessToken })).status).toBe(200);

    // Roles: create, update, clone, delete.
    const role = await app.api('POST', '/roles', { token: adminToken, body: { name: 'Auditors', permissions: [{ resource: 'audit', action: 'read' }] } });
    expect(role.status).toBe(201);
    expect((await app.api('PATCH', `/roles/${role.body.id}`, { token: adminToken, body: { description: 'Read the log' } })).status).toBe(200);
    const clone = await app.api('POST', `/roles/${role.body.id}/clone`, { token: adminToken, body: { name: 'Auditors 2' } });
    expect(clone.status).toBe(201);
    expect((await app.api('DELETE', `/roles/${clone.body.id}`, { token: adminToken })).status).toBe(204);

    // Users: invite, resend, update, role assign, remove.
    const invited = await app.api('POST', '/users/invite', { token: adminToken, body: { email: uniqueEmail('audit'), name: 'Ann', roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect(invited.status).toBe(201);
    expect((await app.api('POST', '/users/resend-invite', { token: adminToken, body: { userId: invited.body.id } })).status).toBe(200);
    const member = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect((await app.api('PATCH', `/users/${member.id}`, { token: adminToken, body: { name: 'Renamed' } })).status).toBe(200);
    expect((await app.api('POST', `/users/${member.id}/role`, { token: adminToken, body: { roleId: SYSTEM_ROLES.orgTechnician.id } })).status).toBe(200);
    expect((await app.api('DELETE', `/users/${member.id}`, { token: adminToken })).status).toBe(204);

    // Another tenant's activity, which must never show.
    const other = await createUser(app, { name: 'Other Org Admin', org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const otherToken = (await login(app, other)).accessToken;
    expect((await app.api('POST', '/roles', { token: otherToken, body: { name: 'Secret B role', permissions: [{ resource: 'devices', action: 'read' }] } })).status).toBe(201);
  });
  afterAll(async () => app?.close());

  const EXPECTED = [
    'user.login', 'user.logout', 'user.profile.update',
    'role.create', 'role.update', 'role.clone', 'role.delete',
    'user.invite', 'user.invite.resend', 'user.update', 'user.role.assign', 'user.remove',
  ];

  it('lists every audited action of the scope, newest first, with filters and pagination', async () => {
    const res = await app.api('GET', '/audit-logs?limit=100', { token: adminToken });
    expect(res.status).toBe(200);
    const actions = res.body.data.map((e: { action: string }) => e.action);
    expect(actions).toEqual(expect.arrayContaining(EXPECTED));
    for (const e of res.body.data) expect(e.orgId).toBe(tenant.orgId);
    const times = res.body.data.map((e: { createdAt: string }) => Date.parse(e.createdAt));
    expect([...times].sort((a, b) => b - a)).toEqual(times);

    const only = await app.api('GET', '/audit-logs?action=role.create', { token: adminToken });
    expect(only.body.data.map((e: { action: string }) => e.action)).toEqual(['role.create']);
    const byActor = await app.api('GET', `/audit-logs?actorId=${tenant.orgTechnician.id}`, { token: adminToken });
    expect(byActor.body.data.map((e: { action: string }) => e.action).sort()).toEqual(['user.login', 'user.logout']);
    const paged = await app.api('GET', '/audit-logs?limit=2&page=2', { token: adminToken });
    expect(paged.body.data).toHaveLength(2);
    expect(paged.body.pagination).toMatchObject({ page: 2, limit: 2, total: res.body.pagination.total });
    const future = await app.api('GET', `/audit-logs?from=${encodeURIComponent(new Date(Date.now() + 3600_000).toISOString())}`, { token: adminToken });
    expect(future.body.data).toEqual([]);
    expect((await app.api('GET', '/audit-logs?from=yesterday', { token: adminToken })).status).toBe(400);
    // By target (kind and id) and up to a time; an unknown parameter is refused, not ignored.
    const roles = await app.api('GET', '/audit-logs?targetType=role&limit=100', { token: adminToken });
    expect([...new Set(roles.body.data.map((e: { action: string }) => e.action))].sort()).toEqual(['role.clone', 'role.create', 'role.delete', 'role.update']);
    const created = roles.body.data.find((e: { action: string }) => e.action === 'role.create');
    const one = await app.api('GET', `/audit-logs?targetType=role&targetId=${created.targetId}`, { token: adminToken });
    expect(one.body.data.map((e: { action: string }) => e.action).sort()).toEqual(['role.create', 'role.update']);
    const past = await app.api('GET', `/audit-logs?to=${encodeURIComponent(new Date(Date.parse(res.body.data.at(-1).createdAt) - 1000).toISOString())}`, { token: adminToken });
    expect(past.body.data).toEqual([]);
    const misspelt = await app.api('GET', '/audit-logs?targetid=x', { token: adminToken });
    expect(misspelt.status).toBe(400);
  });

  it('stores what the raw writers were given: typed JSON, the changed fields, and the login one statement wrote', async () => {
    const res = await app.api('GET', `/audit-logs?limit=100&actorId=${tenant.orgAdmin.id}`, { token: adminToken });
    const entry = (action: string) => res.body.data.find((e: { action: string }) => e.action === action);
    // The login: session, last-login stamp and entry came from one statement; all three agree.
    const loginEntry = entry('user.login');
    expect(loginEntry.details).toEqual({ method: 'password', mfa: false, sessionId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    const sessions = await app.api('GET', '/auth/sessions', { token: adminToken });
    expect(sessions.body.data.map((s: { id: string }) => s.id)).toContain(loginEntry.details.sessionId);
    const me = await app.api('GET', '/users/me', { token: adminToken });
    expect(Math.abs(Date.parse(me.body.lastLoginAt) - Date.parse(loginEntry.createdAt))).toBeLessThan(1000);
    expect(loginEntry).toMatchObject({ actorType: 'user', actorEmail: tenant.orgAdmin.email, orgId: tenant.orgId, result: 'success' });
    // jsonb columns come back as JSON, not as strings of JSON.
    expect(entry('user.profile.update').changes).toEqual(['name']);
  });

  it('never shows another tenant’s entries and needs audit:read', async () => {
    const res = await app.api('GET', '/audit-logs?limit=100', { token: adminToken });
    expect(JSON.stringify(res.body)).not.toContain('Secret B role');
    expect(JSON.stringify(res.body)).not.toContain(tenant.otherOrgId);
    expect((await app.api('GET', `/audit-logs?orgId=${tenant.otherOrgId}`, { token: adminToken })).status).toBe(404);
    const tech = await login(app, tenant.orgTechnician);
    expect((await app.api('GET', '/audit-logs', { token: tech.accessToken })).status).toBe(403);
  });

  it('exports the same entries as JSON lines and CSV, streamed, without any secret', async () => {
    const jsonl = await app.api('GET', '/audit-logs/export?format=jsonl', { token: adminToken });
    expect(jsonl.status).toBe(200);
    expect(jsonl.headers.get('content-type')).toContain('application/x-ndjson');
    const lines = (jsonl.body as string).trim().split('\n').map((l) => JSON.parse(l) as { action: string; orgId: string });
    expect(lines.map((l) => l.action)).toEqual(expect.arrayContaining(EXPECTED));
    expect(lines.every((l) => l.orgId === tenant.orgId)).toBe(true);

    const csv = await app.api('GET', '/audit-logs/export?format=csv', { token: adminToken });
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toContain('text/csv');
    const rows = (csv.body as string).trim().split('\n');
    expect(rows[0]).toBe('id,createdAt,action,actorType,actorId,actorEmail,partnerId,orgId,targetType,targetId,changes,details,result,ipAddress,userAgent,requestId');
    expect(rows.length - 1).toBe(lines.length);
    for (const action of EXPECTED) expect(csv.body).toContain(`,${action},`);

    for (const text of [jsonl.body as string, csv.body as string]) {
      for (const s of [...secrets, STRONG_PASSWORD]) expect(text).not.toContain(s);
      expect(text).not.toContain('Secret B role');
    }
    const tech = await login(app, tenant.orgTechnician);
    expect((await app.api('GET', '/audit-logs/export', { token: tech.accessToken })).status).toBe(403);
  });
  it('names the actor, organisation and target of each listed entry; never another organisation\'s object an entry names by id', async () => {
    const res = await app.api('GET', '/audit-logs?limit=100&action=user.role.assign', { token: adminToken });
    expect(res.status).toBe(200);
    const assigned = res.body.data[0];
    // The removed member is gone (no name); the acting admin and the organisation are named.
    expect(assigned).toMatchObject({ actorName: 'Audited Admin', orgName: 'Org A', targetType: 'user', targetName: null });
    const role = (await app.api('GET', '/audit-logs?limit=100&action=role.create', { token: adminToken })).body.data[0];
    expect(role).toMatchObject({ targetType: 'role', targetName: 'Auditors', actorName: 'Audited Admin', orgName: 'Org A' });
    const signedIn = (await app.api('GET', `/audit-logs?limit=100&action=user.login&actorId=${tenant.orgAdmin.id}`, { token: adminToken })).body.data[0];
    expect(signedIn).toMatchObject({ targetType: 'user', targetName: tenant.orgAdmin.email });
    // The organisation's admin names another organisation of its partner: the entry is theirs, its name is not.
    expect((await app.api('GET', `/audit-logs?orgId=${tenant.otherOrgId}`, { token: adminToken })).status).toBe(404);
    await expect
      .poll(async () => (await app.api('GET', '/audit-logs?action=access.cross_tenant_refused', { token: adminToken })).body.data[0] ?? null)
      .toMatchObject({ targetType: 'organization', targetId: tenant.otherOrgId, targetName: null, orgName: 'Org A' });
    // A platform administrator sees every name.
    const root = await createUser(app, { platformAdmin: true });
    const all = await app.api('GET', `/audit-logs?orgId=${tenant.orgId}&action=access.cross_tenant_refused`, { token: (await login(app, root)).accessToken });
    expect(all.body.data[0]).toMatchObject({ targetName: 'Org B' });
  });
  it('the names of a page cost one query per kind of object, whatever the number of entries (no query per entry)', async () => {
    type Fn = (...args: unknown[]) => unknown;
    for (let i = 0; i < 3; i++) await login(app, tenant.orgTechnician);
    // Background jobs stop first, so only the request's statements are counted.
    await app.server.keel.modules.stop({ graceful: true });
    const client = (app.server.keel.db as unknown as { session: { client: Record<string, Fn> } }).session.client;
    let n = 0;
    const originals: [string, Fn][] = [];
    for (const name of ['query', 'connect', 'transaction', 'exec', 'execProtocol']) {
      const original = client[name];
      if (typeof original !== 'function') continue;
      originals.push([name, original]);
      client[name] = function (this: unknown, ...args: unknown[]) {
        n++;
        return original.apply(this, args);
      };
    }
    try {
      const cost = async (limit: number) => {
        const before = n;
        const res = await app.api('GET', `/audit-logs?action=user.login&limit=${limit}`, { token: adminToken });
        expect(res.status).toBe(200);
        return { calls: n - before, entries: res.body.data.length as number, named: res.body.data.every((e: { actorName: string | null }) => e.actorName) };
      };
      await cost(1); // warms the caller's session and role caches
      const one = await cost(1);
      const all = await cost(100);
      expect(one.entries).toBe(1);
      expect(all.entries).toBeGreaterThan(2);
      expect(all.named).toBe(true);
      expect(all.calls).toBe(one.calls);
    } finally {
      for (const [name, fn] of originals) client[name] = fn;
    }
  });
});
