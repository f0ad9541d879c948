/**
 * A partner's sign-in page in chromium (docs/decisions.md "Partner-level SSO"): `/login/<slug>` shows
 * the partner's name and "Sign in with <provider>", and a technician of a domain the partner verified
 * signs in through a real OpenID provider (oidc-provider), provisioned into the partner; axe clean.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { partnerUsers } from '../../src/modules/access/schema.js';
import { partners } from '../../src/modules/tenancy/schema.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { ssoProviders } from '../../src/modules/sso/schema.js';
import { users } from '../../src/modules/identity/schema.js';
import { axeViolations, consoleBuild, consoleTabs } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: a partner\'s sign-in page in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let idp: OidcIdp;
  const tabs = consoleTabs(() => browser, 'partner-login');
  const slug = `engines-${randomBytes(3).toString('hex')}`;
  const domain = `engines-${randomBytes(4).toString('hex')}.example`;

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
    tenant = await createTenant(app);
    const db = app.server.keel.db;
    await db.update(partners).set({ name: 'Analytical Engines', slug }).where(eq(partners.id, tenant.partnerId));
    await db.insert(verifiedDomains).values({ partnerId: tenant.partnerId, domain, status: 'verified', token: 't', verifiedAt: new Date() });
    const { sealSecret } = await import('../../src/modules/sso/providers.js');
    const [p] = await db
      .insert(ssoProviders)
      .values({ partnerId: tenant.partnerId, name: 'Engines Entra', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, scopes: 'openid profile email', attributeMapping: { email: 'email', name: 'name' }, defaultRoleId: SYSTEM_ROLES.partnerTechnician.id, status: 'active' })
      .returning();
    await db.update(ssoProviders).set({ clientSecret: sealSecret(app.server.keel, p!.id, idp.clientSecret) }).where(eq(ssoProviders.id, p!.id));
  }, 180_000);
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await idp?.close();
  });

  it('shows the partner\'s name and its provider, and signs a technician in through the provider', async () => {
    const email = `ada@${domain}`;
    idp.accounts.set('ada', { sub: 'ada', email, email_verified: true, name: 'Ada Technician' });
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login/${slug}`);
    await page.getByRole('heading', { name: 'Sign in to Analytical Engines' }).waitFor();
    const button = page.getByRole('link', { name: 'Sign in with Engines Entra' });
    await button.waitFor();
    await t.screenshot('partner-login');
    expect(await axeViolations(page)).toEqual([]);

    await button.click();
    // oidc-provider's development login, then its consent.
    await page.locator('input[name="login"]').fill('ada');
    await page.locator('input[name="password"]').fill('any');
    await page.locator('button[type="submit"]').click();
    await page.locator('button[type="submit"]').click();
    await page.getByRole('heading', { name: 'Welcome, Ada Technician' }).waitFor();
    expect(page.url()).not.toContain('ssoCode');

    const [user] = await app.server.keel.db.select().from(users).where(eq(users.email, email));
    const [m] = await app.server.keel.db.select().from(partnerUsers).where(eq(partnerUsers.userId, user!.id));
    expect(m).toMatchObject({ partnerId: tenant.partnerId, roleId: SYSTEM_ROLES.partnerTechnician.id, orgAccess: 'all' });
  });

  it('an unknown slug says so, and a refused sign-in comes back to the partner\'s page in plain words', async () => {
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login/no-such-${slug}`);
    await page.getByText('There is no sign-in page at this address.').waitFor();
    await page.goto(`${app.publicUrl}/login/${slug}?error=domain_not_allowed`);
    await page.getByText('Your email domain is not allowed').waitFor();
    expect(await axeViolations(page)).toEqual([]);
  });
});
