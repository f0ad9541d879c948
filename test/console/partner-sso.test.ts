/**
 * A partner's own single sign-on configured in the console (docs/decisions.md "Partner-level SSO"),
 * in chromium against one started Keel and a real OpenID provider (oidc-provider): the partner admin
 * changes the partner's sign-in address and copies it, creates a partner provider, sets its default
 * partner role, a group mapping to a partner role with selected organisations, enforced SSO and a
 * break-glass member, tests and activates it; a technician then signs in at `/login/<slug>` and is
 * provisioned with the mapping's role and organisations; axe clean.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { partnerUsers } from '../../src/modules/access/schema.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { ssoProviders } from '../../src/modules/sso/schema.js';
import { users } from '../../src/modules/identity/schema.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: a partner\'s single sign-on settings in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let idp: OidcIdp;
  const tabs = consoleTabs(() => browser, 'partner-sso');
  const slug = `msp-${randomBytes(3).toString('hex')}`;
  const domain = `msp-${randomBytes(4).toString('hex')}.example`;

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
    tenant = await createTenant(app);
    // Verifying a domain reads DNS; the domain page's own tests show that. Here it is verified already.
    await app.server.keel.db.insert(verifiedDomains).values({ partnerId: tenant.partnerId, domain, status: 'verified', token: 't', verifiedAt: new Date() });
  }, 180_000);
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await idp?.close();
  });

  it('a partner admin configures, tests and activates a partner provider, and a technician signs in at /login/<slug> with the mapping\'s role and organisations', async () => {
    const { secret } = await enrollTotp(app, (await login(app, tenant.partnerAdmin)).accessToken);
    const t = await tabs.open();
    const { page } = t;
    await t.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: app.publicUrl });
    await signInWithTotp(page, `${app.publicUrl}/integrations/sso?orgId=${tenant.orgId}`, tenant.partnerAdmin, secret);
    const card = page.getByRole('region', { name: /^Partner-level SSO of / });
    await card.waitFor();

    // The partner's sign-in address: changed, then copied.
    const address = card.getByRole('form', { name: 'Partner sign-in address' });
    await address.getByLabel('Address name (slug)').fill(slug);
    await address.getByRole('button', { name: 'Change address' }).click();
    const link = `${app.publicUrl}/login/${slug}`;
    await card.getByText(link, { exact: true }).waitFor();
    await card.getByRole('button', { name: 'Copy partner sign-in page' }).click();
    await card.getByRole('button', { name: 'Copied partner sign-in page' }).waitFor();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(link);
    await t.screenshot('partner-sso-list');
    expect(await axeViolations(page)).toEqual([]);

    // A new partner provider, then its settings.
    await card.getByRole('button', { name: 'New partner provider' }).click();
    const create = page.getByRole('form', { name: 'New partner provider' });
    await create.getByLabel('Name', { exact: true }).fill('MSP Entra');
    await create.getByRole('button', { name: 'Create partner provider' }).click();
    await page.getByRole('heading', { name: 'Provider MSP Entra' }).waitFor();
    const form = page.getByRole('form', { name: 'Provider settings' });
    await form.getByLabel('Client id').fill(idp.clientId);
    await form.getByLabel('Client secret').fill(idp.clientSecret);
    await form.getByLabel('Issuer URL').fill(idp.issuer);
    await form.getByLabel('Scopes').fill('openid profile email groups');
    await form.getByLabel('Groups from').fill('groups');
    // The partner's roles only: no organisation role is offered.
    const roleOfNew = form.getByLabel('Partner role of new technicians');
    await roleOfNew.getByRole('option', { name: SYSTEM_ROLES.partnerReadOnly.name }).waitFor({ state: 'attached' });
    expect(await roleOfNew.getByRole('option', { name: SYSTEM_ROLES.orgAdmin.name }).count()).toBe(0);
    await roleOfNew.selectOption({ label: SYSTEM_ROLES.partnerReadOnly.name });
    await form.getByLabel('Organisations new technicians reach').first().selectOption('all');
    await form.getByRole('button', { name: 'Add a mapping' }).click();
    await form.getByLabel('Group 1', { exact: true }).fill('msp-techs');
    await form.getByLabel('Role for group 1').selectOption({ label: SYSTEM_ROLES.partnerTechnician.name });
    const orgsOfMapping = form.getByRole('group', { name: /Organisations for group 1/ });
    await orgsOfMapping.getByRole('checkbox').first().waitFor();
    expect(await orgsOfMapping.getByRole('checkbox').count()).toBe(2);
    await orgsOfMapping.getByRole('checkbox').first().check();
    await form.getByLabel(/Enforce single sign-on/).check();
    await form.getByRole('group', { name: /Break-glass members/ }).getByLabel(new RegExp(tenant.partnerAdmin.email)).check();
    await form.getByRole('button', { name: 'Save settings' }).click();
    await form.getByText('Saved.').waitFor();
    expect(await axeViolations(page)).toEqual([]);

    await page.getByRole('button', { name: 'Test discovery and credentials' }).click();
    await page.getByText('Test passed.').waitFor();
    await page.getByRole('button', { name: 'Activate' }).click();
    await page.getByText('offered at the partner’s sign-in page (one per partner)').waitFor();
    await t.screenshot('partner-sso-provider');

    const [saved] = await app.server.keel.db.select().from(ssoProviders).where(eq(ssoProviders.partnerId, tenant.partnerId));
    const orgOfMapping = (saved!.groupRoleMappings as { orgIds?: string[] }[])[0]!.orgIds;
    expect(orgOfMapping).toHaveLength(1);
    expect([tenant.orgId, tenant.otherOrgId]).toContain(orgOfMapping![0]);
    expect(saved).toMatchObject({ status: 'active', enforceSso: true, defaultRoleId: SYSTEM_ROLES.partnerReadOnly.id, orgAccess: 'all', breakGlassUserIds: [tenant.partnerAdmin.id] });

    // A technician of the partner's domain signs in at the partner's page.
    const email = `lin@${domain}`;
    idp.accounts.set('lin', { sub: 'lin', email, email_verified: true, name: 'Lin Technician', groups: ['msp-techs'] });
    const other = await tabs.open();
    await other.page.goto(link);
    await other.page.getByRole('link', { name: 'Sign in with MSP Entra' }).click();
    await other.page.locator('input[name="login"]').fill('lin');
    await other.page.locator('input[name="password"]').fill('any');
    await other.page.locator('button[type="submit"]').click();
    await other.page.locator('button[type="submit"]').click();
    await other.page.getByRole('heading', { name: 'Welcome, Lin Technician' }).waitFor();
    const [user] = await app.server.keel.db.select().from(users).where(eq(users.email, email));
    const [m] = await app.server.keel.db.select().from(partnerUsers).where(eq(partnerUsers.userId, user!.id));
    expect(m).toMatchObject({ partnerId: tenant.partnerId, roleId: SYSTEM_ROLES.partnerTechnician.id, orgAccess: 'selected', orgIds: orgOfMapping });
  });
});
