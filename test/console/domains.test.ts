/**
 * The verified-domains section of the console's single sign-on page in chromium, against one started
 * Keel whose TXT lookups go to a loopback DNS server of the test's own (DNS_RESOLVER): the nudge to
 * verify, adding a domain, the TXT record to publish, a failed and a successful verification; the
 * same for a partner's own domains on the partner-level card, apart from the organisation's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { eq } from 'drizzle-orm';
import { createTenant, createUser, enrollTotp, login, totpCode, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { users } from '../../src/modules/identity/schema.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { newTotpSecret } from '../../src/modules/mfa/totp.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startDnsServer, type DnsServer } from '../helpers/dns.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: verified domains in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let dns: DnsServer;
  const tabs = consoleTabs(() => browser, 'domains');

  beforeAll(async () => {
    const [dir, server] = await Promise.all([consoleBuild(), startDnsServer()]);
    dns = server;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, DNS_RESOLVER: dns.address } });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await dns?.close();
  });

  it('an organisation admin is nudged to verify a domain, adds one, sees why it is still pending, publishes the TXT record and verifies it', async () => {
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/sso`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: 'Verified domains' }).waitFor();
    await page.getByText('No domain is verified yet').waitFor();
    const form = page.getByRole('form', { name: 'Add a domain' });
    await form.getByLabel('Domain', { exact: true }).fill('*.contoso.example');
    await form.getByRole('button', { name: 'Add domain' }).click();
    await form.getByText('without a wildcard').waitFor();
    await form.getByLabel('Domain', { exact: true }).fill('Contoso-Console.example');
    await form.getByRole('button', { name: 'Add domain' }).click();
    const row = page.getByRole('row', { name: /contoso-console\.example/ });
    const record = (await row.locator('code').textContent({ timeout: 60_000 })) ?? '';
    expect(record).toMatch(/^keel-verification=[\w-]{43}$/);
    await row.getByRole('button', { name: 'Verify contoso-console.example' }).click();
    await row.getByText('has no TXT record').waitFor();
    expect(await axeViolations(page)).toEqual([]);

    dns.txt.set('contoso-console.example', [record]);
    await row.getByRole('button', { name: 'Verify contoso-console.example' }).click();
    await row.getByText('verified', { exact: true }).waitFor();
    await page.getByText('No domain is verified yet').waitFor({ state: 'detached' });
    await t.screenshot('sso-domains');
    expect(t.problems).toEqual([]);
  });

  it('a partner admin claims a domain on the partner-level card, publishes its TXT record, verifies it and removes it; the organisation\'s card and domains are untouched', async () => {
    const own = await createTenant(app);
    // Partner Admin forces a second factor: enrolled first.
    const { secret, accessToken } = await enrollTotp(app, (await login(app, own.partnerAdmin)).accessToken);
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/integrations/sso?orgId=${own.orgId}`, own.partnerAdmin, secret);
    const card = page.getByRole('region', { name: /^Partner-level verified domains of Partner / });
    const orgCard = page.getByRole('region', { name: 'Verified domains', exact: true });
    await card.getByText('No domain of the partner is verified yet: until one is, the partner’s providers sign in no one.').waitFor();
    await orgCard.getByText('No domains yet.').waitFor();

    const form = card.getByRole('form', { name: 'Add a partner domain' });
    await form.getByLabel('Domain', { exact: true }).fill('MSP-Console.example');
    await form.getByRole('button', { name: 'Add domain' }).click();
    const row = card.getByRole('row', { name: /msp-console\.example/ });
    const record = (await row.locator('code').textContent({ timeout: 60_000 })) ?? '';
    expect(record).toMatch(/^keel-verification=[\w-]{43}$/);
    dns.txt.set('msp-console.example', [record]);
    await row.getByRole('button', { name: 'Verify msp-console.example' }).click();
    await row.getByText('verified', { exact: true }).waitFor();
    await card.getByText('No domain of the partner is verified yet').waitFor({ state: 'detached' });
    // The organisation's card still has none (and still nudges); the API agrees.
    await orgCard.getByText('No domains yet.').waitFor();
    await orgCard.getByText('No domain is verified yet').waitFor();
    expect(await orgCard.getByText('msp-console.example').count()).toBe(0);
    const partnerList = await app.api('GET', `/partners/${own.partnerId}/domains`, { token: accessToken });
    expect(partnerList.body.data).toMatchObject([{ domain: 'msp-console.example', status: 'verified', partnerId: own.partnerId, orgId: null }]);
    expect((await app.api('GET', `/orgs/${own.orgId}/domains`, { token: accessToken })).body.data).toEqual([]);
    await t.screenshot('sso-partner-domains');
    expect(await axeViolations(page)).toEqual([]);

    await row.getByRole('button', { name: 'Remove msp-console.example' }).click();
    await card.getByText('No domains yet.').waitFor();
    await card.getByText('No domain of the partner is verified yet').waitFor();
    expect((await app.api('GET', `/partners/${own.partnerId}/domains`, { token: accessToken })).body.data).toEqual([]);
    expect(t.problems).toEqual([]);
  });

  it('a session without a second factor is refused an SSO provider write, and the page confirms it in place with a TOTP code (step-up), after which the save works', async () => {
    const admin = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/sso`);
    await submitPassword(page, admin.email, admin.password);
    await page.getByRole('heading', { name: 'Single sign-on' }).waitFor();
    // Arrangement: an authenticator set up after this browser signed in (as for an SSO session, which has no Keel factor step).
    const keel = app.server.keel;
    const secret = await newTotpSecret();
    await keel.db.update(users).set({ mfaSecret: keel.secrets.sealer.seal(secret, `users.mfa_secret:${admin.id}`), mfaEnabled: true, mfaMethod: 'totp' }).where(eq(users.id, admin.id));
    await identityOf(keel).sessions.userChanged(admin.id);

    await page.getByRole('button', { name: 'New provider' }).click();
    const form = page.getByRole('form', { name: 'New provider' });
    await form.getByLabel('Name', { exact: true }).fill('Stepped up');
    await form.getByRole('button', { name: 'Create provider' }).click();
    await form.getByRole('alert').getByText('can only be changed from a session signed in with a second factor').waitFor();
    const stepUp = form.getByRole('group', { name: 'Confirm with your second factor' });
    await stepUp.getByLabel('Second-factor code').fill(await totpCode(secret));
    await stepUp.getByRole('button', { name: 'Confirm session' }).click();
    await form.getByText('This session is now confirmed with your second factor').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await form.getByRole('button', { name: 'Create provider' }).click();
    await page.getByRole('heading', { name: /Stepped up/ }).waitFor();
    expect(t.problems).toEqual([]);
  });
});
