/**
 * SSO providers (docs/specification.md "Single sign-on: providers"): presets; create/read/patch/delete/status/test; who may
 * write (organizations:write + an mfa session); tenant isolation; one active provider per
 * organisation; the client secret sealed and never shown; OIDC discovery through the outbound guard
 * (a private or loopback issuer refused unless ALLOW_INSECURE_TARGETS).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, uniqueEmail } from '../helpers/fixtures.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { captureLog, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('SSO providers', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  const body = () => ({ name: 'Okta', type: 'oidc', preset: 'identity-platform', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id });

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
  }, 60_000);
  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });

  it('GET /sso/presets lists every preset with type, scopes and mapping; SAML presets carry the URI table', async () => {
    const res = await w.api('GET', '/sso/presets', { token: w.adminToken });
    expect(res.status).toBe(200);
    const ids = (res.body.data as { id: string }[]).map((p) => p.id).sort();
    expect(ids).toEqual(['cloud-directory', 'cloud-directory-saml', 'federation-server-saml', 'identity-platform', 'portal-saml', 'workforce-idp', 'workforce-idp-saml', 'workspace-idp', 'workspace-idp-saml']);
    const byId = Object.fromEntries((res.body.data as { id: string }[]).map((p) => [p.id, p])) as Record<string, any>;
    expect(byId['workforce-idp'].scopes).toBe('openid profile email groups');
    expect(byId['cloud-directory']).toMatchObject({ type: 'oidc', scopes: 'openid profile email', attributeMapping: { email: 'email', name: 'name' } });
    expect(byId['portal-saml'].type).toBe('saml');
    expect(byId['portal-saml'].samlAttributes).toContainEqual({ uri: 'urn:oid:0.9.2342.19200300.100.1.3', field: 'email' });
    expect(byId['portal-saml'].samlAttributes).toContainEqual({ uri: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/groups', field: 'groups' });
    expect(byId['portal-saml'].samlAttributes).toHaveLength(9);
    expect((await w.app.api('GET', '/sso/presets')).status).toBe(401);
  });

  it('create: 201 inactive, discovery fills the endpoints, hasClientSecret instead of the secret, the secret sealed at rest, audited', async () => {
    const res = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'inactive', hasClientSecret: true, orgId: w.tenant.orgId, scopes: 'openid profile email', authorizationUrl: `${idp.issuer}/auth`, tokenUrl: `${idp.issuer}/token`, jwksUrl: `${idp.issuer}/jwks`, userInfoUrl: `${idp.issuer}/me` });
    expect(res.body).not.toHaveProperty('clientSecret');
    const rows = await w.app.server.keel.db.execute(sql`select client_secret from sso_providers where id = ${res.body.id}`);
    const stored = String((rows as { rows: { client_secret: unknown }[] }).rows[0]?.client_secret);
    expect(stored).toMatch(/^v1\./);
    expect(stored).not.toContain(idp.clientSecret);
    const got = await w.api('GET', `/sso/providers/${res.body.id}`, { token: w.adminToken });
    expect(got.body).toMatchObject({ id: res.body.id, hasClientSecret: true });
    const list = await w.api('GET', '/sso/providers', { token: w.adminToken });
    expect(list.body.data.map((p: { id: string }) => p.id)).toContain(res.body.id);
    const audit = await w.api('GET', `/audit-logs?action=sso.provider.create&targetId=${res.body.id}`, { token: w.adminToken });
    expect(audit.body.data[0].details).toMatchObject({ type: 'oidc', status: 'inactive' });
  });

  it('writes need organizations:write and an mfa session; reads need only the organisation', async () => {
    const plain = await login(w.app, await createUser(w.app, { org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } })); // password only: mfa false
    const noMfa = await w.api('POST', '/sso/providers', { token: plain.accessToken, body: body() });
    expect(noMfa.status).toBe(403);
    expect(noMfa.body.code).toBe('mfa_required');
    const tech = await login(w.app, w.tenant.orgTechnician);
    const techMfa = await enrollTotp(w.app, tech.accessToken);
    const denied = await w.api('POST', '/sso/providers', { token: techMfa.accessToken, body: body() });
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('permission_denied');
    expect((await w.api('GET', '/sso/providers', { token: tech.accessToken })).status).toBe(200);
  });

  it('defaultRoleId and mapped roles must be organisation-scoped roles usable in the organisation (400)', async () => {
    const bad = await w.api('POST', '/sso/providers', { token: w.adminToken, body: { ...body(), defaultRoleId: SYSTEM_ROLES.partnerAdmin.id } });
    expect(bad.status).toBe(400);
    expect(bad.body.details.fields).toContainEqual({ path: 'defaultRoleId', message: expect.stringContaining('organization-scoped') as unknown });
    const other = await w.app.api('POST', '/roles', { token: (await enrollTotp(w.app, (await login(w.app, await createUser(w.app, { org: { orgId: w.tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } }))).accessToken)).accessToken, body: { name: 'Other org role', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(other.status).toBe(201);
    const foreign = await w.api('POST', '/sso/providers', { token: w.adminToken, body: { ...body(), groupRoleMappings: [{ group: 'x', roleId: other.body.id }] } });
    expect(foreign.status).toBe(400);
    expect(foreign.body.details.fields[0].path).toBe('groupRoleMappings.0.roleId');
  });

  it('PATCH changes the spec fields, audits the changed field names (never values), a new secret counts as a change', async () => {
    const created = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    const res = await w.api('PATCH', `/sso/providers/${created.body.id}`, { token: w.adminToken, body: { name: 'Okta EU', allowedDomains: 'example.com', clientSecret: 'rotated-secret-value', scopes: 'openid profile email' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Okta EU', allowedDomains: 'example.com', hasClientSecret: true });
    const audit = await w.api('GET', `/audit-logs?action=sso.provider.update&targetId=${created.body.id}`, { token: w.adminToken });
    expect(audit.body.data[0].changes.sort()).toEqual(['allowedDomains', 'clientSecret', 'name']);
    expect(JSON.stringify(audit.body)).not.toContain('rotated-secret-value');
  });

  it('one active provider per organisation: activating a second is 409; status changes are audited', async () => {
    const a = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    const b = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    expect((await w.api('POST', `/sso/providers/${a.body.id}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    const second = await w.api('POST', `/sso/providers/${b.body.id}/status`, { token: w.adminToken, body: { status: 'active' } });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('provider_already_active');
    expect((await w.api('POST', `/sso/providers/${b.body.id}/status`, { token: w.adminToken, body: { status: 'testing' } })).body.status).toBe('testing');
    const audit = await w.api('GET', `/audit-logs?action=sso.provider.status.update&targetId=${a.body.id}`, { token: w.adminToken });
    expect(audit.body.data[0].details).toEqual({ from: 'inactive', to: 'active' });
    await w.api('POST', `/sso/providers/${a.body.id}/status`, { token: w.adminToken, body: { status: 'inactive' } });
  });

  raceTest('10 providers of one organisation activated at once: one becomes active, the others 409 (the database decides)', async () => {
    const t = await createTenant(w.app);
    const admin = (await enrollTotp(w.app, (await login(w.app, t.orgAdmin)).accessToken)).accessToken;
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await w.api('POST', '/sso/providers', { token: admin, body: { name: `P${i}`, type: 'saml' } })).body.id as string);
    const answers = await together(10, (i) => w.app.api('POST', `/sso/providers/${ids[i]}/status`, { token: admin, body: { status: 'active' } }));
    expectOneWinner(answers, 200, [409]);
    const list = await w.app.api('GET', '/sso/providers', { token: admin });
    expect((list.body.data as { status: string }[]).filter((p) => p.status === 'active')).toHaveLength(1);
  });

  it('another tenant sees none of it: 404 on every provider route', async () => {
    const p = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    const stranger = await createUser(w.app, { org: { orgId: w.tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const t = (await enrollTotp(w.app, (await login(w.app, stranger)).accessToken)).accessToken;
    const id = p.body.id as string;
    const calls: [string, string, unknown?][] = [
      ['GET', `/sso/providers/${id}`],
      ['PATCH', `/sso/providers/${id}`, { name: 'x' }],
      ['DELETE', `/sso/providers/${id}`],
      ['POST', `/sso/providers/${id}/status`, { status: 'active' }],
      ['POST', `/sso/providers/${id}/test`],
    ];
    // An organisation user of a sibling organisation, and the administrator of another partner.
    const otherPartner = await createTenant(w.app);
    const outsider = (await enrollTotp(w.app, (await login(w.app, otherPartner.partnerAdmin)).accessToken)).accessToken;
    for (const who of [t, outsider]) {
      for (const [method, path, b] of calls) {
        const res = await w.api(method, path, { token: who, ...(b ? { body: b } : {}) });
        expect(res.status, `${method} ${path}`).toBe(404);
      }
    }
    const list = await w.api('GET', `/sso/providers?orgId=${w.tenant.orgId}`, { token: t });
    expect(list.status).toBe(404);
  });

  it('test reports discovery; DELETE removes the provider, its login sessions and identity links (audited)', async () => {
    const p = await w.api('POST', '/sso/providers', { token: w.adminToken, body: body() });
    const report = await w.api('POST', `/sso/providers/${p.body.id}/test`, { token: w.adminToken });
    expect(report.body).toMatchObject({ ok: true, type: 'oidc', discovered: { issuer: idp.issuer, tokenUrl: `${idp.issuer}/token` } });
    await w.api('POST', `/sso/providers/${p.body.id}/status`, { token: w.adminToken, body: { status: 'active' } });
    // One completed login (an identity link) and one pending login session.
    idp.accounts.set('deleted-sub', { sub: 'deleted-sub', email: uniqueEmail('del'), name: 'Del Eted' });
    const browser = new Browser(w.app);
    const done = await browser.signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, 'deleted-sub', (l) => l.startsWith(w.app.publicUrl) && !l.includes('/api/v1/sso/'));
    expect(done.location).toContain('#ssoCode=');
    expect((await w.app.api('GET', `/sso/login/${w.tenant.orgId}`)).status).toBe(302);
    const db = w.app.server.keel.db;
    const count = async (table: 'single_use_records' | 'sso_identities') => {
      const result: unknown = await db.execute(
        table === 'single_use_records'
          ? sql`select count(*)::int as n from single_use_records where purpose = 'sso_login' and subject_id = ${p.body.id}`
          : sql`select count(*)::int as n from sso_identities where provider_id = ${p.body.id}`,
      );
      return Number((result as { rows: { n: unknown }[] }).rows[0]?.n);
    };
    expect(await count('single_use_records')).toBe(1);
    expect(await count('sso_identities')).toBe(1);
    expect((await w.api('DELETE', `/sso/providers/${p.body.id}`, { token: w.adminToken })).status).toBe(204);
    expect(await count('single_use_records')).toBe(0);
    expect(await count('sso_identities')).toBe(0);
    expect((await w.api('GET', `/sso/providers/${p.body.id}`, { token: w.adminToken })).status).toBe(404);
    const audit = await w.api('GET', `/audit-logs?action=sso.provider.delete&targetId=${p.body.id}`, { token: w.adminToken });
    expect(audit.body.data).toHaveLength(1);
  });

  describe('without ALLOW_INSECURE_TARGETS', () => {
    let strict: TestApp;
    let token: string;
    const logs = captureLog();
    beforeAll(async () => {
      strict = await startTestApp({ env: { ALLOW_INSECURE_TARGETS: 'false', SSO_EXCHANGE_LIMIT: '3' }, log: logs.log });
      const t = await createTenant(strict);
      token = (await enrollTotp(strict, (await login(strict, t.orgAdmin)).accessToken)).accessToken;
    }, 60_000);
    afterAll(async () => strict?.close());

    it('a discovery document on a loopback or private address is refused: the provider is saved with a warning, test reports why, the IdP never called', async () => {
      const before = idp.seen.length;
      const res = await strict.api('POST', '/sso/providers', { token, body: { ...body(), defaultRoleId: undefined } });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ authorizationUrl: null, tokenUrl: null });
      // http:// is refused by openid-client itself (allowInsecureRequests only with the setting) before the guard would.
      expect(logs.text.some((l) => l.includes('OIDC discovery failed') && l.includes('only requests to HTTPS are allowed'))).toBe(true);
      const report = await strict.api('POST', `/sso/providers/${res.body.id}/test`, { token });
      expect(report.body).toMatchObject({ ok: false, type: 'oidc' });
      expect(report.body.message).toMatch(/only requests to HTTPS/);
      const loopbackTls = await strict.api('PATCH', `/sso/providers/${res.body.id}`, { token, body: { issuer: idp.issuer.replace('http:', 'https:') } });
      expect(loopbackTls.status).toBe(200);
      expect((await strict.api('POST', `/sso/providers/${res.body.id}/test`, { token })).body.message).toMatch(/blocked_address/);
      await strict.api('PATCH', `/sso/providers/${res.body.id}`, { token, body: { issuer: 'https://10.20.30.40/tenant' } });
      expect((await strict.api('POST', `/sso/providers/${res.body.id}/test`, { token })).body.message).toMatch(/blocked_address/);
      expect(idp.seen.length).toBe(before);
    });

    it('a login with an active provider whose endpoints cannot be discovered: 400 sso_provider_incomplete', async () => {
      const p = await strict.api('POST', '/sso/providers', { token, body: { name: 'Broken', type: 'oidc', issuer: 'https://10.9.8.7/', clientId: 'c', clientSecret: 's' } });
      expect((await strict.api('POST', `/sso/providers/${p.body.id}/status`, { token, body: { status: 'active' } })).status).toBe(200);
      const orgId = p.body.orgId as string;
      const res = await strict.api('GET', `/sso/login/${orgId}`);
      expect(res.status).toBe(400);
      expect(res.body.code).toBe('sso_provider_incomplete');
    });

    it('POST /sso/exchange is limited per IP (SSO_EXCHANGE_LIMIT per minute): 429 with retryAfter', async () => {
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push(await strict.api('POST', '/sso/exchange', { body: { code: `nope-${i}` } }));
      expect(answers.map((a) => a.status)).toEqual([400, 400, 400, 429]);
      expect(answers[3]?.body.retryAfter).toBeGreaterThan(0);
    });
  });
});
