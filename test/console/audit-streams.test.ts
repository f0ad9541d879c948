/**
 * The "Audit streaming" section of the console's audit page in chromium (docs/deploy.md "Audit and
 * SIEM"): a platform administrator adds the platform's stream, sees its status, lag and last error,
 * edits it and deletes it; the page passes axe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { axeViolations, consoleBuild, consoleTabs, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: audit streaming in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  const tabs = consoleTabs(() => browser, 'audit-streams');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  it('a platform administrator adds, reads, edits and deletes the platform stream', async () => {
    const admin = await createUser(app, { platformAdmin: true });
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/audit`);
    await submitPassword(page, admin.email, admin.password);
    const section = page.getByRole('region', { name: 'Audit streaming' });
    await section.getByText('No audit streams.').waitFor();
    await section.getByRole('button', { name: 'Add stream' }).click();
    const dialog = page.getByRole('dialog', { name: 'Add audit stream' });
    await dialog.getByLabel('Type').selectOption('https');
    await dialog.getByLabel('URL').fill('https://127.0.0.1:1/ingest');
    await dialog.getByLabel('Signing secret').fill('short');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.getByText('16 to 256 characters').first().waitFor();
    await dialog.getByLabel('Signing secret').fill('console-secret-0123456789');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'detached' });
    const row = section.getByRole('row', { name: /127\.0\.0\.1:1\/ingest/ });
    await row.waitFor();
    // The sender finds nothing listening there: the row says so after a reload of the list.
    await expect.poll(async () => {
      await page.reload();
      return (await section.getByRole('row', { name: /127\.0\.0\.1:1\/ingest/ }).textContent({ timeout: 60_000 })) ?? '';
    }, { timeout: 60_000, interval: 1000 }).toMatch(/failing/);
    expect(await axeViolations(page)).toEqual([]);
    expect(await page.content()).not.toContain('console-secret-0123456789');

    await section.getByRole('button', { name: 'Edit stream https://127.0.0.1:1/ingest' }).click();
    const edit = page.getByRole('dialog', { name: 'Edit audit stream' });
    await edit.getByLabel('URL').fill('https://127.0.0.1:2/ingest');
    await edit.getByRole('button', { name: 'Save' }).click();
    await edit.waitFor({ state: 'detached' });
    await section.getByRole('row', { name: /127\.0\.0\.1:2\/ingest/ }).waitFor();
    await t.screenshot('audit-streams');

    await section.getByRole('button', { name: 'Delete stream https://127.0.0.1:2/ingest' }).click();
    await section.getByText('No audit streams.').waitFor();
    expect(t.problems).toEqual([]);
  });
});
