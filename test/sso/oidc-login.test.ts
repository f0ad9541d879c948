/**
 * OIDC single sign-on end to end (docs/specification.md "Single sign-on: the login flow", its callback codes, the limits) against a real
 * oidc-provider on 127.0.0.1, driven over HTTP with a cookie jar through its login and consent forms.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { backend, backendAvailable } from '../helpers/app.js';
import { createUser, login, uniqueEmail } from '../helpers/fixtures.js';
import { raceTest, together, expectOneWinner } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { clock } from '../../src/platform/clock.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { openDatabase } from '../../src/platform/db/client.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { SSO_PROVIDERS_TOPIC } from '../../src/modules/sso/active-cache.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('OIDC login against a real OpenID provider', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  let providerId: string;
  let callback: string;

  const orgReadOnly = SYSTEM_ROLES.orgReadOnly.id;
  const orgAdminRole = SYSTEM_ROLES.orgAdmin.id;

  beforeAll(async () => {
    w = await ssoWorld();
    callback = `${w.app.publicUrl}/api/v1/sso/callback`;
    idp = await startOidcIdp({ redirectUri: callback });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'Test IdP', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: orgReadOnly, allowedDomains: 'example.com, Example.org' },
    });
    expect(created.status).toBe(201);
    providerId = created.body.id;
    const active = await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } });
    expect(active.status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });
  afterEach(() => clock.reset());

  const isApp = (location: string) => location.startsWith(w.app.publicUrl) && !location.includes('/api/v1/sso/callback');
  const patch = (body: Record<string, unknown>) => w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body });

  /** Starts a login at Keel and signs in at the IdP as `account`; answers where the browser lands. */
  async function ssoLogin(account: string, browser = new Browser(w.app), redirect = '/devices?tab=all'): Promise<{ location: string; browser: Browser; callbackUrl: string }> {
    const { location, steps } = await browser.signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}?redirect=${encodeURIComponent(redirect)}`, account, isApp);
    return { location, browser, callbackUrl: steps[steps.length - 1] ?? '' };
  }

  async function exchange(location: string) {
    const code = ssoCodeOf(location);
    expect(code, location).toBeTruthy();
    return w.api('POST', '/sso/exchange', { body: { code } });
  }

  function account(email: string, extra: Record<string, unknown> = {}) {
    const sub = `sub-${Math.random().toString(36).slice(2)}`;
    idp.accounts.set(sub, { sub, email, name: 'Jay Doe', ...extra });
    return sub;
  }

  it('login redirects to the IdP with PKCE S256, state and nonce, and sets the signed state cookie', async () => {
    const res = await w.app.api('GET', `/sso/login/${w.tenant.orgId}?redirect=/devices`);
    expect(res.status).toBe(302);
    const to = new URL(res.headers.get('location')!);
    expect(to.origin).toBe(idp.issuer);
    expect(to.searchParams.get('code_challenge_method')).toBe('S256');
    expect(to.searchParams.get('code_challenge')).toMatch(/^[\w-]{43}$/);
    expect(to.searchParams.get('redirect_uri')).toBe(callback);
    expect(to.searchParams.get('scope')).toBe('openid profile email groups');
    const state = to.searchParams.get('state')!;
    expect(state.length).toBeGreaterThan(20);
    expect(to.searchParams.get('nonce')!.length).toBeGreaterThan(20);
    const cookie = res.cookies.find((c) => c.startsWith('service_sso_state='))!;
    expect(cookie).toContain(`service_sso_state=${state}.`);
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Lax/i);
    expect(cookie).toMatch(/Path=\/api\/v1\/sso\/callback/);
    expect(cookie).toMatch(/Max-Age=600/);
    expect(cookie).not.toMatch(/Secure/); // NODE_ENV=test: Secure only in production
  });

  it('the post-login path must be a same-origin relative path', async () => {
    for (const bad of ['https://evil.example/x', '//evil.example/x', '/\\evil.example', 'devices', 'javascript:alert(1)']) {
      const res = await w.app.api('GET', `/sso/login/${w.tenant.orgId}?redirect=${encodeURIComponent(bad)}`);
      expect(res.status, bad).toBe(400);
      expect(res.body.details.fields[0].path).toBe('redirect');
    }
  });

  it('an organisation without an active provider: 404 at login, ssoEnabled false at check', async () => {
    const res = await w.app.api('GET', `/sso/login/${w.tenant.otherOrgId}`);
    expect(res.status).toBe(404);
    expect(res.body.error).toMatch(/no active or testing SSO provider/i);
    const check = await w.app.api('GET', `/sso/check/${w.tenant.otherOrgId}`);
    expect(check.body).toEqual({ ssoEnabled: false, provider: null, enforceSSO: false, loginUrl: null });
  });

  it('a new user is provisioned (JIT) with defaultRoleId, lands on the original page with #ssoCode=, and exchanges it for tokens', async () => {
    const email = uniqueEmail('jit');
    account(email.toUpperCase(), { name: undefined, given_name: 'Ada', family_name: 'Lovelace' });
    const { location } = await ssoLogin(account(email, { name: undefined, given_name: 'Ada', family_name: 'Lovelace' }));
    expect(location.startsWith(`${w.app.publicUrl}/devices?tab=all#ssoCode=`)).toBe(true);
    const events: unknown[] = [];
    const unsubscribe = w.app.server.keel.events.subscribe('user.login', (_tx, event) => {
      events.push(event);
      return Promise.resolve();
    });
    const ex = await exchange(location).finally(unsubscribe);
    expect(ex.status).toBe(200);
    expect(events).toMatchObject([{ type: 'user.login', orgId: w.tenant.orgId, data: { userId: ex.body.user.id, method: 'sso' } }]);
    expect(ex.body).toMatchObject({ tokenType: 'Bearer', expiresIn: 900, user: { email, name: 'Ada Lovelace', orgId: w.tenant.orgId, roleId: orgReadOnly, scope: 'organization' } });
    const me = await w.app.api('GET', '/auth/me', { token: ex.body.accessToken });
    expect(me.status).toBe(200);
    // The audit log: the login with the provider, and the provisioning.
    const audit = await w.app.api('GET', `/audit-logs?action=user.login&targetId=${ex.body.user.id}`, { token: w.adminToken });
    expect(audit.body.data[0].details).toMatchObject({ method: 'sso', providerId });
    const provisioned = await w.app.api('GET', `/audit-logs?action=user.sso.provision&targetId=${ex.body.user.id}`, { token: w.adminToken });
    expect(provisioned.body.data).toHaveLength(1);
  });

  it('an existing user (email in another case) is linked, not duplicated; the link keeps the profile and sealed IdP tokens', async () => {
    const existing = await createUser(w.app, { email: uniqueEmail('linked'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { location } = await ssoLogin(account(existing.email.toUpperCase()));
    const ex = await exchange(location);
    expect(ex.status).toBe(200);
    expect(ex.body.user.id).toBe(existing.id);
    expect(ex.body.user.roleId).toBe(SYSTEM_ROLES.orgTechnician.id);
    const rows = await w.app.server.keel.db.execute(sql`select external_id, profile, access_token from sso_identities where user_id = ${existing.id}`);
    const link = (rows as { rows: Record<string, unknown>[] }).rows[0]!;
    expect(String(link.external_id)).toMatch(/^sub-/);
    expect((link.profile as Record<string, unknown>).email).toBe(existing.email.toUpperCase());
    expect(String(link.access_token)).toMatch(/^v1\./);
  });

  it('the same state used twice (its cookie kept): the second callback is session_expired', async () => {
    const browser = new Browser(w.app);
    const host = new URL(w.app.url).host;
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    const cookie = browser.jar.get(host)!.get('service_sso_state')!;
    const { location, steps } = await browser.signInAt(start.headers.get('location')!, account(uniqueEmail('twice')), isApp);
    expect(ssoCodeOf(location)).toBeTruthy();
    expect(browser.jar.get(host)?.has('service_sso_state')).toBe(false); // the callback cleared it
    browser.setCookie(host, 'service_sso_state', cookie);
    const again = await browser.fetch(steps[steps.length - 1]!);
    expect(again.headers.get('location')).toBe(`${w.app.publicUrl}/login?error=session_expired`);
  });

  it('a tampered state cookie, or none: session_expired before anything else', async () => {
    const browser = new Browser(w.app);
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    const state = new URL(start.headers.get('location')!).searchParams.get('state')!;
    const host = new URL(w.app.url).host;
    const [cookieState, sig] = browser.jar.get(host)!.get('service_sso_state')!.split('.');
    expect(cookieState).toBe(state);
    const flip = (s: string) => (s[0] === 'a' ? 'b' : 'a') + s.slice(1);
    for (const value of [`${state}.${flip(sig!)}`, `${flip(state)}.${sig}`, '']) {
      const b = new Browser(w.app);
      if (value) b.setCookie(host, 'service_sso_state', value);
      const res = await b.fetch(`${w.app.url}/api/v1/sso/callback?code=x&state=${encodeURIComponent(state)}`);
      expect(res.headers.get('location')).toBe(`${w.app.publicUrl}/login?error=session_expired`);
    }
    // The untampered state is still usable after the refusals (nothing was consumed by them).
    const rows = await w.app.server.keel.db.execute(sql`select count(*)::int as n from single_use_records where purpose = 'sso_login' and subject_id = ${providerId}`);
    expect(Number((rows as { rows: { n: unknown }[] }).rows[0]!.n)).toBeGreaterThan(0);
  });

  it('an expired login session (over 10 minutes): session_expired', async () => {
    const browser = new Browser(w.app);
    const sub = account(uniqueEmail('late'));
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    const to = start.headers.get('location')!;
    clock.advance(10 * 60_000 + 1000);
    const { location } = await browser.signInAt(to, sub, isApp);
    expect(location).toBe(`${w.app.publicUrl}/login?error=session_expired`);
  });

  it('wrong domain: domain_not_allowed', async () => {
    const { location } = await ssoLogin(account(uniqueEmail('dom').replace('example.com', 'elsewhere.net')));
    expect(location).toBe(`${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`);
  });

  it('an unknown user with autoProvision off: user_not_found', async () => {
    await patch({ autoProvision: false });
    try {
      const { location } = await ssoLogin(account(uniqueEmail('nobody')));
      expect(location).toBe(`${w.app.publicUrl}/login?error=user_not_found&org=${w.tenant.orgId}`);
    } finally {
      await patch({ autoProvision: true });
    }
  });

  it('no default role, or one that is no longer usable: default_role_required', async () => {
    await patch({ defaultRoleId: null });
    try {
      const { location } = await ssoLogin(account(uniqueEmail('norole')));
      expect(location).toBe(`${w.app.publicUrl}/login?error=default_role_required&org=${w.tenant.orgId}`);
      // A role of the organisation that was valid when saved and is then deleted: the FK clears it.
      const role = await w.app.api('POST', '/roles', { token: w.adminToken, body: { name: 'SSO temp', permissions: [{ resource: 'devices', action: 'read' }] } });
      expect(role.status).toBe(201);
      expect((await patch({ defaultRoleId: role.body.id })).status).toBe(200);
      expect((await w.app.api('DELETE', `/roles/${role.body.id}`, { token: w.adminToken })).status).toBe(204);
      const again = await ssoLogin(account(uniqueEmail('norole2')));
      expect(again.location).toBe(`${w.app.publicUrl}/login?error=default_role_required&org=${w.tenant.orgId}`);
    } finally {
      await patch({ defaultRoleId: orgReadOnly });
    }
  });

  it('a disabled account of the organisation: sso_error (an SSO login never revives it)', async () => {
    const disabled = await createUser(w.app, { email: uniqueEmail('off'), status: 'disabled', org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
    expect((await ssoLogin(account(disabled.email))).location).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
    expect(w.logs.text.filter((l) => l.includes('SSO login refused')).at(-1)).toContain('account is disabled');
  });

  it('a user of another organisation or a partner: no_org_access', async () => {
    const other = await createUser(w.app, { email: uniqueEmail('other'), org: { orgId: w.tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    expect((await ssoLogin(account(other.email))).location).toBe(`${w.app.publicUrl}/login?error=no_org_access&org=${w.tenant.orgId}`);
    expect((await ssoLogin(account(w.tenant.partnerTechnician.email))).location).toBe(`${w.app.publicUrl}/login?error=no_org_access&org=${w.tenant.orgId}`);
  });

  it('an inactive or deleted provider between login and callback: provider_not_found', async () => {
    const browser = new Browser(w.app);
    const sub = account(uniqueEmail('inactive'));
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'inactive' } });
    try {
      const { location } = await browser.signInAt(start.headers.get('location')!, sub, isApp);
      expect(location).toBe(`${w.app.publicUrl}/login?error=provider_not_found`);
    } finally {
      await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } });
    }
  });

  it('a wrong client secret (token endpoint refuses): sso_error, and no IdP text in the URL', async () => {
    await patch({ clientSecret: 'not-the-secret' });
    try {
      const { location } = await ssoLogin(account(uniqueEmail('badsecret')));
      expect(location).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
      expect(w.logs.text.some((l) => /SSO login refused/.test(l) && /WWW_AUTHENTICATE_CHALLENGE/.test(l))).toBe(true);
    } finally {
      await patch({ clientSecret: idp.clientSecret });
    }
  });

  it('the token, JWKS and UserInfo calls go through the outbound guard: a private address is refused before any connection', async () => {
    for (const field of ['tokenUrl', 'jwksUrl', 'userInfoUrl'] as const) {
      const saved = (await w.api('GET', `/sso/providers/${providerId}`, { token: w.adminToken })).body[field] as string;
      expect((await patch({ [field]: 'http://10.1.2.3/blocked' })).status).toBe(200);
      try {
        const { location } = await ssoLogin(account(uniqueEmail(field)));
        expect(location, field).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
        const reason = w.logs.text.filter((l) => l.includes('SSO login refused')).at(-1) ?? '';
        expect(reason, field).toContain('outbound blocked_address');
      } finally {
        await patch({ [field]: saved });
      }
    }
  });

  it('an ID token whose nonce is not the stored one: sso_error', async () => {
    const browser = new Browser(w.app);
    const sub = account(uniqueEmail('nonce'));
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    // Proving a server-side check: the stored nonce is changed where no client can reach it.
    await w.app.server.keel.db.execute(sql`update single_use_records set data = jsonb_set(data, '{nonce}', '"not-the-nonce"') where purpose = 'sso_login' and subject_id = ${providerId}`);
    const { location } = await browser.signInAt(start.headers.get('location')!, sub, isApp);
    expect(location).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
  });

  it('group mapping decides the role: first match for a new user, a change for an existing one (audited), none keeps it', async () => {
    const custom = await w.app.api('POST', '/roles', { token: w.adminToken, body: { name: 'SSO mapped', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect((await patch({ groupRoleMappings: [{ group: 'keel-admins', roleId: orgAdminRole }, { group: 'keel-staff', roleId: custom.body.id }] })).status).toBe(200);
    try {
      const email = uniqueEmail('grp');
      const first = await exchange((await ssoLogin(account(email, { groups: ['keel-staff', 'keel-admins'] }))).location);
      expect(first.body.user.roleId).toBe(orgAdminRole); // list order of the mappings decides, not the claim's
      const staff = await createUser(w.app, { email: uniqueEmail('staff'), org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
      const staffSub = account(staff.email, { groups: ['keel-staff'] });
      const moved = await exchange((await ssoLogin(staffSub)).location);
      expect(moved.body.user.roleId).toBe(custom.body.id);
      const audit = await w.app.api('GET', `/audit-logs?action=user.role.assign&targetId=${staff.id}`, { token: w.adminToken });
      expect(audit.body.data[0].details).toMatchObject({ from: orgReadOnly, to: custom.body.id, source: 'sso_group_mapping' });
      // The same subject (another one would be refused: the account is linked), now in no mapped group.
      idp.accounts.set(staffSub, { ...idp.accounts.get(staffSub)!, groups: ['unmapped'] });
      const none = await exchange((await ssoLogin(staffSub)).location);
      expect(none.body.user.roleId).toBe(custom.body.id);
    } finally {
      await patch({ groupRoleMappings: [] });
    }
  });

  it('the exchange code: invalid or expired is 400; refused after 2 minutes; single use', async () => {
    const bad = await w.api('POST', '/sso/exchange', { body: { code: 'not-a-code' } });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'invalid_code', error: 'The code is invalid or expired' });
    const { location } = await ssoLogin(account(uniqueEmail('slow')));
    clock.advance(2 * 60_000 + 1000);
    expect((await exchange(location)).status).toBe(400);
    clock.reset();
    const fresh = await ssoLogin(account(uniqueEmail('once')));
    expect((await exchange(fresh.location)).status).toBe(200);
    expect((await exchange(fresh.location)).status).toBe(400);
  });

  it('OIDC: a browser exchanges its code only with the binding cookie of the login it started (else 403 sso_binding_mismatch)', async () => {
    const fromBrowser = { 'sec-fetch-site': 'same-origin', origin: w.app.publicUrl };
    const other = await ssoLogin(account(uniqueEmail('bind-other')));
    const refused = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(other.location) }, headers: fromBrowser });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('sso_binding_mismatch');
    const own = await ssoLogin(account(uniqueEmail('bind-own')));
    const binding = [...own.browser.jar.values()].map((m) => m.get('service_sso_binding')).find(Boolean);
    expect(binding).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const ok = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(own.location) }, headers: { ...fromBrowser, cookie: `service_sso_binding=${binding}` } });
    expect(ok.status).toBe(200);
  });

  it('the code is exchanged on a second instance of the app', async () => {
    const keel = w.app.server.keel;
    const database = keel.config.DATABASE_URL ? await openDatabase({ url: keel.config.DATABASE_URL, poolSize: 2 }) : keel.database;
    let second: RunningServer | null = null;
    try {
      second = await startServer({ config: { ...keel.config }, log: keel.log, database, port: 0, host: '127.0.0.1', skipMigrate: true });
      const { location } = await ssoLogin(account(uniqueEmail('second')));
      const res = await fetch(`${second.url}/api/v1/sso/exchange`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': w.app.ip }, body: JSON.stringify({ code: ssoCodeOf(location) }) });
      expect(res.status).toBe(200);
      expect((await exchange(location)).status).toBe(400); // and then it is spent on the first one too
    } finally {
      await second?.close();
      if (database !== keel.database) await database.close();
    }
  });

  it.skipIf(backend !== 'postgres')('enforceSSO switched on through one instance reaches another at once (its cached answer dropped)', async () => {
    const keel = w.app.server.keel;
    const database = await openDatabase({ url: keel.config.DATABASE_URL!, poolSize: 2 });
    let second: RunningServer | null = null;
    try {
      second = await startServer({ config: { ...keel.config }, log: keel.log, database, port: 0, host: '127.0.0.1', skipMigrate: true });
      // The second instance caches that the organisation does not enforce SSO (a member's password
      // login); switching enforceSSO on through the first instance reaches it at once.
      const member = await createUser(w.app, { email: uniqueEmail('cached'), org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
      const passwordAt = (url: string) => fetch(`${url}/api/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': w.app.ip }, body: JSON.stringify({ email: member.email, password: member.password }) });
      expect((await passwordAt(second.url)).status).toBe(200);
      // Shown by what happens, not a stopwatch: the second instance's own topic hook (after its cache's) says it heard.
      const secondServer = second;
      let heard = () => {};
      secondServer.keel.invalidation.on(SSO_PROVIDERS_TOPIC, (orgId) => orgId === w.tenant.orgId && heard());
      const nextHeard = () => new Promise<void>((resolve) => { heard = resolve; });
      let next = nextHeard();
      expect((await patch({ enforceSSO: true })).status).toBe(200);
      await next;
      try {
        const refused = await passwordAt(second.url);
        expect(refused.status).toBe(403);
        expect(((await refused.json()) as { code: string }).code).toBe('sso_required');
      } finally {
        next = nextHeard();
        await patch({ enforceSSO: false });
        await next;
      }
      expect((await passwordAt(second.url)).status).toBe(200);
    } finally {
      await second?.close();
      await database.close();
    }
  });

  raceTest('one callback URL (with its cookie) sent 10 times at once: one sign-in, the others session_expired', async () => {
    const browser = new Browser(w.app);
    const host = new URL(w.app.url).host;
    const start = await browser.fetch(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`);
    const cookie = browser.jar.get(host)!.get('service_sso_state')!;
    // Sign in at the IdP but stop before Keel's callback: that URL is what gets raced.
    const { location: callbackUrl } = await browser.signInAt(start.headers.get('location')!, account(uniqueEmail('cbrace')), (l) => l.includes('/api/v1/sso/callback'));
    const target = callbackUrl.replace('localhost', '127.0.0.1');
    const answers = await together(10, () =>
      fetch(target, { redirect: 'manual', headers: { cookie: `service_sso_state=${cookie}`, 'x-forwarded-for': w.app.ip } }).then((r) => r.headers.get('location') ?? ''),
    );
    expect(answers.filter((l) => ssoCodeOf(l) !== null)).toHaveLength(1);
    expect(answers.filter((l) => l === `${w.app.publicUrl}/login?error=session_expired`)).toHaveLength(9);
  });

  raceTest('the exchange code raced by 10 parallel requests: one success', async () => {
    const { location } = await ssoLogin(account(uniqueEmail('race')));
    const code = ssoCodeOf(location);
    const answers = await together(10, () => w.app.api('POST', '/sso/exchange', { body: { code } }));
    expectOneWinner(answers, 200, [400]);
  });

  it('enforceSSO: members get 403 sso_required at password login and no reset link; check reports it; a platform administrator signs in as audited break-glass', async () => {
    const member = await createUser(w.app, { email: uniqueEmail('enforced'), org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
    const outsider = await createUser(w.app, { email: uniqueEmail('free'), org: { orgId: w.tenant.otherOrgId, roleId: orgReadOnly } });
    const admin = await createUser(w.app, { email: uniqueEmail('glass'), platformAdmin: true, org: { orgId: w.tenant.orgId, roleId: orgReadOnly } });
    expect((await patch({ enforceSSO: true })).status).toBe(200);
    try {
      const refused = await w.app.api('POST', '/auth/login', { body: { email: member.email, password: member.password } });
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('sso_required');
      expect((await login(w.app, outsider)).accessToken).toBeTruthy();
      const check = await w.app.api('GET', `/sso/check/${w.tenant.orgId}`);
      expect(check.body).toEqual({ ssoEnabled: true, provider: { id: providerId, name: 'Test IdP', type: 'oidc' }, enforceSSO: true, loginUrl: `/api/v1/sso/login/${w.tenant.orgId}` });
      // Forgot-password: 200 for both; only the member of a non-enforcing organisation gets a link.
      expect((await w.app.api('POST', '/auth/forgot-password', { body: { email: member.email } })).status).toBe(200);
      expect((await w.app.api('POST', '/auth/forgot-password', { body: { email: outsider.email } })).status).toBe(200);
      await identityOf(w.app.server.keel).deferred.idle();
      const links = await w.app.server.keel.db.execute(sql`select subject_id from single_use_records where purpose = 'password_reset' and subject_id in (${member.id}, ${outsider.id})`);
      expect((links as { rows: { subject_id: string }[] }).rows.map((r) => r.subject_id)).toEqual([outsider.id]);
      // Break-glass.
      const glass = await w.app.api('POST', '/auth/login', { body: { email: admin.email, password: admin.password } });
      expect(glass.status).toBe(200);
      const audit = await w.app.api('GET', `/audit-logs?action=user.login.break_glass&targetId=${admin.id}`, { token: glass.body.accessToken });
      expect(audit.body.data).toHaveLength(1);
      expect(audit.body.data[0].details).toMatchObject({ providerId, reason: 'enforced_sso' });
      // SSO itself still signs the member in.
      expect((await exchange((await ssoLogin(account(member.email))).location)).status).toBe(200);
    } finally {
      await patch({ enforceSSO: false });
    }
  });

  it('an ID token signed by another key under the IdP key\'s kid (a forging token endpoint): sso_error, nobody provisioned', async () => {
    const { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT } = await import('jose');
    // A token endpoint in front of the real one: it answers the IdP's tokens, the ID token re-signed
    // (same header, same claims) with a key of its own when `forge` is on.
    let forge = false;
    let forged = 0;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void (async () => {
          const headers: Record<string, string> = { 'content-type': req.headers['content-type'] ?? 'application/x-www-form-urlencoded' };
          if (req.headers.authorization) headers.authorization = req.headers.authorization;
          const upstream = await fetch(`${idp.issuer}/token`, { method: 'POST', headers, body: Buffer.concat(chunks) });
          const body = (await upstream.json()) as Record<string, unknown>;
          if (forge && typeof body.id_token === 'string') {
            const header = decodeProtectedHeader(body.id_token);
            const { privateKey } = await generateKeyPair(header.alg ?? 'RS256');
            body.id_token = await new SignJWT(decodeJwt(body.id_token)).setProtectedHeader({ ...header, alg: header.alg ?? 'RS256' }).sign(privateKey);
            forged++;
          }
          res.writeHead(upstream.status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body));
        })().catch(() => res.writeHead(502).end());
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const saved = (await w.api('GET', `/sso/providers/${providerId}`, { token: w.adminToken })).body.tokenUrl as string;
    expect((await patch({ tokenUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/token` })).status).toBe(200);
    try {
      // Passed through unchanged, the IdP's own token signs in: the endpoint in front is no obstacle.
      const honest = await ssoLogin(account(uniqueEmail('honest-token')));
      expect(ssoCodeOf(honest.location), honest.location).toBeTruthy();
      forge = true;
      const email = uniqueEmail('forged-token');
      const { location } = await ssoLogin(account(email));
      expect(forged).toBe(1);
      expect(location).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
      expect(w.logs.text.filter((l) => l.includes('SSO login refused')).at(-1)).toContain('OAUTH_INVALID_RESPONSE');
      const found = await w.api('GET', `/users?search=${encodeURIComponent(email)}`, { token: w.adminToken });
      expect(found.body.data).toEqual([]);
    } finally {
      await patch({ tokenUrl: saved });
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it('the client secret never appears in a response or a log line', async () => {
    // The test makes its own traffic, so it holds when run alone: provider reads, a sign-in and its
    // exchange, a refused sign-in with a wrong secret (logged) and the secret set back.
    const before = { seen: w.seen.length, logs: w.logs.text.length };
    expect((await w.api('GET', `/sso/providers/${providerId}`, { token: w.adminToken })).status).toBe(200);
    expect((await w.api('GET', '/sso/providers', { token: w.adminToken })).status).toBe(200);
    const signedIn = await w.api('POST', '/sso/exchange', { body: { code: ssoCodeOf((await ssoLogin(account(uniqueEmail('no-secret')))).location) } });
    expect(signedIn.status).toBe(200);
    await patch({ clientSecret: 'not-the-secret' });
    try {
      expect((await ssoLogin(account(uniqueEmail('no-secret-bad')))).location).toBe(`${w.app.publicUrl}/login?error=sso_error&org=${w.tenant.orgId}`);
    } finally {
      await patch({ clientSecret: idp.clientSecret });
    }
    expect(w.seen.length - before.seen).toBe(10); // five answers, body and headers each
    expect(w.logs.text.slice(before.logs).some((l) => l.includes('SSO login refused'))).toBe(true);
    for (const text of [...w.seen, ...w.logs.text]) {
      expect(text).not.toContain(idp.clientSecret);
      expect(text).not.toContain('not-the-secret');
    }
  });
});
