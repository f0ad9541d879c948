/**
 * The console's Provisioning page (README "SCIM provisioning") in chromium against one started Keel:
 * the base URL to paste, a token made (shown once) and revoked, the last sync seen, the roles of
 * provisioned people saved, the managed people listed; the Users page marks a managed account and
 * offers no status change Keel would refuse; axe in both themes, and the page at 390 pixels.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { getScimSettings } from '../../src/modules/scim/settings.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: SCIM provisioning in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let secret: string;
  const tabs = consoleTabs(() => browser, 'provisioning');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    browser = await launchChromium();
    tenant = await createTenant(app);
    secret = (await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken)).secret;
  }, 180_000);
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  it('an organisation admin finds the base URL, makes a token (shown once) a directory then uses, saves the roles, sees the managed people and revokes the token; Users marks the managed account', async () => {
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/integrations/provisioning`, tenant.orgAdmin, secret);
    await page.getByRole('heading', { name: 'Provisioning' }).waitFor();
    await page.getByRole('link', { name: 'Provisioning' }).waitFor();
    await page.getByText(`${app.publicUrl}/scim/v2`, { exact: true }).waitFor();
    await page.getByText('Last sync seen: never').waitFor();

    const form = page.getByRole('form', { name: 'Make a SCIM token' });
    await form.getByLabel('Token name').fill('Entra ID provisioning');
    await form.getByRole('button', { name: 'Make token' }).click();
    const shown = page.getByText(/^kscim_[\w-]{20,}$/);
    const token = (await shown.textContent()) ?? '';
    expect(token).toMatch(/^kscim_[\w-]{20,}$/);
    expect(await axeViolations(page)).toEqual([]);

    // A directory uses the token: the person appears in the list, and the last sync is seen.
    const userName = `console-${Date.now().toString(36)}@example.com`;
    const made = await app.request('POST', '/scim/v2/Users', { token, body: { userName, name: { givenName: 'Dee', familyName: 'Rectory' } }, headers: { 'content-type': 'application/scim+json' } });
    expect(made.status).toBe(201);
    await page.reload();
    await page.getByRole('row', { name: new RegExp(userName.replace(/\./g, '\\.')) }).waitFor();
    await page.getByText('Last sync seen: never').waitFor({ state: 'detached' });

    const roles = page.getByRole('form', { name: 'Provisioning roles' });
    await roles.getByLabel('Role of new people').selectOption(SYSTEM_ROLES.orgTechnician.id);
    await roles.getByRole('button', { name: 'Add a mapping' }).click();
    await roles.getByLabel('Group 1', { exact: true }).fill('Keel Admins');
    await roles.getByLabel('Role for group 1').selectOption(SYSTEM_ROLES.orgAdmin.id);
    await roles.getByRole('button', { name: 'Save roles' }).click();
    await roles.getByText('Saved.').waitFor();
    expect(await getScimSettings(app.server.keel.db, tenant.orgId)).toEqual({ defaultRoleId: SYSTEM_ROLES.orgTechnician.id, groupRoleMappings: [{ group: 'Keel Admins', roleId: SYSTEM_ROLES.orgAdmin.id }] });
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      expect(await axeViolations(page), scheme).toEqual([]);
    }
    await page.emulateMedia({ colorScheme: 'light' });
    await t.screenshot('provisioning');

    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Revoke Entra ID provisioning' }).click();
    await page.getByText('No tokens yet.').waitFor();
    expect((await app.request('GET', '/scim/v2/Users', { token })).status).toBe(401);

    await page.getByRole('link', { name: 'Users' }).click();
    const row = page.getByRole('row', { name: new RegExp(userName.replace(/\./g, '\\.')) });
    await row.getByText('Managed by directory').waitFor();
    expect(await row.getByRole('button', { name: /^(Disable|Enable)$/ }).count()).toBe(0);
    const plain = page.getByRole('row', { name: new RegExp(tenant.orgTechnician.email.replace(/\./g, '\\.')) });
    await plain.getByRole('button', { name: 'Disable' }).waitFor();
    expect(await plain.getByText('Managed by directory').count()).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });

  it('the Provisioning page fits a 390-pixel-wide screen with its main action reachable, in the light and the dark theme', async () => {
    const t = await tabs.open({ width: 390, height: 844 });
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/integrations/provisioning`, tenant.orgAdmin, secret);
    await page.getByRole('heading', { name: 'Provisioning' }).waitFor();
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      const button = page.getByRole('button', { name: 'Make token' });
      await button.scrollIntoViewIfNeeded();
      expect(await button.isVisible()).toBe(true);
      const width = await page.evaluate<number>('document.documentElement.scrollWidth');
      expect(width, scheme).toBeLessThanOrEqual(390);
      expect(await axeViolations(page), scheme).toEqual([]);
    }
    await t.screenshot('provisioning-390');
    expect(t.problems).toEqual([]);
  });
});
