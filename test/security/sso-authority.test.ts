/**
 * Organisation SSO: who may configure a provider, whom it may sign in, `email_verified`, subjects
 * and the identity link (docs/security.md "Organisation SSO: provider authority, identity links,
 * sign-in policy"). Attacks through HTTP against a real oidc-provider on 127.0.0.1.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { backendAvailable } from '../helpers/app.js';
import { createUser, enrollTotp, login, nextTotpStep, STRONG_PASSWORD, totpCode, uniqueEmail } from '../helpers/fixtures.js';
import { insertRole } from '../access/helpers.js';
import { raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { createOrganization } from '../../src/modules/tenancy/service.js';
import { clock } from '../../src/platform/clock.js';
import { Browser, startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from '../sso/helpers.js';

describe.skipIf(!backendAvailable())('SSO provider authority and identity links', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  let providerId: string;
  /** Org C: only the configurer (a custom role: organizations:read/write) until a test adds a member. */
  let orgC: string;
  let customRole: string;
  let configurerToken: string;
  /** A provider of org B, made by the partner administrator. */
  let providerB: string;
  let partnerAdmin: string;

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'IdP A', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect(created.status).toBe(201);
    providerId = created.body.id;
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);

    const org = await createOrganization(w.app.server.keel.db, { name: 'Org C', partnerId: w.tenant.partnerId });
    orgC = org.id;
    customRole = await insertRole(w.app, { scope: 'organization', orgId: orgC, name: 'Org settings', perms: ['organizations:read', 'organizations:write'] });
    const configurer = await createUser(w.app, { org: { orgId: orgC, roleId: customRole } });
    configurerToken = (await enrollTotp(w.app, (await login(w.app, configurer)).accessToken)).accessToken;

    partnerAdmin = (await enrollTotp(w.app, (await login(w.app, w.tenant.partnerAdmin)).accessToken)).accessToken;
    const b = await w.api('POST', '/sso/providers', { token: partnerAdmin, body: { orgId: w.tenant.otherOrgId, name: 'IdP B', type: 'oidc', issuer: idp.issuer, clientId: 'b', clientSecret: 'b-secret' } });
    expect(b.status).toBe(201);
    providerB = b.body.id;
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });
  afterEach(() => clock.reset());

  const providerBody = (extra: Record<string, unknown> = {}) => ({ name: 'Attacker IdP', type: 'oidc', issuer: idp.issuer, clientId: 'x', clientSecret: 'y', ...extra });

  describe('who may configure a provider', () => {
    it('a custom role with organizations:read/write cannot create or change a provider that grants Organization Admin (default role or group mapping)', async () => {
      const byDefault = await w.api('POST', '/sso/providers', { token: configurerToken, body: providerBody({ defaultRoleId: SYSTEM_ROLES.orgAdmin.id }) });
      expect(byDefault.status).toBe(403);
      expect(byDefault.body.code).toBe('privilege_escalation');
      expect(byDefault.body.details.missing).toContain('*:*');
      const byGroup = await w.api('POST', '/sso/providers', {
        token: configurerToken,
        body: providerBody({ defaultRoleId: customRole, groupRoleMappings: [{ group: 'keel-admins', roleId: SYSTEM_ROLES.orgAdmin.id }] }),
      });
      expect(byGroup.status).toBe(403);
      expect(byGroup.body.code).toBe('privilege_escalation');
      // Within what the caller holds, in an organisation whose members it covers: allowed.
      const own = await w.api('POST', '/sso/providers', { token: configurerToken, body: providerBody({ defaultRoleId: customRole }) });
      expect(own.status).toBe(201);
      for (const body of [{ defaultRoleId: SYSTEM_ROLES.orgAdmin.id }, { groupRoleMappings: [{ group: 'keel-admins', roleId: SYSTEM_ROLES.orgAdmin.id }] }]) {
        const res = await w.api('PATCH', `/sso/providers/${own.body.id}`, { token: configurerToken, body });
        expect(res.status, JSON.stringify(body)).toBe(403);
        expect(res.body.code).toBe('privilege_escalation');
      }
      const after = await w.api('GET', `/sso/providers/${own.body.id}`, { token: configurerToken });
      expect(after.body).toMatchObject({ defaultRoleId: customRole, groupRoleMappings: [], status: 'inactive' });
      const removed = await w.api('DELETE', `/sso/providers/${own.body.id}`, { token: configurerToken });
      expect(removed.status).toBe(204);
    });

    it('no provider write while the organisation has a member (here with TOTP) the caller does not cover: such a provider could sign in as that member', async () => {
      const own = await w.api('POST', '/sso/providers', { token: configurerToken, body: providerBody({ defaultRoleId: customRole }) });
      expect(own.status).toBe(201);
      const victim = await createUser(w.app, { org: { orgId: orgC, roleId: SYSTEM_ROLES.orgTechnician.id } });
      await enrollTotp(w.app, (await login(w.app, victim)).accessToken);
      const writes = [
        () => w.api('POST', '/sso/providers', { token: configurerToken, body: providerBody({ defaultRoleId: customRole }) }),
        () => w.api('PATCH', `/sso/providers/${own.body.id}`, { token: configurerToken, body: { issuer: `${idp.issuer}/`, enforceSSO: true } }),
        () => w.api('POST', `/sso/providers/${own.body.id}/status`, { token: configurerToken, body: { status: 'active' } }),
        () => w.api('DELETE', `/sso/providers/${own.body.id}`, { token: configurerToken }),
      ];
      for (const write of writes) {
        const res = await write();
        expect(res.status).toBe(403);
        expect(res.body.code).toBe('privilege_escalation');
        expect(res.body.details.missing.length).toBeGreaterThan(0);
      }
      const after = await w.api('GET', `/sso/providers/${own.body.id}`, { token: configurerToken });
      expect(after.body).toMatchObject({ status: 'inactive', enforceSSO: false });
      // The organisation's administrator covers every member: the same writes pass.
      const orgAdmin = await createUser(w.app, { org: { orgId: orgC, roleId: SYSTEM_ROLES.orgAdmin.id } });
      const adminToken = (await enrollTotp(w.app, (await login(w.app, orgAdmin)).accessToken)).accessToken;
      expect((await w.api('POST', `/sso/providers/${own.body.id}/status`, { token: adminToken, body: { status: 'active' } })).status).toBe(200);
    });

    it("a partner administrator with selected organisations cannot write another organisation's provider (full_org_access_required)", async () => {
      const selected = await createUser(w.app, { partner: { partnerId: w.tenant.partnerId, roleId: SYSTEM_ROLES.partnerAdmin.id, orgAccess: 'selected', orgIds: [w.tenant.otherOrgId] } });
      const token = (await enrollTotp(w.app, (await login(w.app, selected)).accessToken)).accessToken;
      const create = await w.api('POST', '/sso/providers', { token, body: { ...providerBody(), orgId: w.tenant.otherOrgId } });
      expect(create.status).toBe(403);
      expect(create.body.code).toBe('full_org_access_required');
      const patch = await w.api('PATCH', `/sso/providers/${providerB}`, {
        token,
        body: { defaultRoleId: SYSTEM_ROLES.orgAdmin.id, groupRoleMappings: [{ group: 'keel-admins', roleId: SYSTEM_ROLES.orgAdmin.id }] },
      });
      expect(patch.status).toBe(403);
      expect(patch.body.code).toBe('full_org_access_required');
      expect((await w.api('GET', `/sso/providers/${providerB}`, { token: w.adminToken })).status).toBe(404); // (org A's admin sees nothing of org B)
    });

    it('a member restricted to some sites cannot write providers (whole_org_access_required)', async () => {
      const site = await w.api('POST', `/orgs/${w.tenant.orgId}/sites`, { token: w.adminToken, body: { name: 'Branch' } });
      expect(site.status).toBe(201);
      const restricted = await createUser(w.app, { org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id, siteIds: [site.body.id] } });
      const token = (await enrollTotp(w.app, (await login(w.app, restricted)).accessToken)).accessToken;
      const res = await w.api('PATCH', `/sso/providers/${providerId}`, { token, body: { name: 'Renamed' } });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('whole_org_access_required');
    });
  });

  describe('whom a provider signs in', () => {
    // Each case in a minute of its own (the clock is reset after each): refused sign-ins are
    // aggregated per source and minute (audit/security-events.ts).
    let minutes = 0;
    beforeEach(() => clock.advance(60_000 * ++minutes));
    const isApp = (location: string) => location.startsWith(w.app.publicUrl) && !location.includes('/api/v1/sso/callback');
    const failed = (code: string) => `${w.app.publicUrl}/login?error=${code}&org=${w.tenant.orgId}`;

    async function ssoLogin(sub: string): Promise<string> {
      const { location } = await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, sub, isApp);
      return location;
    }
    function account(sub: string, email: string, extra: Record<string, unknown> = {}): string {
      idp.accounts.set(sub, { sub, email, name: 'Jay Doe', ...extra });
      return sub;
    }
    const randomSub = (prefix: string) => `${prefix}-${Math.random().toString(36).slice(2)}`;
    async function linkOf(userId: string): Promise<string[]> {
      const rows = await w.app.server.keel.db.execute(sql`select external_id from sso_identities where user_id = ${userId} and provider_id = ${providerId}`);
      return (rows as { rows: { external_id: string }[] }).rows.map((r) => r.external_id);
    }
    async function userIdsOf(email: string): Promise<string[]> {
      const rows = await w.app.server.keel.db.execute(sql`select id from users where lower(email) = lower(${email})`);
      return (rows as { rows: { id: string }[] }).rows.map((r) => r.id);
    }
    const auditOf = async (action: string, targetId: string) =>
      (await w.api('GET', `/audit-logs?action=${action}&targetId=${targetId}`, { token: w.adminToken })).body.data as { result: string; details: Record<string, unknown> }[];

    it('a linked account signed in under a different subject is refused and audited; its subject stays', async () => {
      const bob = await createUser(w.app, { email: uniqueEmail('bob'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const bobSub = account(randomSub('bob-sub'), bob.email);
      const first = await ssoLogin(bobSub);
      expect(ssoCodeOf(first)).toBeTruthy();
      expect(await linkOf(bob.id)).toEqual([bobSub]);
      const other = account(randomSub('other'), bob.email.toUpperCase());
      expect(await ssoLogin(other)).toBe(failed('sso_error'));
      expect(await linkOf(bob.id)).toEqual([bobSub]);
      const refused = await auditOf('sso.identity.refused', bob.id);
      expect(refused).toHaveLength(1);
      expect(refused[0]).toMatchObject({ result: 'failure', details: { providerId, subject: other, reason: 'subject_changed' } });
      const failures = await auditOf('sso.login', bob.id);
      expect(failures[0]).toMatchObject({ result: 'failure', details: { providerId, error: 'sso_error' } });
      // The right subject still signs in.
      expect(ssoCodeOf(await ssoLogin(bobSub))).toBeTruthy();
    });

    it('email_verified: false signs in no one (an existing member) and provisions no one (a new address); audited', async () => {
      const alice = await createUser(w.app, { email: uniqueEmail('alice'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      expect(await ssoLogin(account(randomSub('unverified-alice'), alice.email, { email_verified: false }))).toBe(failed('sso_error'));
      expect(await linkOf(alice.id)).toEqual([]);
      const failures = await auditOf('sso.login', providerId);
      expect(failures.some((f) => f.result === 'failure' && String(f.details.reason).startsWith('email_not_verified'))).toBe(true);
      const newcomer = uniqueEmail('unverified-new');
      expect(await ssoLogin(account(randomSub('unverified-new'), newcomer, { email_verified: false }))).toBe(failed('sso_error'));
      expect(await userIdsOf(newcomer)).toEqual([]);
      // The same addresses, verified: both sign in.
      expect(ssoCodeOf(await ssoLogin(account(randomSub('alice'), alice.email)))).toBeTruthy();
      expect(ssoCodeOf(await ssoLogin(account(randomSub('new'), newcomer)))).toBeTruthy();
    });

    it('a refused identity link leaves no account: provisioning, role and link commit together', async () => {
      const carol = await createUser(w.app, { email: uniqueEmail('carol'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const sub = account(randomSub('carol'), carol.email);
      expect(ssoCodeOf(await ssoLogin(sub))).toBeTruthy();
      // The IdP now asserts Carol's subject with a new address: provisioning that address would need the
      // subject's link, which belongs to Carol.
      const newcomer = uniqueEmail('takeover');
      account(sub, newcomer);
      expect(await ssoLogin(sub)).toBe(failed('sso_error'));
      expect(await userIdsOf(newcomer)).toEqual([]);
      expect(await linkOf(carol.id)).toEqual([sub]);
      const refused = await auditOf('sso.identity.refused', providerId);
      expect(refused.some((r) => r.details.subject === sub && r.details.reason === 'subject_taken')).toBe(true);
    });
    raceTest('two sign-ins of one unlinked account under two subjects at once: one links, the other is refused', async () => {
      const atCallback = (location: string) => location.includes('/api/v1/sso/callback');
      for (let round = 0; round < 5; round++) {
        const dan = await createUser(w.app, { email: uniqueEmail('dan'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
        const subs = [account(randomSub('dan-a'), dan.email), account(randomSub('dan-b'), dan.email)];
        const browsers = [new Browser(w.app), new Browser(w.app)];
        // Both browsers go through the IdP and stop at Keel's callback; then both callbacks run together.
        const callbacks = await Promise.all(browsers.map(async (b, i) => (await b.signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, subs[i]!, atCallback)).location));
        const answers = await together(2, (i) => browsers[i]!.fetch(callbacks[i]!));
        const locations = answers.map((r) => r.headers.get('location') ?? '');
        expect(locations.filter((l) => ssoCodeOf(l) !== null), locations.join(' ')).toHaveLength(1);
        expect(locations.filter((l) => l === failed('sso_error')), locations.join(' ')).toHaveLength(1);
        const winner = subs[locations.findIndex((l) => ssoCodeOf(l) !== null)]!;
        expect(await linkOf(dan.id)).toEqual([winner]);
      }
    });

    it('a refused sign-in is logged with its error code, never with the authorization code, and audited as a failed sso.login', async () => {
      const newcomer = uniqueEmail('logged');
      const sub = account(randomSub('logged'), newcomer, { email_verified: false });
      const { location, steps } = await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, sub, isApp);
      expect(location).toBe(failed('sso_error'));
      const callbackUrl = new URL(steps.at(-1)!);
      expect(callbackUrl.pathname).toBe('/api/v1/sso/callback');
      const authorizationCode = callbackUrl.searchParams.get('code')!;
      expect(authorizationCode.length).toBeGreaterThan(20);
      const refused = w.logs.text.filter((l) => l.includes('SSO login refused')).map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(refused.length).toBeGreaterThan(0);
      expect(refused.at(-1)).toMatchObject({ code: 'sso_error', providerId, msg: 'SSO login refused' });
      expect(String(refused.at(-1)!.reason)).toMatch(/^email_not_verified/);
      for (const line of w.logs.text) expect(line).not.toContain(authorizationCode);
      const audit = await auditOf('sso.login', providerId);
      expect(audit[0]).toMatchObject({ result: 'failure', details: { providerId, error: 'sso_error' } });
      expect(String(audit[0]!.details.reason)).toMatch(/^email_not_verified/);
    });
  });

  describe('every session passes the sign-in policy (org B enforces SSO)', () => {
    const patchB = (body: Record<string, unknown>) => w.api('PATCH', `/sso/providers/${providerB}`, { token: partnerAdmin, body });
    const inviteToken = (email: string): string => {
      for (const line of w.logs.text) {
        if (!line.includes('devEmailSink') || !line.includes(email)) continue;
        const m = /accept-invite\?token=([\w-]+)/.exec(line);
        if (m?.[1]) return m[1];
      }
      throw new Error(`no invitation mail for ${email}`);
    };
    const invite = async (email: string) => {
      const res = await w.api('POST', '/users/invite', { token: partnerAdmin, body: { email, name: 'Invited Person', roleId: SYSTEM_ROLES.orgTechnician.id, orgId: w.tenant.otherOrgId } });
      expect(res.status).toBe(201);
      return inviteToken(email);
    };
    const passwordOf = async (email: string) => {
      const rows = await w.app.server.keel.db.execute(sql`select password_hash, status from users where lower(email) = lower(${email})`);
      return (rows as { rows: { password_hash: string | null; status: string }[] }).rows[0];
    };

    beforeAll(async () => {
      expect((await w.api('POST', `/sso/providers/${providerB}/status`, { token: partnerAdmin, body: { status: 'active' } })).status).toBe(200);
    });

    it('an MFA sign-in that started before enforceSSO was switched on ends in 403 sso_required, not a session', async () => {
      expect((await patchB({ enforceSSO: false })).status).toBe(200);
      const member = await createUser(w.app, { org: { orgId: w.tenant.otherOrgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
      const { secret } = await enrollTotp(w.app, (await login(w.app, member)).accessToken);
      const challenge = await w.app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } });
      expect(challenge.body.mfaRequired).toBe(true);
      expect((await patchB({ enforceSSO: true })).status).toBe(200);
      await nextTotpStep();
      const verify = await w.app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: await totpCode(secret) } });
      expect(verify.status).toBe(403);
      expect(verify.body.code).toBe('sso_required');
      expect(verify.body.accessToken).toBeUndefined();
      expect(verify.cookies).toEqual([]);
    });

    it('accepting an invitation under enforceSSO: accepted, password-less, no tokens or cookies; the answer says to use SSO', async () => {
      expect((await patchB({ enforceSSO: true })).status).toBe(200);
      const email = uniqueEmail('invited-sso');
      const res = await w.app.api('POST', '/auth/accept-invite', { body: { token: await invite(email), password: STRONG_PASSWORD } });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ ssoRequired: true, user: { email, orgId: w.tenant.otherOrgId } });
      expect(res.body.accessToken).toBeUndefined();
      expect(res.body.refreshToken).toBeUndefined();
      expect(res.cookies).toEqual([]);
      expect(await passwordOf(email)).toEqual({ password_hash: null, status: 'active' });
      const logins = await w.api('GET', `/audit-logs?action=user.login&targetId=${res.body.user.id}`, { token: partnerAdmin });
      expect(logins.body.data).toEqual([]);
      // An existing account without an association joins with its password, and gets no session either.
      const existing = await createUser(w.app);
      const joined = await w.app.api('POST', '/auth/accept-invite', { body: { token: await invite(existing.email), password: existing.password } });
      expect(joined.status).toBe(200);
      expect(joined.body).toMatchObject({ ssoRequired: true, user: { id: existing.id, orgId: w.tenant.otherOrgId } });
      expect(joined.body.accessToken).toBeUndefined();
      expect(joined.cookies).toEqual([]);
    });

    it('without enforceSSO the invitation still signs in with the new password', async () => {
      expect((await patchB({ enforceSSO: false })).status).toBe(200);
      try {
        const email = uniqueEmail('invited-pw');
        const res = await w.app.api('POST', '/auth/accept-invite', { body: { token: await invite(email), password: STRONG_PASSWORD } });
        expect(res.status).toBe(200);
        expect(res.body.accessToken).toBeTruthy();
        expect(res.body.ssoRequired).toBeUndefined();
      } finally {
        await patchB({ enforceSSO: true });
      }
    });
  });
});
