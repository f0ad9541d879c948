import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { apiKeys, organizationUsers } from '../../src/modules/access/schema.js';
import { users } from '../../src/modules/identity/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { clock } from '../../src/platform/clock.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { createWorld, insertRole, keys, orgUserWithRole, type World } from './helpers.js';

describe.skipIf(!backendAvailable())(`API keys (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const newKey = (token: string, body: Record<string, unknown>) => app.api('POST', '/api-keys', { token, body });

  it('is shown once, stored as SHA-256, and authenticates as a bearer token', async () => {
    const res = await newKey(w.tokens.orgAdmin, { name: 'CI', permissions: [{ resource: 'users', action: 'view' }] });
    expect(res.status).toBe(201);
    expect(res.body.key).toMatch(/^kk_[A-Za-z0-9_-]{40,}$/);
    expect(res.body).toMatchObject({ name: 'CI', scope: 'organization', orgId: w.orgId, partnerId: null, expiresAt: null, lastUsedAt: null });
    expect(keys(res.body.permissions)).toEqual(['users:read']);
    expect(res.body.keyPrefix).toBe(res.body.key.slice(0, 11));

    const [row] = await app.server.keel.db.select().from(apiKeys).where(eq(apiKeys.id, res.body.id));
    expect(row!.keyHash).toBe(sha256Hex(res.body.key));
    expect(JSON.stringify(row)).not.toContain(res.body.key);

    const list = await app.api('GET', '/api-keys', { token: w.tokens.orgAdmin });
    expect(list.status).toBe(200);
    const listed = list.body.data.find((k: any) => k.id === res.body.id);
    expect(listed).toBeDefined();
    expect(listed).not.toHaveProperty('key');

    const used = await app.api('GET', '/roles', { token: res.body.key });
    expect(used.status).toBe(200);
    const again = await app.api('GET', '/api-keys', { token: w.tokens.orgAdmin });
    expect(again.body.data.find((k: any) => k.id === res.body.id).lastUsedAt).not.toBeNull();
  });

  it('grants only its own list, even when its creator has more', async () => {
    const res = await newKey(w.tokens.orgAdmin, { name: 'narrow', permissions: [{ resource: 'sites', action: 'read' }] });
    expect((await app.api('GET', `/orgs/${w.orgId}/sites`, { token: res.body.key })).status).toBe(200);
    const denied = await app.api('GET', '/roles', { token: res.body.key });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('permission_denied');
  });

  it('cannot be created beyond the creator’s permissions', async () => {
    const res = await newKey(w.tokens.orgReadOnly, { name: 'x', permissions: [{ resource: 'users', action: 'write' }] });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'privilege_escalation', details: { permissions: ['users:write'] } });
    const wildcard = await newKey(w.tokens.orgReadOnly, { name: 'x', permissions: [{ resource: '*', action: '*' }] });
    expect(wildcard.status).toBe(403);
    const unknown = await newKey(w.tokens.orgReadOnly, { name: 'x', permissions: [{ resource: 'users', action: 'fly' }] });
    expect(unknown.status).toBe(400);
  });

  it('never exceeds the creator’s current permissions: a role change narrows the key at once', async () => {
    const role = await insertRole(app, { scope: 'organization', orgId: w.orgId, name: 'Keyholder', perms: ['users:read', 'sites:read'] });
    const { token } = await orgUserWithRole(app, w.orgId, role);
    const key = (await newKey(token, { name: 'k', permissions: [{ resource: 'users', action: 'read' }, { resource: 'sites', action: 'read' }] })).body.key;
    expect((await app.api('GET', '/roles', { token: key })).status).toBe(200);
    // The admin takes users:read from the creator's role: the key loses it on the next request.
    const patch = await app.api('PATCH', `/roles/${role}`, { token: w.tokens.orgAdmin, body: { permissions: [{ resource: 'sites', action: 'read' }] } });
    expect(patch.status).toBe(200);
    expect((await app.api('GET', '/roles', { token: key })).status).toBe(403);
    expect((await app.api('GET', `/orgs/${w.orgId}/sites`, { token: key })).status).toBe(200);
    // Given back to the role, the key has it again (its own list still names it).
    await app.api('PATCH', `/roles/${role}`, { token: w.tokens.orgAdmin, body: { permissions: [{ resource: 'users', action: 'read' }] } });
    expect((await app.api('GET', '/roles', { token: key })).status).toBe(200);
  });

  it('is revoked at once', async () => {
    const created = await newKey(w.tokens.orgAdmin, { name: 'revoke me', permissions: [{ resource: 'users', action: 'read' }] });
    expect((await app.api('GET', '/roles', { token: created.body.key })).status).toBe(200);
    const del = await app.api('DELETE', `/api-keys/${created.body.id}`, { token: w.tokens.orgAdmin });
    expect(del.status).toBe(204);
    const after = await app.api('GET', '/roles', { token: created.body.key });
    expect(after.status).toBe(401);
    expect((await app.api('DELETE', `/api-keys/${created.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    const list = await app.api('GET', '/api-keys', { token: w.tokens.orgAdmin });
    expect(list.body.data.map((k: any) => k.id)).not.toContain(created.body.id);
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, created.body.id));
    expect(audit.map((a) => a.action).sort()).toEqual(['api_key.create', 'api_key.revoke']);
  });

  it('another user’s key cannot be revoked (404)', async () => {
    const created = await newKey(w.tokens.orgAdmin, { name: 'mine', permissions: [{ resource: 'users', action: 'read' }] });
    const res = await app.api('DELETE', `/api-keys/${created.body.id}`, { token: w.tokens.orgReadOnly });
    expect(res.status).toBe(404);
    expect((await app.api('GET', '/roles', { token: created.body.key })).status).toBe(200);
  });

  it('expires', async () => {
    const created = await newKey(w.tokens.orgAdmin, {
      name: 'short', permissions: [{ resource: 'users', action: 'read' }], expiresAt: new Date(Date.now() + 60_000).toISOString(),
    });
    expect(created.status).toBe(201);
    expect((await app.api('GET', '/roles', { token: created.body.key })).status).toBe(200);
    clock.advance(61_000);
    try {
      expect((await app.api('GET', '/roles', { token: created.body.key })).status).toBe(401);
    } finally {
      clock.reset();
    }
    const past = await newKey(w.tokens.orgAdmin, { name: 'past', permissions: [{ resource: 'users', action: 'read' }], expiresAt: '2001-01-01T00:00:00Z' });
    expect(past.status).toBe(400);
  });

  it('stops working when its creator is disabled or removed from the organisation', async () => {
    const { user, token } = await orgUserWithRole(app, w.orgId, (await insertRole(app, { scope: 'organization', orgId: w.orgId, perms: ['users:read'] })));
    const k1 = (await newKey(token, { name: 'a', permissions: [{ resource: 'users', action: 'read' }] })).body.key;
    const db = app.server.keel.db;
    await db.update(users).set({ status: 'disabled' }).where(eq(users.id, user.id));
    expect((await app.api('GET', '/roles', { token: k1 })).status).toBe(401);
    await db.update(users).set({ status: 'active' }).where(eq(users.id, user.id));
    expect((await app.api('GET', '/roles', { token: k1 })).status).toBe(200);
    await db.delete(organizationUsers).where(eq(organizationUsers.userId, user.id));
    // What the users module does on removal: tell every process the user's association changed.
    await app.server.keel.invalidation.publish('user', user.id);
    expect((await app.api('GET', '/roles', { token: k1 })).status).toBe(401);
  });

  it('cannot manage keys, and is never a step-up (mfa) session', async () => {
    const created = await newKey(w.tokens.orgAdmin, { name: 'k', permissions: [{ resource: '*', action: 'read' }] });
    const res = await app.api('POST', '/api-keys', { token: created.body.key, body: { name: 'child', permissions: [{ resource: 'users', action: 'read' }] } });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('user_required');
    const principal = await (await import('../../src/modules/access/api-keys.js')).authenticateApiKey(app.server.keel, created.body.key);
    expect(principal).toMatchObject({ kind: 'api_key', mfa: false, sessionId: null, userId: w.orgAdmin.id });
  });

  it('keeps the creator’s scope rules: another tenant is 404', async () => {
    const created = await newKey(w.tokens.orgAdmin, { name: 'k', permissions: [{ resource: 'users', action: 'read' }] });
    expect((await app.api('GET', `/roles?orgId=${w.otherOrgId}`, { token: created.body.key })).status).toBe(404);
  });

  it('rejects unknown and garbage keys with 401', async () => {
    expect((await app.api('GET', '/roles', { token: 'kk_nope' })).status).toBe(401);
    expect((await app.api('GET', '/roles', { token: `kk_${'a'.repeat(300)}` })).status).toBe(401);
  });
});
