/**
 * Partner-level SSO (docs/decisions.md "Partner-level SSO") over HTTP against a real oidc-provider:
 * a partner's slug, its own provider (`partnerId` in place of `orgId`), JIT provisioning into the
 * partner with a default partner role and orgAccess, group mappings to partner roles and selected
 * organisation lists, the trust rules (caller covers what it grants, partner-verified domains only,
 * never another partner's or an organisation's person), enforceSSO with break-glass, discovery.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { and, eq, sql } from 'drizzle-orm';
import { backendAvailable } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { partnerUsers } from '../../src/modules/access/schema.js';
import { partners } from '../../src/modules/tenancy/schema.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('partner-level SSO against a real OpenID provider', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  let rival: Tenant;
  let partnerToken: string;
  let providerId: string;
  const slug = `msp-${randomBytes(3).toString('hex')}`;
  const fresh = (label: string) => `${label}-${randomBytes(4).toString('hex')}.example`;
  const partnerDomain = fresh('msp');
  const rivalDomain = fresh('rival');
  const orgDomain = fresh('org');
  const tech = SYSTEM_ROLES.partnerTechnician.id;
  const readOnly = SYSTEM_ROLES.partnerReadOnly.id;

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    rival = await createTenant(w.app);
    partnerToken = (await enrollTotp(w.app, (await login(w.app, w.tenant.partnerAdmin)).accessToken)).accessToken;
    await w.app.server.keel.db.insert(verifiedDomains).values([
      { partnerId: w.tenant.partnerId, domain: partnerDomain, status: 'verified', token: 'p1', verifiedAt: new Date() },
      { partnerId: rival.partnerId, domain: rivalDomain, status: 'verified', token: 'p2', verifiedAt: new Date() },
      { orgId: w.tenant.orgId, domain: orgDomain, status: 'verified', token: 'o1', verifiedAt: new Date() },
    ]);
  }, 90_000);
  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });

  const isApp = (location: string) => location.startsWith(w.app.publicUrl) && !location.includes('/api/v1/sso/callback');
  function account(email: string, extra: Record<string, unknown> = {}) {
    const sub = `sub-${Math.random().toString(36).slice(2)}`;
    idp.accounts.set(sub, { sub, email, name: 'Tess Tech', email_verified: true, ...extra });
    return sub;
  }
  const signIn = async (sub: string) => (await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/partner/${slug}`, sub, isApp)).location;
  const membership = async (userId: string) => (await w.app.server.keel.db.select().from(partnerUsers).where(eq(partnerUsers.userId, userId)))[0];
  const auditOf = async (action: string) =>
    w.app.server.keel.db.execute<{ partner_id: string | null; org_id: string | null; result: string; target_id: string | null; details: Record<string, unknown> }>(sql`select partner_id, org_id, result, target_id, details from audit_logs where action = ${action} order by created_at`) as unknown as Promise<{ rows: { partner_id: string | null; org_id: string | null; result: string; target_id: string | null; details: Record<string, unknown> }[] }>;
  const providerBody = (extra: Record<string, unknown> = {}) => ({
    partnerId: w.tenant.partnerId, name: 'MSP Entra', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret,
    defaultRoleId: tech, orgAccess: 'selected', orgIds: [w.tenant.orgId], ...extra,
  });

  it('a partner carries a unique lowercase slug: validated, 409 when taken, audited; its public page answers its name only', async () => {
    const [rivalRow] = await w.app.server.keel.db.select({ slug: partners.slug }).from(partners).where(eq(partners.id, rival.partnerId));
    expect(rivalRow?.slug).toMatch(/^partner-[0-9a-f]{6}$/);
    const bad = await w.api('PATCH', `/partners/${w.tenant.partnerId}`, { token: partnerToken, body: { slug: 'Bad_Slug' } });
    expect(bad.status).toBe(400);
    const taken = await w.api('PATCH', `/partners/${w.tenant.partnerId}`, { token: partnerToken, body: { slug: rivalRow?.slug } });
    expect([taken.status, taken.body.code]).toEqual([409, 'partner_slug_taken']);
    const set = await w.api('PATCH', `/partners/${w.tenant.partnerId}`, { token: partnerToken, body: { slug } });
    expect([set.status, set.body.slug]).toEqual([200, slug]);
    const page = await w.app.api('GET', `/sso/check/partner/${slug}`);
    expect(page.body).toEqual({ name: set.body.name, ssoEnabled: false, providerName: null });
    expect((await w.app.api('GET', `/sso/check/partner/no-such-${slug}`)).status).toBe(404);
    expect((await w.app.api('GET', `/sso/login/partner/${slug}`)).status).toBe(404);
  });

  it('a partner provider: exactly one owner, partner roles and organisations only, not for organisation users; then active', async () => {
    const both = await w.api('POST', '/sso/providers', { token: partnerToken, body: { ...providerBody(), orgId: w.tenant.orgId } });
    expect(both.status).toBe(400);
    const orgRole = await w.api('POST', '/sso/providers', { token: partnerToken, body: providerBody({ defaultRoleId: SYSTEM_ROLES.orgReadOnly.id }) });
    expect([orgRole.status, orgRole.body.details.fields[0].path]).toEqual([400, 'defaultRoleId']);
    const foreignOrg = await w.api('POST', '/sso/providers', { token: partnerToken, body: providerBody({ orgIds: [rival.orgId] }) });
    expect([foreignOrg.status, foreignOrg.body.details.fields[0].path]).toEqual([400, 'orgIds']);
    const foreignGlass = await w.api('POST', '/sso/providers', { token: partnerToken, body: providerBody({ breakGlassUserIds: [rival.partnerAdmin.id] }) });
    expect([foreignGlass.status, foreignGlass.body.details.fields[0].path]).toEqual([400, 'breakGlassUserIds']);
    // Another partner's admin naming this partner: 404, nothing created.
    const rivalToken = (await enrollTotp(w.app, (await login(w.app, rival.partnerAdmin)).accessToken)).accessToken;
    expect((await w.api('POST', '/sso/providers', { token: rivalToken, body: providerBody() })).status).toBe(404);
    expect((await w.api('POST', '/sso/providers', { token: w.adminToken, body: providerBody() })).status).toBe(404);

    const created = await w.api('POST', '/sso/providers', {
      token: partnerToken,
      body: providerBody({ groupRoleMappings: [{ group: 'noc', roleId: readOnly, orgIds: [w.tenant.otherOrgId] }, { group: 'leads', roleId: tech }] }),
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body).toMatchObject({ partnerId: w.tenant.partnerId, orgId: null, orgAccess: 'selected', orgIds: [w.tenant.orgId], breakGlassUserIds: [] });
    providerId = created.body.id;
    expect((await w.api('GET', `/sso/providers?partnerId=${w.tenant.partnerId}`, { token: partnerToken })).body.data.map((p: { id: string }) => p.id)).toEqual([providerId]);
    expect((await w.api('GET', `/sso/providers/${providerId}`, { token: rivalToken })).status).toBe(404);
    expect((await w.api('GET', `/sso/providers/${providerId}`, { token: w.adminToken })).status).toBe(404);
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: partnerToken, body: { status: 'active' } })).status).toBe(200);
    expect((await w.app.api('GET', `/sso/check/partner/${slug}`)).body).toMatchObject({ ssoEnabled: true, providerName: 'MSP Entra' });
    const audit = (await auditOf('sso.provider.create')).rows.find((r) => r.target_id === providerId);
    expect(audit).toMatchObject({ partner_id: w.tenant.partnerId, org_id: null });
  });

  it('JIT provisioning into the partner with the default partner role and orgAccess', async () => {
    const email = `tess-${randomBytes(3).toString('hex')}@${partnerDomain}`;
    const location = await signIn(account(email));
    const ex = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(location) } });
    expect(ex.status, location).toBe(200);
    expect(await membership(ex.body.user.id)).toMatchObject({ partnerId: w.tenant.partnerId, roleId: tech, orgAccess: 'selected', orgIds: [w.tenant.orgId] });
    const provisioned = (await auditOf('user.sso.provision')).rows.find((r) => r.target_id === ex.body.user.id);
    expect(provisioned).toMatchObject({ partner_id: w.tenant.partnerId, details: { providerId, roleId: tech, orgAccess: 'selected' } });
    // The session acts in the partner: the selected organisation reachable, the other not.
    expect((await w.api('GET', `/orgs/${w.tenant.orgId}`, { token: ex.body.accessToken })).status).toBe(200);
    expect((await w.api('GET', `/orgs/${w.tenant.otherOrgId}`, { token: ex.body.accessToken })).status).toBe(404);
  });

  it('group mappings give partner roles and selected organisation lists through the one rule (most permissions wins)', async () => {
    const noc = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(await signIn(account(`noc-${randomBytes(3).toString('hex')}@${partnerDomain}`, { groups: ['noc'] }))) } });
    expect(noc.status).toBe(200);
    expect(await membership(noc.body.user.id)).toMatchObject({ roleId: readOnly, orgAccess: 'selected', orgIds: [w.tenant.otherOrgId] });
    // In both groups: the technician role (it may act) wins over read-only; its mapping names no organisations, so the provider's list.
    const both = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(await signIn(account(`lead-${randomBytes(3).toString('hex')}@${partnerDomain}`, { groups: ['noc', 'leads'] }))) } });
    expect(await membership(both.body.user.id)).toMatchObject({ roleId: tech, orgAccess: 'selected', orgIds: [w.tenant.orgId] });
    // An existing technician moved by the mapping at the next sign-in, audited.
    const sub = account(`move-${randomBytes(3).toString('hex')}@${partnerDomain}`, { groups: ['leads'] });
    const first = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(await signIn(sub)) } });
    idp.accounts.set(sub, { ...idp.accounts.get(sub)!, groups: ['noc'] });
    expect((await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(await signIn(sub)) } })).status).toBe(200);
    expect(await membership(first.body.user.id)).toMatchObject({ roleId: readOnly, orgIds: [w.tenant.otherOrgId] });
    const assigned = (await auditOf('user.role.assign')).rows.find((r) => r.target_id === first.body.user.id);
    expect(assigned).toMatchObject({ partner_id: w.tenant.partnerId, details: { from: tech, to: readOnly, source: 'sso_group_mapping', toOrgAccess: 'selected' } });
  });

  it('signs in only addresses of the partner\'s verified domains, never another partner\'s or an organisation\'s person (audited)', async () => {
    const back = `${w.app.publicUrl}/login/${slug}?error=`;
    // An organisation's user and another partner's technician holding an address of the partner's domain.
    const orgUser = await createUser(w.app, { email: `org-${randomBytes(3).toString('hex')}@${partnerDomain}`, org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const rivalTech = await createUser(w.app, { email: `rt-${randomBytes(3).toString('hex')}@${partnerDomain}`, partner: { partnerId: rival.partnerId, roleId: tech } });
    expect(await signIn(account(orgUser.email))).toBe(`${back}no_org_access`);
    // The first refusal of the minute from this source is written in full (later ones are counted: audit/security-events.ts).
    const refusal = (await auditOf('sso.login')).rows.find((r) => r.result === 'failure' && r.target_id === orgUser.id);
    expect(refusal).toMatchObject({ partner_id: w.tenant.partnerId, details: { providerId, error: 'no_org_access' } });
    expect(await signIn(account(rivalTech.email))).toBe(`${back}no_org_access`);
    expect(await signIn(account(`x@${rivalDomain}`))).toBe(`${back}domain_not_allowed`);
    expect(await signIn(account(`x@${orgDomain}`))).toBe(`${back}domain_not_allowed`);
    expect(await signIn(account(`x@${fresh('unverified')}`))).toBe(`${back}domain_not_allowed`);
    expect(await membership(orgUser.id)).toBeUndefined();
    expect((await membership(rivalTech.id))?.partnerId).toBe(rival.partnerId);
  });

  it('discovery sends an address of the partner\'s domain to the partner\'s sign-in', async () => {
    const a = await w.app.api('POST', '/auth/discover', { body: { email: `anyone@${partnerDomain}` } });
    expect(a.body).toEqual({ method: 'sso', loginUrl: `${w.app.publicUrl}/api/v1/sso/login/partner/${slug}`, passwordAllowed: true, passkey: true });
  });

  it('enforceSSO: the partner\'s technicians get 403 sso_required and no reset link; a named break-glass member signs in, audited', async () => {
    const glass = await createUser(w.app, { partner: { partnerId: w.tenant.partnerId, roleId: tech } });
    const member = w.tenant.partnerTechnician;
    expect((await w.api('PATCH', `/sso/providers/${providerId}`, { token: partnerToken, body: { enforceSSO: true, breakGlassUserIds: [glass.id] } })).status).toBe(200);
    const refused = await w.app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } });
    expect([refused.status, refused.body.code, refused.body.details?.loginUrl]).toEqual([403, 'sso_required', `${w.app.publicUrl}/api/v1/sso/login/partner/${slug}`]);
    // Another partner's technician keeps password sign-in.
    expect((await login(w.app, rival.partnerTechnician)).accessToken).toBeTruthy();
    for (const u of [member, glass]) expect((await w.app.api('POST', '/auth/forgot-password', { body: { email: u.email } })).status).toBe(200);
    await identityOf(w.app.server.keel).deferred.idle();
    const links = (await w.app.server.keel.db.execute(sql`select subject_id from single_use_records where purpose = 'password_reset' and subject_id in (${member.id}, ${glass.id})`)) as { rows: { subject_id: string }[] };
    expect(links.rows.map((r) => r.subject_id)).toEqual([glass.id]);
    const ok = await w.app.api('POST', '/auth/login', { body: { email: glass.email, password: glass.password } });
    expect(ok.status).toBe(200);
    const entry = (await auditOf('user.login.break_glass')).rows.find((r) => r.target_id === glass.id);
    expect(entry).toMatchObject({ partner_id: w.tenant.partnerId, details: { providerId, reason: 'enforced_sso' } });
    expect((await w.app.api('POST', '/auth/discover', { body: { email: `anyone@${partnerDomain}` } })).body.passwordAllowed).toBe(false);
    // SSO itself still signs technicians in.
    expect(ssoCodeOf(await signIn(account(`sso-${randomBytes(3).toString('hex')}@${partnerDomain}`)))).toBeTruthy();
  });

  it('a configuration granting more than its author holds: 403 privilege_escalation', async () => {
    // A partner whose only member holds a role that may write organisations but is no full administrator.
    const small = await createTenant(w.app);
    const db = w.app.server.keel.db;
    const adminToken = (await enrollTotp(w.app, (await login(w.app, small.partnerAdmin)).accessToken)).accessToken;
    const role = await w.api('POST', '/roles', { token: adminToken, body: { name: 'SSO managers', permissions: [{ resource: 'organizations', action: '*' }] } });
    expect(role.status, JSON.stringify(role.body)).toBe(201);
    const manager = await createUser(w.app, { partner: { partnerId: small.partnerId, roleId: role.body.id } });
    await db.delete(partnerUsers).where(and(eq(partnerUsers.partnerId, small.partnerId), sql`user_id <> ${manager.id}`));
    const author = (await enrollTotp(w.app, (await login(w.app, manager)).accessToken)).accessToken;
    const body = { partnerId: small.partnerId, name: 'Too much', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret };
    const tooMuch = await w.api('POST', '/sso/providers', { token: author, body: { ...body, defaultRoleId: SYSTEM_ROLES.partnerAdmin.id } });
    expect([tooMuch.status, tooMuch.body.code]).toEqual([403, 'privilege_escalation']);
    const mapped = await w.api('POST', '/sso/providers', { token: author, body: { ...body, defaultRoleId: role.body.id, groupRoleMappings: [{ group: 'x', roleId: tech }] } });
    expect([mapped.status, mapped.body.code]).toEqual([403, 'privilege_escalation']);
    expect((await w.api('POST', '/sso/providers', { token: author, body: { ...body, defaultRoleId: role.body.id } })).status).toBe(201);
  });
});
