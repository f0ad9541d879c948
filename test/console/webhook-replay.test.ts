/**
 * The console's partner-wide webhooks and replay in chromium (docs/decisions.md "Webhook replay and
 * partner-wide webhooks"): a partner administrator creates a webhook for every organisation of the
 * partner, events of two organisations reach a real receiver, and the webhook's Replay dialog sends
 * them again, showing the progress.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { insertRole } from '../access/helpers.js';
import { publish } from '../webhooks/setup.js';
import { axeViolations, consoleBuild, consoleTabs, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: partner-wide webhooks and replay in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let receiver: Receiver;
  let admin: { email: string; password: string };
  let key: string;
  const tabs = consoleTabs(() => browser, 'webhook-replay');

  beforeAll(async () => {
    const [dir, rec] = await Promise.all([consoleBuild(), startReceiver()]);
    receiver = rec;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    browser = await launchChromium();
    tenant = await createTenant(app);
    const role = await insertRole(app, { scope: 'partner', partnerId: tenant.partnerId, name: 'Partner Full', perms: ['*:*'] });
    admin = await createUser(app, { name: 'Partner Full', partner: { partnerId: tenant.partnerId, roleId: role } });
    const token = (await login(app, admin)).accessToken;
    key = (await app.api('POST', '/api-keys', { token, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } })).body.key;
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await receiver?.close();
  });

  it('a partner administrator creates a webhook for all organisations of the partner and replays its events with progress', async () => {
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/webhooks?orgId=${tenant.orgId}`);
    await submitPassword(page, admin.email, admin.password);
    await page.getByRole('heading', { name: 'Webhooks', exact: true }).waitFor();
    await page.getByRole('button', { name: 'New webhook' }).click();
    const form = page.getByRole('form', { name: 'New webhook' });
    await form.getByLabel('Name', { exact: true }).fill('PSA');
    await form.getByLabel('URL', { exact: true }).fill(receiver.url);
    const owner = form.getByLabel('Receives events of');
    await expect.poll(async () => (await owner.locator('option').allTextContents()).join('|')).toMatch(/All organisations of Partner /);
    await owner.selectOption('partner');
    await form.getByLabel('alert.triggered').check();
    expect(await axeViolations(page)).toEqual([]);
    await form.getByRole('button', { name: 'Create webhook' }).click();
    await page.getByRole('heading', { name: 'Webhook PSA' }).waitFor();
    const id = page.url().split('/integrations/webhooks/')[1]?.split('?')[0] ?? '';
    const hook = await app.api('GET', `/webhooks/${id}`, { token: (await login(app, admin)).accessToken });
    expect(hook.body).toMatchObject({ partnerId: tenant.partnerId, orgId: null });

    const events = [await publish(app, key, 'alert.triggered', { n: 1 }, tenant.orgId), await publish(app, key, 'alert.triggered', { n: 2 }, tenant.otherOrgId)];
    await receiver.waitFor(2);

    await page.getByRole('button', { name: 'Replay', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: 'Replay events' });
    await dialog.getByLabel('From').waitFor();
    await t.screenshot('webhook-replay');
    expect(await axeViolations(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Start replay' }).click();
    await dialog.getByText('Replay complete: 2 of 2 events queued again.').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    const got = await receiver.waitFor(4);
    expect(got.slice(2).map((r) => r.headers['webhook-id']).sort()).toEqual(events.map((e) => e.id).sort());
    expect(t.problems).toEqual([]);
  });
});
