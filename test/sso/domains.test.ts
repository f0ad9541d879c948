/**
 * Verified domains (docs/decisions.md "Verified domains and SSO step-up"): an organisation claims an email domain and
 * proves it with a DNS TXT record, looked up through a loopback DNS server of the test's own
 * (DNS_RESOLVER); once verified, no other organisation's provider provisions or links an address in
 * it, and the organisation's own provider provisions only within its verified domains. A real
 * oidc-provider signs users in.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { backendAvailable } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, uniqueEmail, type Tenant } from '../helpers/fixtures.js';
import { startDnsServer, type DnsServer } from '../helpers/dns.js';
import { expectOneWinner, raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { clock } from '../../src/platform/clock.js';
import { recheckDomains } from '../../src/modules/domains/service.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('verified domains', () => {
  let dns: DnsServer;
  let w: SsoWorld;
  let idp: OidcIdp;
  let other: Tenant;
  let otherAdmin: string;
  let providerId: string;

  beforeAll(async () => {
    dns = await startDnsServer();
    w = await ssoWorld({ env: { DNS_RESOLVER: dns.address } });
    other = await createTenant(w.app);
    otherAdmin = (await login(w.app, other.orgAdmin)).accessToken;
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'IdP', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect(created.status).toBe(201);
    providerId = created.body.id;
    expect((await w.api('POST', `/sso/providers/${created.body.id}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
    await dns?.close();
  });
  afterEach(() => clock.reset());

  const fresh = (label: string) => `${label}-${randomBytes(4).toString('hex')}.example`;
  const orgDomains = (orgId: string) => `/orgs/${orgId}/domains`;
  const add = (token: string, orgId: string, domain: string) => w.api('POST', orgDomains(orgId), { token, body: { domain } });
  const verify = (token: string, orgId: string, id: string) => w.api('POST', `${orgDomains(orgId)}/${id}/verify`, { token });
  const publish = (domain: string, txtRecord: string) => dns.txt.set(domain, ['v=spf1 -all', txtRecord]);

  /** Claims, publishes and verifies a domain for an organisation; answers the claim. */
  async function verified(token: string, orgId: string, domain: string) {
    const claim = await add(token, orgId, domain);
    expect(claim.status, JSON.stringify(claim.body)).toBe(201);
    publish(domain, claim.body.txtRecord);
    const v = await verify(token, orgId, claim.body.id);
    expect(v.status, JSON.stringify(v.body)).toBe(200);
    expect(v.body.status).toBe('verified');
    return v.body as { id: string; domain: string; txtRecord: string };
  }

  /** Signs in at org A's provider as an IdP account with this email; answers where the browser landed. */
  async function ssoLogin(email: string, extra: { email_verified?: boolean } = {}): Promise<string> {
    const sub = `sub-${randomBytes(6).toString('hex')}`;
    idp.accounts.set(sub, { sub, email, name: 'Jay Doe', ...extra });
    const isApp = (l: string) => l.startsWith(w.app.publicUrl) && !l.includes('/api/v1/sso/callback');
    const { location } = await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, sub, isApp);
    return location;
  }

  it('a claim is pending with a TXT record of at least 128 random bits; the wrong record or none keeps it pending with the reason; the right one verifies it; all audited', async () => {
    const domain = fresh('claim');
    const claim = await add(w.adminToken, w.tenant.orgId, domain.toUpperCase());
    expect(claim.status).toBe(201);
    expect(claim.body).toMatchObject({ domain, status: 'pending', orgId: w.tenant.orgId });
    const token = /^keel-verification=([A-Za-z0-9_-]+)$/.exec(claim.body.txtRecord)?.[1];
    expect(token && Buffer.from(token, 'base64url').length).toBeGreaterThanOrEqual(16);
    const again = await add(w.adminToken, w.tenant.orgId, fresh('claim'));
    expect(again.body.txtRecord).not.toBe(claim.body.txtRecord);

    const none = await verify(w.adminToken, w.tenant.orgId, claim.body.id);
    expect(none.status).toBe(200);
    expect(none.body).toMatchObject({ status: 'pending', reason: 'txt_record_missing' });
    dns.txt.set(domain, ['v=spf1 -all', `keel-verification=${'A'.repeat(token!.length)}`, `${claim.body.txtRecord}x`]);
    const wrong = await verify(w.adminToken, w.tenant.orgId, claim.body.id);
    expect(wrong.body).toMatchObject({ status: 'pending', reason: 'txt_record_mismatch' });
    expect(wrong.body.reasonText).toMatch(/TXT/);

    publish(domain, claim.body.txtRecord);
    const ok = await verify(w.adminToken, w.tenant.orgId, claim.body.id);
    expect(ok.body).toMatchObject({ status: 'verified', reason: null });
    expect(ok.body.verifiedAt).toBeTruthy();
    expect(dns.asked).toContain(domain);

    const list = await w.api('GET', `${orgDomains(w.tenant.orgId)}?limit=100`, { token: w.adminToken });
    expect(list.status).toBe(200);
    expect(list.body.data.find((d: { id: string }) => d.id === claim.body.id)).toMatchObject({ status: 'verified', txtRecord: claim.body.txtRecord });
    expect(list.body.pagination.total).toBe(list.body.data.length);

    const audit = await w.api('GET', `/audit-logs?targetId=${claim.body.id}&limit=100`, { token: w.adminToken });
    const entries = audit.body.data.map((e: { action: string; result: string }) => `${e.action}:${e.result}`);
    expect(entries.sort()).toEqual(['domain.create:success', 'domain.verify:failure', 'domain.verify:failure', 'domain.verify:success']);

    const removed = await w.api('DELETE', `${orgDomains(w.tenant.orgId)}/${claim.body.id}`, { token: w.adminToken });
    expect(removed.status).toBe(204);
    const deletedAudit = await w.api('GET', `/audit-logs?targetId=${claim.body.id}&action=domain.delete`, { token: w.adminToken });
    expect(deletedAudit.body.data).toHaveLength(1);
  });

  it('domain syntax: IDNA lower case; wildcards, single labels, public suffixes, addresses and IPs are 400 naming domain', async () => {
    const idn = await add(w.adminToken, w.tenant.orgId, `Bücher-${randomBytes(3).toString('hex')}.Example.`);
    expect(idn.status).toBe(201);
    expect(idn.body.domain).toMatch(/^xn--bcher-.*\.example$/);
    const bad = ['com', '*.contoso.example', 'co.uk', 'user@contoso.example', 'https://contoso.example', '10.0.0.1', 'a..example', '-x.example'];
    for (const domain of bad) {
      const res = await add(w.adminToken, w.tenant.orgId, domain);
      expect(res.status, domain).toBe(400);
      expect(res.body.code, domain).toBe('validation_failed');
      expect(JSON.stringify(res.body.details), domain).toContain('domain');
    }
    const dup = await add(w.adminToken, w.tenant.orgId, idn.body.domain);
    expect(dup.status).toBe(409);
    expect(dup.body.code).toBe('domain_exists');
  });

  it("a domain verified by one organisation is 409 domain_claimed for another tenant's organisation, at claim and at verify", async () => {
    const domain = fresh('taken');
    // Org B claims first (pending) and publishes its record too; then org A verifies.
    const early = await add(otherAdmin, other.orgId, domain);
    expect(early.status).toBe(201);
    const mine = await verified(w.adminToken, w.tenant.orgId, domain);
    dns.txt.set(domain, [early.body.txtRecord]);
    const late = await verify(otherAdmin, other.orgId, early.body.id);
    expect(late.status).toBe(409);
    expect(late.body.code).toBe('domain_claimed');
    const claim = await add(otherAdmin, other.orgId, domain.toUpperCase());
    expect(claim.status).toBe(409);
    expect(claim.body.code).toBe('domain_claimed');
    const audit = await w.api('GET', `/audit-logs?action=domain.verify&targetId=${early.body.id}`, { token: otherAdmin });
    expect(audit.body.data[0]).toMatchObject({ result: 'failure', details: { refused: 'domain_claimed' } });
    // Given up by A, the domain is B's to verify.
    expect((await w.api('DELETE', `${orgDomains(w.tenant.orgId)}/${mine.id}`, { token: w.adminToken })).status).toBe(204);
    expect((await verify(otherAdmin, other.orgId, early.body.id)).body.status).toBe('verified');
  });

  raceTest('two organisations verifying one domain at once: one wins, the other is 409 domain_claimed', async () => {
    const domain = fresh('race');
    const a = await add(w.adminToken, w.tenant.orgId, domain);
    const b = await add(otherAdmin, other.orgId, domain);
    dns.txt.set(domain, [a.body.txtRecord, b.body.txtRecord]);
    const answers = await together(2, (i) => (i === 0 ? verify(w.adminToken, w.tenant.orgId, a.body.id) : verify(otherAdmin, other.orgId, b.body.id)));
    expectOneWinner(answers, 200, [409]);
    expect(answers.find((r) => r.status === 409)?.body.code).toBe('domain_claimed');
    const winner = answers[0]?.status === 200 ? { token: w.adminToken, org: w.tenant.orgId, id: a.body.id } : { token: otherAdmin, org: other.orgId, id: b.body.id };
    expect((await w.api('DELETE', `${orgDomains(winner.org)}/${winner.id}`, { token: winner.token })).status).toBe(204);
  });

  it("org A's provider cannot provision an address of a domain org B verified (B can then invite it); A's provider provisions only within A's verified domains", async () => {
    const bDomain = fresh('b');
    await verified(otherAdmin, other.orgId, bDomain);
    const victim = `brand-new@${bDomain}`;
    const refused = await ssoLogin(victim);
    expect(refused).toBe(`${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`);
    // A subdomain of B's domain is B's too.
    expect(await ssoLogin(`x@mail.${bDomain}`)).toBe(`${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`);
    const invite = await w.api('POST', '/users/invite', { token: otherAdmin, body: { email: victim, name: 'New', roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect(invite.status, JSON.stringify(invite.body)).toBe(201);

    // Without verified domains of its own, A's provider still provisions any other address (earlier behaviour)…
    const before = await ssoLogin(uniqueEmail('anyone'));
    expect(ssoCodeOf(before)).toBeTruthy();
    // …and once A has verified a domain, only addresses within it.
    const aDomain = fresh('a');
    const aClaim = await verified(w.adminToken, w.tenant.orgId, aDomain);
    expect(await ssoLogin(uniqueEmail('outside'))).toBe(`${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`);
    const inside = await ssoLogin(`new-${randomBytes(3).toString('hex')}@${aDomain}`);
    const code = ssoCodeOf(inside);
    expect(code, inside).toBeTruthy();
    const ex = await w.api('POST', '/sso/exchange', { body: { code } });
    expect(ex.status).toBe(200);
    expect(ex.body.user.email).toContain(`@${aDomain}`);
    expect((await w.api('DELETE', `${orgDomains(w.tenant.orgId)}/${aClaim.id}`, { token: w.adminToken })).status).toBe(204);
  });

  it("enforceSSO applies to the organisation's verified domains: an account of that domain outside the organisation cannot sign in with a password; partner users keep it", async () => {
    const domain = fresh('enforced');
    const claim = await verified(w.adminToken, w.tenant.orgId, domain);
    const enforce = (on: boolean) => w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body: { enforceSSO: on } });
    const outsider = await createUser(w.app, { email: `stray@${domain}`, org: { orgId: w.tenant.otherOrgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const partnerUser = await createUser(w.app, { email: `msp@${domain}`, partner: { partnerId: w.tenant.partnerId, roleId: SYSTEM_ROLES.partnerTechnician.id } });
    const password = (u: { email: string; password: string }) => w.api('POST', '/auth/login', { body: { email: u.email, password: u.password } });
    try {
      expect((await password(outsider)).status).toBe(200);
      expect((await enforce(true)).status).toBe(200);
      const refused = await password(outsider);
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('sso_required');
      expect((await password(partnerUser)).status).not.toBe(403);
    } finally {
      expect((await enforce(false)).status).toBe(200);
      expect((await w.api('DELETE', `${orgDomains(w.tenant.orgId)}/${claim.id}`, { token: w.adminToken })).status).toBe(204);
    }
  });

  it('an existing account is not linked when the IdP says email_verified: false (refused before any domain rule)', async () => {
    const member = await createUser(w.app, { email: uniqueEmail('unverified'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect(await ssoLogin(member.email, { email_verified: false })).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
    expect(ssoCodeOf(await ssoLogin(member.email, { email_verified: true }))).toBeTruthy();
  });

  it('the daily re-check lapses a domain whose record was removed (pending, audited by the system); no answer keeps it verified', async () => {
    const domain = fresh('daily');
    const claim = await verified(w.adminToken, w.tenant.orgId, domain);
    const keel = w.app.server.keel;
    const day = 24 * 60 * 60_000;
    const read = async () => {
      // Access tokens live 15 minutes: read at the real time.
      clock.reset();
      const list = await w.api('GET', `${orgDomains(w.tenant.orgId)}?limit=100`, { token: w.adminToken });
      return list.body.data.find((d: { id: string }) => d.id === claim.id);
    };
    // Not yet a day: nothing of it is looked up.
    clock.advance(60 * 60_000);
    dns.txt.delete(domain);
    await recheckDomains(keel);
    expect(await read()).toMatchObject({ status: 'verified' });
    // A day later, the DNS gives no answer: it stays verified.
    dns.servfail.add(domain);
    clock.advance(day + 60_000);
    expect((await recheckDomains(keel)).checked).toBeGreaterThanOrEqual(1);
    expect(await read()).toMatchObject({ status: 'verified' });
    // Another day later, the DNS answers without the record: it lapses.
    dns.servfail.delete(domain);
    clock.advance(2 * day + 120_000);
    expect((await recheckDomains(keel)).lapsed).toBeGreaterThanOrEqual(1);
    const lapsed = await read();
    expect(lapsed).toMatchObject({ status: 'pending', reason: 'txt_record_removed', verifiedAt: null });
    expect(lapsed.lapsedAt).toBeTruthy();
    const audit = await w.api('GET', `/audit-logs?action=domain.lapse&targetId=${claim.id}`, { token: w.adminToken });
    expect(audit.body.data).toHaveLength(1);
    expect(audit.body.data[0]).toMatchObject({ result: 'failure', actorType: 'system', details: { domain, reason: 'txt_record_missing' } });
    // The lapsed domain no longer claims anything: another tenant may verify it now.
    await verified(otherAdmin, other.orgId, domain);
  });

  it("another tenant's administrator gets 404 on org A's domains; restricted and read-only callers 403", async () => {
    const claim = await add(w.adminToken, w.tenant.orgId, fresh('mine'));
    expect(claim.status).toBe(201);
    const base = orgDomains(w.tenant.orgId);
    for (const [method, path] of [['GET', base], ['POST', base], ['POST', `${base}/${claim.body.id}/verify`], ['DELETE', `${base}/${claim.body.id}`]] as const) {
      const res = await w.api(method, path, { token: otherAdmin, ...(method === 'POST' && path === base ? { body: { domain: fresh('x') } } : {}) });
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    // B's admin naming its own organisation cannot reach A's claim by id either.
    expect((await verify(otherAdmin, other.orgId, claim.body.id)).status).toBe(404);

    const site = await w.api('POST', `/orgs/${w.tenant.orgId}/sites`, { token: w.adminToken, body: { name: 'Branch' } });
    const restricted = await createUser(w.app, { org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id, siteIds: [site.body.id] } });
    const rToken = (await login(w.app, restricted)).accessToken;
    const r = await add(rToken, w.tenant.orgId, fresh('r'));
    expect(r.status).toBe(403);
    expect(r.body.code).toBe('whole_org_access_required');
    expect((await verify(rToken, w.tenant.orgId, claim.body.id)).body.code).toBe('whole_org_access_required');

    const reader = (await login(w.app, w.tenant.orgReadOnly)).accessToken;
    expect((await w.api('GET', base, { token: reader })).status).toBe(200);
    const ro = await add(reader, w.tenant.orgId, fresh('ro'));
    expect(ro.status).toBe(403);
    expect(ro.body.code).toBe('permission_denied');
    expect((await w.api('DELETE', `${base}/${claim.body.id}`, { token: reader })).body.code).toBe('permission_denied');

    const selected = await createUser(w.app, { partner: { partnerId: w.tenant.partnerId, roleId: SYSTEM_ROLES.partnerAdmin.id, orgAccess: 'selected', orgIds: [w.tenant.orgId] } });
    const sToken = (await enrollTotp(w.app, (await login(w.app, selected)).accessToken)).accessToken;
    const s = await add(sToken, w.tenant.orgId, fresh('s'));
    expect(s.status).toBe(403);
    expect(s.body.code).toBe('full_org_access_required');
  });

  it('a partner claims and verifies its own domains; organisation users and other partners get 404', async () => {
    const adminToken = (await enrollTotp(w.app, (await login(w.app, w.tenant.partnerAdmin)).accessToken)).accessToken;
    const base = `/partners/${w.tenant.partnerId}/domains`;
    const domain = fresh('msp');
    const claim = await w.api('POST', base, { token: adminToken, body: { domain } });
    expect(claim.status).toBe(201);
    expect(claim.body).toMatchObject({ partnerId: w.tenant.partnerId, orgId: null, status: 'pending' });
    publish(domain, claim.body.txtRecord);
    const v = await w.api('POST', `${base}/${claim.body.id}/verify`, { token: adminToken });
    expect(v.body.status).toBe('verified');
    // A partner's verified domain is not any organisation's: A's provider cannot provision into it.
    expect(await ssoLogin(`staff@${domain}`)).toBe(`${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`);
    expect((await w.api('GET', base, { token: w.adminToken })).status).toBe(404);
    const otherPartner = (await enrollTotp(w.app, (await login(w.app, other.partnerAdmin)).accessToken)).accessToken;
    expect((await w.api('GET', base, { token: otherPartner })).status).toBe(404);
    expect((await w.api('POST', `${base}/${claim.body.id}/verify`, { token: otherPartner })).status).toBe(404);
    const list = await w.api('GET', base, { token: adminToken });
    expect(list.body.data.map((d: { id: string }) => d.id)).toEqual([claim.body.id]);
  });
});
