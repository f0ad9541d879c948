/**
 * The console's integration and device pages in chromium (playwright-core), against one started Keel
 * with real peers on loopback: a node:http webhook receiver, and a real OpenID provider
 * (oidc-provider) whose login and consent forms the browser fills in.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { clock } from '../../src/platform/clock.js';
import { axeViolations, consoleBuild, openConsole, submitPassword, type ConsoleTab } from './helpers.js';

afterEach(() => clock.reset());

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: webhooks, single sign-on, devices in chromium', { timeout: 60_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let receiver: Receiver;
  let idp: OidcIdp;
  const tabs: ConsoleTab[] = [];

  beforeAll(async () => {
    const [dir, rec] = await Promise.all([consoleBuild(), startReceiver()]);
    receiver = rec;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    for (const t of tabs) await t.close().catch(() => undefined);
    await browser?.close();
    await app?.close();
    await receiver?.close();
    await idp?.close();
  });

  async function tab(): Promise<ConsoleTab> {
    const t = await openConsole(browser);
    tabs.push(t);
    const n = tabs.length;
    onTestFailed(async () => {
      await t.screenshot(`integrations-failed-${n}`).catch(() => undefined);
      console.error(`console page problems: ${JSON.stringify(t.problems)}; at ${t.page.url()}`);
    });
    return t;
  }

  it('an organisation admin creates a webhook (grouped event picker, a custom header), sends a test and sees it delivered in the history with its payload', async () => {
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/webhooks`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
    await page.getByText('No webhooks yet.').waitFor();
    await page.getByRole('button', { name: 'New webhook' }).click();
    const form = page.getByRole('form', { name: 'New webhook' });
    await form.getByLabel('Name', { exact: true }).fill('Ticketing');
    await form.getByLabel('URL', { exact: true }).fill(`${receiver.url}/hook`);
    await form.getByLabel('All devices').check();
    await form.getByLabel('webhook.test').check();
    await form.getByRole('button', { name: 'Add a header' }).click();
    await form.getByLabel('Header 1 name').fill('X-Ticket-Queue');
    await form.getByLabel('Header 1 value').fill('noc');
    await form.getByLabel('Retries after the first attempt').fill('3');
    await t.screenshot('webhooks-new');
    expect(await axeViolations(page)).toEqual([]);
    await form.getByRole('button', { name: 'Create webhook' }).click();

    await page.getByRole('heading', { name: 'Webhook Ticketing' }).waitFor();
    await page.getByText('No deliveries yet.').waitFor();
    await page.getByRole('button', { name: 'Send test' }).click();
    await page.getByText('A webhook.test delivery is queued').waitFor();
    const [got] = await receiver.waitFor(1);
    expect(got?.headers['x-ticket-queue']).toBe('noc');
    // The history shows it once the worker has delivered it (Refresh asks again).
    await expect.poll(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      return page.getByRole('cell', { name: 'delivered' }).count();
    }, { timeout: 15_000 }).toBe(1);
    await page.getByRole('button', { name: /^View delivery webhook\.test/ }).click();
    const dialog = page.getByRole('dialog', { name: 'Delivery webhook.test' });
    await dialog.getByText('HTTP 200').waitFor();
    expect(await dialog.getByLabel('Payload').textContent()).toContain('"type": "webhook.test"');
    await t.screenshot('webhook-delivery');
    expect(await axeViolations(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Close' }).click();
    await t.screenshot('webhook-detail');
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });
});
