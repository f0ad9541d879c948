/**
 * The console remembers where you were (docs/decisions.md "The console's selection"): the partner /
 * organisation choice lives in the page's URL (a link carries it, the back button returns to the
 * previous one, moving around keeps it) and the last one is remembered for a new tab. This Keel has
 * no SMTP_URL: an invitation says where its email went instead of "sent".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { axeViolations, consoleBuild, consoleTabs, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: the partner / organisation choice in the URL', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  const tabs = consoleTabs(() => browser, 'tenant-choice');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  const picker = (page: Page) => page.locator('.tenant-picker').getByLabel('Organisation', { exact: true });
  const orgInUrl = (page: Page) => new URL(page.url()).searchParams.get('orgId');

  it('a picked organisation is in the URL: a shared link opens on it, the back button returns to the previous one, a new tab starts from the last one', async () => {
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/devices`);
    await submitPassword(page, tenant.partnerTechnician.email, tenant.partnerTechnician.password);
    await page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
    await picker(page).locator(`option[value="${tenant.orgId}"]`).waitFor({ state: 'attached' });

    await picker(page).selectOption(tenant.orgId);
    await expect.poll(() => orgInUrl(page)).toBe(tenant.orgId);
    await picker(page).selectOption(tenant.otherOrgId);
    await expect.poll(() => orgInUrl(page)).toBe(tenant.otherOrgId);
    const shared = page.url();
    expect(await axeViolations(page)).toEqual([]);

    // Back: the previous organisation, in the URL and in the picker.
    await page.goBack();
    await expect.poll(() => orgInUrl(page)).toBe(tenant.orgId);
    await expect.poll(() => picker(page).inputValue()).toBe(tenant.orgId);
    // Moving through the console keeps it.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Organisations' }).click();
    await expect.poll(() => new URL(page.url()).pathname).toBe('/admin/orgs');
    await expect.poll(() => orgInUrl(page)).toBe(tenant.orgId);
    await expect.poll(() => picker(page).inputValue()).toBe(tenant.orgId);

    // A new tab of the same browser without the choice in its URL starts from the last one.
    const second = await t.context.newPage();
    await second.goto(`${app.publicUrl}/devices`);
    await expect.poll(() => picker(second).inputValue()).toBe(tenant.orgId);
    await expect.poll(() => orgInUrl(second)).toBe(tenant.orgId);
    await second.close();

    // The shared link in another browser (nothing remembered there): signed in, it opens on the linked organisation.
    const other = await tabs.open();
    await other.page.goto(shared);
    await submitPassword(other.page, tenant.partnerTechnician.email, tenant.partnerTechnician.password);
    await other.page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
    await expect.poll(() => picker(other.page).inputValue()).toBe(tenant.otherOrgId);
    expect(orgInUrl(other.page)).toBe(tenant.otherOrgId);
    expect([...t.problems, ...other.problems]).toEqual([]);
  });

  it('without SMTP_URL an invitation does not claim to be sent: the notice says the email went to the server log', async () => {
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/users`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('button', { name: 'Invite a user' }).click();
    const dialog = page.getByRole('dialog', { name: 'Invite a user' });
    await dialog.getByLabel('Email').fill('no-smtp-invitee@example.com');
    await dialog.getByLabel('Name').fill('No Mail');
    await dialog.getByLabel('Role').selectOption({ label: 'Organization Technician' });
    await dialog.getByRole('button', { name: 'Send invitation' }).click();
    await page.getByText("no-smtp-invitee@example.com is invited. No email service is set up (SMTP_URL), so the invitation email, with its link, was written to Keel's server log.").waitFor();
    expect(await page.getByText('An invitation was sent').count()).toBe(0);
    // Resend says the same: where the new link went, never "sent".
    await page.getByRole('row', { name: 'no-smtp-invitee@example.com' }).getByRole('button', { name: 'Resend' }).click();
    await page.getByText("no-smtp-invitee@example.com: Invitation written to Keel's log (no SMTP_URL is set).").waitFor();
    expect(await page.getByText(/was sent/).count()).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });
});
