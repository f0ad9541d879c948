/**
 * SSO that explains itself (docs/decisions.md "SSO that explains itself"), over HTTP against a real
 * oidc-provider: the groups claim by default and mappings refused without one, `sso_required` naming
 * where to sign in, a provider in `testing` as a real trial that only the organisation's SSO
 * administrators complete (each attempt audited), and Test checking the client credentials.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, uniqueEmail, STRONG_PASSWORD, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { clock } from '../../src/platform/clock.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('SSO that explains itself', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  /** A second tenant whose organisation has a provider in testing (the trial). */
  let t2: Tenant;
  let t2Admin: string;
  let trialProviderId: string;

  const orgReadOnly = SYSTEM_ROLES.orgReadOnly.id;
  const orgTechnician = SYSTEM_ROLES.orgTechnician.id;

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    t2 = await createTenant(w.app);
    t2Admin = (await enrollTotp(w.app, (await login(w.app, t2.orgAdmin)).accessToken)).accessToken;
    const trial = await w.api('POST', '/sso/providers', {
      token: t2Admin,
      body: { name: 'Trial IdP', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, scopes: 'openid profile email groups', defaultRoleId: orgReadOnly, groupRoleMappings: [{ group: 'keel-readers', roleId: orgReadOnly }] },
    });
    expect(trial.status, JSON.stringify(trial.body)).toBe(201);
    trialProviderId = trial.body.id;
    expect((await w.api('POST', `/sso/providers/${trialProviderId}/status`, { token: t2Admin, body: { status: 'testing' } })).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });

  const isApp = (location: string) => location.startsWith(w.app.publicUrl) && !location.includes('/api/v1/sso/callback');
  function account(email: string, extra: Record<string, unknown> = {}) {
    const sub = `sub-${Math.random().toString(36).slice(2)}`;
    idp.accounts.set(sub, { sub, email, name: 'Jay Doe', ...extra });
    return sub;
  }
  const signIn = async (orgId: string, sub: string) => (await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${orgId}`, sub, isApp)).location;
  const auditOf = async (token: string, action: string) => (await w.api('GET', `/audit-logs?action=${action}&limit=100`, { token })).body.data as { result: string; targetId: string; details: Record<string, unknown> }[];

  it('a provider made without a preset or mapping reads groups from `groups`: a mapping applies the mapped role at sign-in', async () => {
    const custom = await w.app.api('POST', '/roles', { token: w.adminToken, body: { name: 'Mapped techs', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(custom.status).toBe(201);
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'No preset', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, scopes: 'openid profile email groups', defaultRoleId: orgReadOnly, groupRoleMappings: [{ group: 'fabrikam-techs', roleId: custom.body.id }] },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body.attributeMapping).toEqual({ email: 'email', name: 'name', groups: 'groups' });
    expect((await w.api('POST', `/sso/providers/${created.body.id}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    const email = uniqueEmail('mapped');
    const location = await signIn(w.tenant.orgId, account(email, { groups: ['fabrikam-techs'] }));
    const ex = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(location) } });
    expect(ex.status, location).toBe(200);
    expect(ex.body.user).toMatchObject({ email, roleId: custom.body.id });
  });

  it('a person in several mapped groups gets the mapping with the most permissions, whatever the order (roleFromGroups, shared with SCIM)', async () => {
    const t3 = await createTenant(w.app);
    const t3Admin = (await enrollTotp(w.app, (await login(w.app, t3.orgAdmin)).accessToken)).accessToken;
    const created = await w.api('POST', '/sso/providers', {
      token: t3Admin,
      body: {
        name: 'Several groups', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, scopes: 'openid profile email groups', defaultRoleId: orgReadOnly,
        groupRoleMappings: [{ group: 'contoso-readers', roleId: orgReadOnly }, { group: 'contoso-techs', roleId: orgTechnician }],
      },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect((await w.api('POST', `/sso/providers/${created.body.id}/status`, { token: t3Admin, body: { status: 'active' } })).status).toBe(200);
    const email = uniqueEmail('several');
    const location = await signIn(t3.orgId, account(email, { groups: ['contoso-readers', 'contoso-techs'] }));
    const ex = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(location) } });
    expect(ex.status, location).toBe(200);
    expect(ex.body.user).toMatchObject({ email, roleId: orgTechnician });
  });

  it('group mappings without a groups claim are refused (400 naming attributeMapping.groups), on create and on PATCH', async () => {
    const mappings = [{ group: 'fabrikam-techs', roleId: orgReadOnly }];
    // Google's OIDC sends no groups claim: its preset names none.
    const google = await w.api('POST', '/sso/providers', { token: t2Admin, body: { name: 'Google', type: 'oidc', preset: 'workspace-idp', groupRoleMappings: mappings } });
    expect(google.status).toBe(400);
    expect(google.body.code).toBe('validation_failed');
    expect(google.body.details.fields).toEqual([{ path: 'attributeMapping.groups', message: expect.stringContaining('group-to-role mappings') as unknown }]);
    const bare = await w.api('POST', '/sso/providers', { token: t2Admin, body: { name: 'Bare', type: 'oidc', attributeMapping: { email: 'email', name: 'name' }, groupRoleMappings: mappings } });
    expect(bare.status).toBe(400);
    expect(bare.body.details.fields[0].path).toBe('attributeMapping.groups');
    // PATCH: clearing the claim while mappings exist, or adding mappings to a provider without one.
    const cleared = await w.api('PATCH', `/sso/providers/${trialProviderId}`, { token: t2Admin, body: { attributeMapping: { email: 'email', name: 'name' } } });
    expect(cleared.status).toBe(400);
    expect(cleared.body.details.fields[0].path).toBe('attributeMapping.groups');
    const plain = await w.api('POST', '/sso/providers', { token: t2Admin, body: { name: 'Google ok', type: 'oidc', preset: 'workspace-idp' } });
    expect(plain.status).toBe(201);
    const added = await w.api('PATCH', `/sso/providers/${plain.body.id}`, { token: t2Admin, body: { groupRoleMappings: mappings } });
    expect(added.status).toBe(400);
    expect(added.body.details.fields[0].path).toBe('attributeMapping.groups');
    // With the claim named, the same mappings are saved.
    const named = await w.api('PATCH', `/sso/providers/${plain.body.id}`, { token: t2Admin, body: { attributeMapping: { email: 'email', name: 'name', groups: 'groups' }, groupRoleMappings: mappings } });
    expect(named.status).toBe(200);
    expect(named.body.groupRoleMappings).toEqual(mappings);
    expect((await w.api('DELETE', `/sso/providers/${plain.body.id}`, { token: t2Admin })).status).toBe(204);
  });

  it('presets name the IdP they are for, and say whether they carry a groups claim', async () => {
    const res = await w.api('GET', '/sso/presets', { token: w.adminToken });
    const byId = Object.fromEntries((res.body.data as { id: string; name: string; groupRoleMappingsSupported: boolean }[]).map((p) => [p.id, p]));
    expect(byId['cloud-directory']).toMatchObject({ name: 'Microsoft Entra ID (OIDC)', groupRoleMappingsSupported: true });
    expect(byId['workforce-idp']).toMatchObject({ name: 'Okta (OIDC)', groupRoleMappingsSupported: true });
    expect(byId['workspace-idp']).toMatchObject({ name: 'Google Workspace (OIDC)', groupRoleMappingsSupported: false });
    expect(byId['cloud-directory-saml']).toMatchObject({ name: 'Microsoft Entra ID (SAML)', groupRoleMappingsSupported: true });
  });

  it('a provider in testing: /sso/login starts a trial (302 to the IdP, not 404), while /sso/check offers no SSO', async () => {
    const res = await w.app.api('GET', `/sso/login/${t2.orgId}`);
    expect(res.status).toBe(302);
    expect(new URL(res.headers.get('location')!).origin).toBe(idp.issuer);
    expect((await w.app.api('GET', `/sso/check/${t2.orgId}`)).body).toMatchObject({ ssoEnabled: false, loginUrl: null });
  });

  it('trial: an administrator of the organisation completes the sign-in (nothing provisioned, no role change), audited sso.login.trial', async () => {
    // A second administrator (the first stays, so a role change would not be held back as the last admin's).
    const admin = await createUser(w.app, { email: uniqueEmail('trial-admin'), org: { orgId: t2.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const location = await signIn(t2.orgId, account(admin.email, { groups: ['keel-readers'] }));
    const ex = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(location) } });
    expect(ex.status, location).toBe(200);
    // The group mapping would give Read Only: a trial reports it and changes nothing.
    expect(ex.body.user).toMatchObject({ id: admin.id, roleId: SYSTEM_ROLES.orgAdmin.id });
    expect((await w.api('GET', `/audit-logs?action=user.role.assign&targetId=${admin.id}`, { token: t2Admin })).body.data).toEqual([]);
    const accepted = (await auditOf(t2Admin, 'sso.login.trial')).filter((e) => e.targetId === admin.id && e.result === 'success');
    expect(accepted).toHaveLength(1);
    expect(accepted[0]?.details).toMatchObject({ providerId: trialProviderId, groups: ['keel-readers'], mappedRoleId: orgReadOnly });
    const logins = await w.api('GET', `/audit-logs?action=user.login&targetId=${admin.id}`, { token: t2Admin });
    expect(logins.body.data[0].details).toMatchObject({ method: 'sso', providerId: trialProviderId, trial: true });
  });

  it('trial: anyone else is refused with provider_testing (the organisation kept in the address), audited; an unknown address is not provisioned', async () => {
    const tech = t2.orgTechnician;
    expect(await signIn(t2.orgId, account(tech.email))).toBe(`${w.app.publicUrl}/login?error=provider_testing&org=${t2.orgId}`);
    const stranger = uniqueEmail('trial-stranger');
    // The next refusal in a minute of its own: refused sign-ins are aggregated per source and minute (audit/security-events.ts).
    clock.advance(60_000);
    expect(await signIn(t2.orgId, account(stranger))).toBe(`${w.app.publicUrl}/login?error=provider_testing&org=${t2.orgId}`);
    const refused = (await auditOf(t2Admin, 'sso.login.trial')).filter((e) => e.result === 'failure');
    expect(refused.map((e) => e.targetId).sort()).toEqual([tech.id, trialProviderId].sort());
    expect(refused.every((e) => e.details.error === 'provider_testing')).toBe(true);
    const users = await w.api('GET', `/users?search=${encodeURIComponent(stranger)}`, { token: t2Admin });
    expect(users.body.data).toEqual([]);
    // The technician's role is unchanged: still a technician.
    const me = await login(w.app, tech);
    expect(me.body.user.roleId).toBe(orgTechnician);
  });

  it('Test checks discovery and the client credentials: accepted with the right secret, reported as refused with a wrong one', async () => {
    const right = await w.api('POST', `/sso/providers/${trialProviderId}/test`, { token: t2Admin });
    expect(right.status).toBe(200);
    expect(right.body).toMatchObject({ ok: true, credentials: { result: 'accepted' } });
    expect(right.body.message).toContain('invalid_grant');
    expect((await w.api('PATCH', `/sso/providers/${trialProviderId}`, { token: t2Admin, body: { clientSecret: 'not-the-secret' } })).status).toBe(200);
    try {
      const wrong = await w.api('POST', `/sso/providers/${trialProviderId}/test`, { token: t2Admin });
      expect(wrong.body).toMatchObject({ ok: false, credentials: { result: 'rejected' } });
      expect(wrong.body.message).toContain('invalid_client');
      expect(JSON.stringify(wrong.body)).not.toContain('not-the-secret');
    } finally {
      await w.api('PATCH', `/sso/providers/${trialProviderId}`, { token: t2Admin, body: { clientSecret: idp.clientSecret } });
    }
  });

  it("Test's token request goes through the outbound guard: a private token endpoint is refused before any connection", async () => {
    const saved = (await w.api('GET', `/sso/providers/${trialProviderId}`, { token: t2Admin })).body.tokenUrl as string;
    expect((await w.api('PATCH', `/sso/providers/${trialProviderId}`, { token: t2Admin, body: { tokenUrl: 'http://10.1.2.3/token' } })).status).toBe(200);
    try {
      const res = await w.api('POST', `/sso/providers/${trialProviderId}/test`, { token: t2Admin });
      expect(res.body).toMatchObject({ ok: false, credentials: { result: 'unknown' } });
      expect(res.body.credentials.message).toContain('blocked_address');
    } finally {
      await w.api('PATCH', `/sso/providers/${trialProviderId}`, { token: t2Admin, body: { tokenUrl: saved } });
    }
  });

  it('403 sso_required names where to sign in (details.loginUrl)', async () => {
    const member = await createUser(w.app, { email: uniqueEmail('enforced'), org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
    const list = await w.api('GET', '/sso/providers', { token: w.adminToken });
    const active = (list.body.data as { id: string; status: string }[]).find((p) => p.status === 'active');
    expect((await w.api('PATCH', `/sso/providers/${active?.id}`, { token: w.adminToken, body: { enforceSSO: true } })).status).toBe(200);
    const res = await w.app.api('POST', '/auth/login', { body: { email: member.email, password: STRONG_PASSWORD } });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'sso_required', details: { loginUrl: `${w.app.publicUrl}/api/v1/sso/login/${w.tenant.orgId}` } });
  });
});
