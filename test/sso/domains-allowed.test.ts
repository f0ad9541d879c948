/**
 * Two SSO rules against a real oidc-provider on 127.0.0.1: `allowedDomains` matches the email's domain
 * exactly (case-insensitively; no suffix, no subdomain: docs/decisions.md "Organisation single sign-on", Claim mapping), and an
 * exchange code is worth nothing once its user is disabled between the login and the exchange.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('SSO allowed domains and the exchange of a disabled user', () => {
  let w: SsoWorld;
  let idp: OidcIdp;

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'Domains IdP', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id, allowedDomains: 'example.com' },
    });
    expect(created.status).toBe(201);
    expect((await w.api('POST', `/sso/providers/${created.body.id}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });

  const isApp = (location: string) => location.startsWith(w.app.publicUrl) && !location.includes('/api/v1/sso/callback');

  /** Signs in at the IdP as a new account with `email`; answers where the browser lands. */
  async function ssoLogin(email: string): Promise<string> {
    const sub = `sub-${Math.random().toString(36).slice(2)}`;
    idp.accounts.set(sub, { sub, email, name: 'Jay Doe' });
    const { location } = await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, sub, isApp);
    return location;
  }

  it('allowedDomains "example.com": the domain itself (any case) signs in; evil-example.com and sub.example.com do not', async () => {
    const refused = `${w.app.publicUrl}/login?error=domain_not_allowed&org=${w.tenant.orgId}`;
    for (const domain of ['evil-example.com', 'sub.example.com', 'example.com.evil.net', 'notexample.com']) {
      const email = uniqueEmail('dom').replace('@example.com', `@${domain}`);
      expect(await ssoLogin(email), domain).toBe(refused);
      // Nobody was provisioned under that address.
      const found = await w.api('GET', `/users?search=${encodeURIComponent(email)}`, { token: w.adminToken });
      expect(found.status).toBe(200);
      expect(found.body.data, domain).toEqual([]);
    }
    for (const email of [uniqueEmail('dom-ok'), uniqueEmail('dom-case').replace('@example.com', '@EXAMPLE.Com')]) {
      const location = await ssoLogin(email);
      expect(ssoCodeOf(location), location).toBeTruthy();
    }
  });

  it('a user disabled between the login and the exchange: the code is refused (400 invalid_code), no tokens', async () => {
    const email = uniqueEmail('disabled-later');
    const location = await ssoLogin(email);
    const code = ssoCodeOf(location);
    expect(code, location).toBeTruthy();
    const [user] = (await w.api('GET', `/users?search=${encodeURIComponent(email)}`, { token: w.adminToken })).body.data as { id: string }[];
    expect(user).toBeDefined();
    const disabled = await w.api('PATCH', `/users/${user!.id}`, { token: w.adminToken, body: { status: 'disabled' } });
    expect(disabled.status).toBe(200);
    const res = await w.api('POST', '/sso/exchange', { body: { code } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'The code is invalid or expired', code: 'invalid_code' });
    expect(res.body.accessToken).toBeUndefined();
    expect(res.cookies.join(';')).not.toMatch(/refresh/i);
    // Re-enabled, the spent code stays spent.
    expect((await w.api('PATCH', `/users/${user!.id}`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    expect((await w.api('POST', '/sso/exchange', { body: { code } })).status).toBe(400);
  });
});
