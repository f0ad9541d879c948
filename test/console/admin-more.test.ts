/**
 * More of the console in chromium (playwright-core) against one started Keel: a SAML provider's
 * fields (checked before sending, the API's `details.fields` beside the input, the metadata link),
 * a rollout halted by a failure report and resumed from the console, update windows at partner and
 * organisation level, a partner's slug changed in the platform's Partners list, and the newer pages
 * on a 390-pixel-wide screen in both themes.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Locator, Page } from 'playwright-core';
import { generate } from 'selfsigned';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey, heartbeat, registerRemote } from '../agents/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

afterEach(() => clock.reset());

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: SAML fields, halted rollouts, update windows, small screens', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  const tabs = consoleTabs(() => browser, 'admin-more');
  const tab = tabs.open;

  beforeAll(async () => {
    const dir = await consoleBuild();
    // One failed report of one halts a rollout here (the default waits for 5 reports).
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, AGENT_AUTO_PROMOTE: 'false', AGENT_HALT_MIN_REPORTS: '1' } });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  async function bothThemesPass(page: Page): Promise<void> {
    await page.emulateMedia({ colorScheme: 'light' });
    expect(await axeViolations(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
  }

  it('an organisation admin with a second factor sets up a SAML provider: a URL and a certificate are checked before sending, the API refusal of a certificate shows beside it, and the saved provider links SP metadata', async () => {
    const tenant = await createTenant(app);
    const { secret, accessToken } = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    const idp = await generate([{ name: 'commonName', value: 'Contoso ADFS signing' }], { keySize: 2048, algorithm: 'sha256' });
    const t = await tab();
    const { page } = t;
    const patches: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'PATCH' && r.url().includes('/api/v1/sso/providers/')) patches.push(r.url());
    });
    await signInWithTotp(page, `${app.publicUrl}/integrations/sso`, tenant.orgAdmin, secret);
    await page.getByRole('button', { name: 'New provider' }).click();
    const create = page.getByRole('form', { name: 'New provider' });
    await create.getByLabel('Protocol').selectOption('saml');
    await create.getByLabel('Name', { exact: true }).fill('Contoso ADFS');
    await create.getByRole('button', { name: 'Create provider' }).click();
    await page.getByRole('heading', { name: 'Provider Contoso ADFS' }).waitFor();

    const form = page.getByRole('form', { name: 'Provider settings' });
    const save = form.getByRole('button', { name: 'Save settings' });
    await form.getByLabel('IdP entity id').fill('https://sts.contoso.test/adfs/services/trust');
    // Not a URL: the browser's own check holds the form back.
    const ssoUrl = form.getByLabel('IdP sign-in URL');
    await ssoUrl.fill('sts.contoso.test/adfs/ls');
    await save.click();
    expect(await ssoUrl.evaluate((el) => (el as unknown as { validity: { typeMismatch: boolean } }).validity.typeMismatch)).toBe(true);
    await ssoUrl.fill('https://sts.contoso.test/adfs/ls/');
    // Not certificate text: said beside the field before anything is sent.
    const cert = form.getByLabel('IdP signing certificate');
    await cert.fill('the certificate from the ADFS console');
    await save.click();
    await form.getByText(/ is not a certificate: paste the PEM text/).waitFor();
    expect(await cert.getAttribute('aria-invalid')).toBe('true');
    expect(patches).toEqual([]);
    // PEM-shaped but no X.509 inside: the API's details.fields.certificate lands beside the same field.
    await cert.fill('-----BEGIN CERTIFICATE-----\nTm90IGEgY2VydGlmaWNhdGUgYXQgYWxs\n-----END CERTIFICATE-----');
    await save.click();
    const refusal = form.getByText('is not an X.509 certificate (PEM or base64)');
    await refusal.waitFor();
    expect(patches).toHaveLength(1);
    expect(await cert.getAttribute('aria-invalid')).toBe('true');
    expect((await cert.getAttribute('aria-describedby'))?.split(' ')).toContain(await refusal.getAttribute('id'));
    expect(await ssoUrl.getAttribute('aria-invalid')).toBeNull();
    await t.screenshot('sso-saml-refused');
    expect(await axeViolations(page)).toEqual([]);

    await cert.fill(idp.cert);
    await save.click();
    await form.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Test certificate' }).click();
    await page.getByText('Test passed.').waitFor();
    const id = new URL(page.url()).pathname.split('/').at(-1)!;
    const stored = await app.api('GET', `/sso/providers/${id}`, { token: accessToken });
    expect(stored.body).toMatchObject({ type: 'saml', entityId: 'https://sts.contoso.test/adfs/services/trust', ssoUrl: 'https://sts.contoso.test/adfs/ls/' });
    expect(stored.body.certificate.replace(/\s+/g, '')).toBe(idp.cert.replace(/\s+/g, ''));

    // The metadata link the identity provider's administrator is given: Keel's SP metadata.
    const link = page.getByRole('link', { name: `${app.publicUrl}/api/v1/sso/saml/metadata/${id}` });
    const href = await link.getAttribute('href');
    expect(href).toBe(`/api/v1/sso/saml/metadata/${id}`);
    const metadata = await page.request.get(new URL(href!, app.publicUrl).toString());
    expect(metadata.status()).toBe(200);
    expect(metadata.headers()['content-type']).toMatch(/^application\/samlmetadata\+xml/);
    const xml = await metadata.text();
    expect(xml).toMatch(/<(\w+:)?EntityDescriptor[^>]*entityID="[^"]+\/api\/v1\/sso\/saml\/metadata"/);
    expect(xml).toMatch(/<(\w+:)?SPSSODescriptor[^>]*WantAssertionsSigned="true"/);
    expect(xml).toContain(`Location="${app.publicUrl}/api/v1/sso/saml/acs"`);
    await t.screenshot('sso-saml-saved');
    await bothThemesPass(page);
    expect(t.problems).toEqual([]);
  });

  it('a platform administrator promotes a version at 40%, a failure report halts the rollout, the page says so in words, and Resume sets it running again', async () => {
    const tenant = await createTenant(app);
    const adminToken = (await login(app, tenant.orgAdmin)).accessToken;
    const device = await enroll(app, await enrollmentKey(app, adminToken, tenant.orgId), { hostname: 'till-03' });
    expect((await heartbeat(app, device)).status).toBe(200);
    const admin = await createUser(app, { name: 'Release Manager', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);
    await registerRemote(app, systemToken, { version: '2.1.0' });

    const t = await tab();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/devices/agent-versions`, admin, secret);
    // Registered without release keys (this test app has none): the build is marked unsigned.
    await page.getByRole('row').filter({ hasText: '2.1.0' }).getByText('unsigned', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Promote agent 2.1.0' }).click();
    const dialog = page.getByRole('dialog', { name: 'Promote agent 2.1.0' });
    await dialog.getByLabel('Offer to this share of devices (%)').fill('40');
    await dialog.getByRole('button', { name: 'Promote' }).click();
    await page.getByText('agent 2.1.0 is the fleet target for 40% of devices.').waitFor();
    expect(await page.getByRole('button', { name: 'Resume the rollout of agent 2.1.0' }).count()).toBe(0);

    // The device is offered it (update-now ignores the 40% cohort): only an offered update's report counts.
    expect((await app.api('POST', '/devices/update-now', { token: adminToken, body: { deviceIds: [device.deviceId] } })).status).toBe(202);
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '2.1.0' });
    // The device fails to install it: one failed report of one is past the halt threshold here.
    const report = await app.api('POST', '/agents/update-report', { token: device.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '2.1.0', state: 'failed', error: 'checksum mismatch' } });
    expect(report.status).toBe(204);
    await page.reload();
    const halted = page.getByRole('status').filter({ hasText: 'The agent rollout of 2.1.0 is halted.' });
    await halted.getByText('1 of the 1 device that reported on it failed to update (or rolled back)').waitFor();
    await halted.getByText('Resuming offers it again and counts failures afresh.').waitFor();
    await page.getByRole('cell', { name: /halted 40%/ }).getByText('offered to no device until resumed').waitFor();
    // Halted: widening is not offered (it would not resume it).
    expect(await page.getByRole('button', { name: 'Widen the rollout of agent 2.1.0' }).count()).toBe(0);
    const before = await app.api('GET', '/agent-versions?limit=100', { token: systemToken });
    expect(before.body.data.find((v: { version: string }) => v.version === '2.1.0').rollout).toMatchObject({ status: 'halted', percent: 40, failed: 1 });
    await t.screenshot('agent-rollout-halted');
    await bothThemesPass(page);

    await halted.getByRole('button', { name: 'Resume the rollout of agent 2.1.0' }).click();
    await page.getByText('The agent rollout of 2.1.0 is running again; failures are counted afresh.').waitFor();
    await page.getByRole('cell', { name: /active 40%/ }).waitFor();
    expect(await page.getByText('The agent rollout of 2.1.0 is halted.').count()).toBe(0);
    const after = await app.api('GET', '/agent-versions?limit=100', { token: systemToken });
    expect(after.body.data.find((v: { version: string }) => v.version === '2.1.0').rollout).toMatchObject({ status: 'active', percent: 40, succeeded: 0, failed: 0 });
    await page.getByRole('button', { name: 'Widen the rollout of agent 2.1.0' }).waitFor();
    expect(t.problems).toEqual([]);
  });

  it('a partner admin sets the partner-level update window, then an organisation-level one that replaces it; the page says both in words', async () => {
    const tenant = await createTenant(app);
    // Partner Admin forces a second factor: enrolled first.
    const { secret, accessToken } = await enrollTotp(app, (await login(app, tenant.partnerAdmin)).accessToken);
    const t = await tab();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/integrations/webhooks`, tenant.partnerAdmin, secret);
    // A page of one organisation asks a partner user to pick it first (PermissionPage's context).
    await page.getByRole('heading', { name: 'Webhooks', level: 1 }).waitFor();
    await page.getByText('Pick an organisation at the top of the page: this page manages one organisation at a time.').waitFor();
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Update windows' }).click();
    await page.getByRole('heading', { name: 'Update windows' }).waitFor();
    await page.getByText(/^Partner level: the default window/).waitFor();
    const card = page.getByRole('region', { name: "The partner's default window and pins" });
    await card.getByText('no window: updates at any time; pinned: none.').waitFor();
    await card.getByRole('checkbox', { name: 'Updates only inside a window' }).check();
    await card.getByRole('checkbox', { name: 'Sunday' }).uncheck();
    await card.getByRole('checkbox', { name: 'Wednesday' }).check();
    await card.getByLabel('Starts at').fill('21:00');
    await card.getByLabel('Ends at').fill('05:00');
    await card.getByLabel('Pinned helper version').fill('2.0.0');
    await card.getByRole('button', { name: 'Save', exact: true }).click();
    await card.getByText('Saved.').waitFor();
    await card.getByText('Wednesday and Saturday, 21:00 to 05:00 UTC (ends the next day); pinned: helper 2.0.0.').waitFor();
    const partnerLevel = { maintenanceWindow: { days: ['wed', 'sat'], start: '21:00', end: '05:00' }, pinnedVersions: { helper: '2.0.0' } };
    expect((await app.api('GET', `/partners/${tenant.partnerId}/agent-update-settings`, { token: accessToken })).body).toEqual(partnerLevel);
    await t.screenshot('update-windows-partner');
    await bothThemesPass(page);

    // Organisation level: the partner default is shown, and applies until the organisation sets its own.
    await page.getByLabel('Organisation', { exact: true }).selectOption({ label: 'Org A' });
    const org = page.getByRole('region', { name: "This organisation's window and pins" });
    await org.getByText('no window: updates at any time; pinned: none.').waitFor();
    const inherited = page.getByRole('status').filter({ hasText: 'Partner default window:' });
    await inherited.getByText('Partner default window: Wednesday and Saturday, 21:00 to 05:00 UTC (ends the next day); pinned: helper 2.0.0.').waitFor();
    await inherited.getByText('It applies to this organisation, which sets no window of its own.').waitFor();
    await org.getByRole('checkbox', { name: 'Updates only inside a window' }).check();
    // No day at all: said before sending.
    await org.getByRole('checkbox', { name: 'Saturday' }).uncheck();
    await org.getByRole('checkbox', { name: 'Sunday' }).uncheck();
    await org.getByRole('button', { name: 'Save', exact: true }).click();
    await org.getByText('Pick at least one day.').waitFor();
    await org.getByRole('checkbox', { name: 'Tuesday' }).check();
    await org.getByLabel('Starts at').fill('01:00');
    await org.getByLabel('Ends at').fill('03:00');
    await org.getByLabel('Pinned agent version').fill('1.0.0');
    await org.getByRole('button', { name: 'Save', exact: true }).click();
    await org.getByText('Saved.').waitFor();
    await org.getByText('Tuesday, 01:00 to 03:00 UTC; pinned: agent 1.0.0.').waitFor();
    await inherited.getByText("This organisation's own window below replaces it.").waitFor();
    expect((await app.api('GET', `/orgs/${tenant.orgId}/agent-update-settings`, { token: accessToken })).body).toEqual({
      maintenanceWindow: { days: ['tue'], start: '01:00', end: '03:00' },
      pinnedVersions: { agent: '1.0.0' },
    });
    expect((await app.api('GET', `/partners/${tenant.partnerId}/agent-update-settings`, { token: accessToken })).body).toEqual(partnerLevel);
    await t.screenshot('update-windows-org');
    await bothThemesPass(page);

    // Back at partner level the partner's own window is what the page shows.
    await page.getByLabel('Organisation', { exact: true }).selectOption({ label: '— partner level —' });
    await card.getByText('Wednesday and Saturday, 21:00 to 05:00 UTC (ends the next day); pinned: helper 2.0.0.').waitFor();
    expect(t.problems).toEqual([]);
  });

  it('a platform administrator changes a partner\'s slug in the Partners list; a malformed slug and another partner\'s slug are refused in words beside the field and change nothing', async () => {
    const tenant = await createTenant(app);
    const other = await createTenant(app);
    const admin = await createUser(app, { name: 'Slug Admin', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);
    const partnerOf = async (id: string) => (await app.api('GET', `/partners/${id}`, { token: systemToken })).body as { name: string; slug: string };
    const before = await partnerOf(tenant.partnerId);
    const taken = (await partnerOf(other.partnerId)).slug;
    const t = await tab();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/admin/partners`, admin, secret);
    const item = page.getByRole('list', { name: 'Partners' }).getByRole('listitem').filter({ hasText: before.name });
    await item.getByText(`Sign-in page /login/${before.slug}`).waitFor();
    await item.getByRole('button', { name: `Sign-in address of partner ${before.name}` }).click();
    const form = item.getByRole('form', { name: `Sign-in address of ${before.name}` });
    const field = form.getByLabel('Address name (slug)');
    const change = form.getByRole('button', { name: 'Change address' });

    await field.fill('Not a slug!');
    await change.click();
    await form.getByText('Address name must be 1-63 lowercase letters, digits and inner hyphens.').waitFor();
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    // Said beside the field only, not again above the form.
    expect(await form.getByRole('alert').count()).toBe(0);
    await field.fill(taken);
    await change.click();
    const refusal = form.getByText('Another partner already has this slug: choose another');
    await refusal.waitFor();
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    expect((await field.getAttribute('aria-describedby'))?.split(' ')).toContain(await refusal.getAttribute('id'));
    expect(await form.getByRole('alert').count()).toBe(0);
    expect((await partnerOf(tenant.partnerId)).slug).toBe(before.slug);
    expect((await partnerOf(other.partnerId)).slug).toBe(taken);
    await t.screenshot('partners-slug-taken');
    expect(await axeViolations(page)).toEqual([]);

    const slug = `${before.slug}-renamed`;
    await field.fill(slug);
    await change.click();
    await page.getByText(`The sign-in page of ${before.name} is now /login/${slug}.`).waitFor();
    await item.getByText(`Sign-in page /login/${slug}`).waitFor();
    expect((await partnerOf(tenant.partnerId)).slug).toBe(slug);
    expect(t.problems).toEqual([]);
  });

  it('the webhooks, single sign-on, devices, agent versions, update windows and audit pages fit a 390-pixel-wide screen with their main action reachable, in the light and the dark theme', async () => {
    const tenant = await createTenant(app);
    const adminToken = (await login(app, tenant.orgAdmin)).accessToken;
    const device = await enroll(app, await enrollmentKey(app, adminToken, tenant.orgId), { hostname: 'reception-pc-with-a-long-host-name-01' });
    expect((await heartbeat(app, device)).status).toBe(200);
    const platform = await createUser(app, { name: 'Small Screen Admin', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, platform)).accessToken);
    await registerRemote(app, systemToken, { version: '3.0.0' });

    const pages: { user: 'org' | 'platform'; path: string; heading: string; action: (p: Page) => Locator }[] = [
      { user: 'org', path: '/integrations/webhooks', heading: 'Webhooks', action: (p) => p.getByRole('button', { name: 'New webhook' }) },
      { user: 'org', path: '/integrations/sso', heading: 'Single sign-on', action: (p) => p.getByRole('button', { name: 'New provider' }) },
      { user: 'org', path: '/devices', heading: 'Devices', action: (p) => p.getByRole('button', { name: 'Filter' }) },
      { user: 'org', path: '/devices/update-windows', heading: 'Update windows', action: (p) => p.getByRole('button', { name: 'Save', exact: true }) },
      { user: 'org', path: '/admin/audit', heading: 'Audit log', action: (p) => p.getByRole('button', { name: 'Export CSV' }) },
      { user: 'platform', path: '/devices/agent-versions', heading: 'Agent versions', action: (p) => p.getByRole('button', { name: 'Promote agent 3.0.0' }) },
    ];
    const orgTab = await tab({ width: 390, height: 844 });
    await orgTab.page.goto(`${app.publicUrl}/login`);
    await submitPassword(orgTab.page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await orgTab.page.getByRole('heading', { name: /^Welcome/ }).waitFor();
    const platformTab = await tab({ width: 390, height: 844 });
    await signInWithTotp(platformTab.page, `${app.publicUrl}/`, platform, secret);
    await platformTab.page.getByRole('heading', { name: /^Welcome/ }).waitFor();

    for (const p of pages) {
      const t = p.user === 'org' ? orgTab : platformTab;
      const { page } = t;
      // Through the folded navigation, as a person on a phone would.
      await page.getByRole('button', { name: 'Menu' }).click();
      await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: p.heading, exact: true }).click();
      await page.getByRole('heading', { name: p.heading, level: 1 }).waitFor();
      expect(new URL(page.url()).pathname).toBe(p.path);
      const action = p.action(page);
      await action.waitFor();
      for (const scheme of ['light', 'dark'] as const) {
        await page.emulateMedia({ colorScheme: scheme });
        expect(await page.evaluate('document.scrollingElement.scrollWidth'), `${p.path} (${scheme}) scrolls sideways`).toBeLessThanOrEqual(390);
        // Reachable: scrolled to (inside a table's own frame if need be), on screen, not covered, enabled.
        await action.scrollIntoViewIfNeeded();
        const box = await action.boundingBox();
        expect(box, `${p.path}: main action`).not.toBeNull();
        expect(box!.x).toBeGreaterThanOrEqual(0);
        expect(box!.x + box!.width).toBeLessThanOrEqual(390);
        expect(await action.isEnabled()).toBe(true);
        await action.click({ trial: true });
        expect(await axeViolations(page), `${p.path} (${scheme})`).toEqual([]);
        await t.screenshot(`${p.path.split('/').at(-1)}-390${scheme === 'dark' ? '-dark' : ''}`);
      }
      await page.emulateMedia({ colorScheme: 'light' });
    }
    expect(orgTab.problems).toEqual([]);
    expect(platformTab.problems).toEqual([]);
  });
});
