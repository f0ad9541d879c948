/**
 * The webhook page's receiver view in chromium (docs/decisions.md "Webhook throttling and stats"):
 * the charts of the last 24 hours (chartist SVG with an accessible name, the numbers in a table),
 * the latest failed delivery one click from its response body, the audit of changes, and the rate
 * limit in the form; axe clean in both themes and at 390 px, and no CSP violation from the charts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from '../webhooks/setup.js';
import { axeViolations, consoleBuild, consoleTabs, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: a webhook\'s last 24 hours', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let w: WebhookWorld;
  let rx: Receiver;
  const tabs = consoleTabs(() => browser, 'webhook-activity');

  beforeAll(async () => {
    const [dir, rec] = await Promise.all([consoleBuild(), startReceiver()]);
    rx = rec;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    browser = await launchChromium();
    w = await createWebhookWorld(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await rx?.close();
  });

  it('shows deliveries by outcome and latency as charts with their numbers, a failed delivery\'s response, the changes, and the rate limit', async () => {
    const type = 'patch.installed';
    let n = 0;
    rx.behave((_req, res) => {
      n++;
      const fail = n === 3;
      res.writeHead(fail ? 500 : 200, { 'content-type': 'text/plain' });
      res.end(fail ? 'receiver exploded: disk full' : 'ok');
    });
    const hook = await createHook(app, w.admin, { name: 'PSA', url: rx.url, events: [type], retryPolicy: { maxRetries: 0 } });
    for (let i = 0; i < 4; i++) await publish(app, w.eventsKey, type, { i });
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 4 && l.every((d: any) => d.status === 'delivered' || d.status === 'failed'));

    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/webhooks/${hook.id}`);
    await submitPassword(page, w.orgAdmin.email, w.orgAdmin.password);
    await page.getByRole('heading', { name: 'Webhook PSA' }).waitFor();
    const outcomes = page.getByRole('img', { name: /Deliveries by outcome, per hour\. In the last 24 hours: 3 delivered, 1 failed, 0 retrying, 0 pending\./ });
    await outcomes.waitFor();
    // The SVG itself carries the role and the name (not a wrapper).
    expect(await outcomes.evaluate((el) => [el.tagName.toLowerCase(), el.getAttribute('role')])).toEqual(['svg', 'img']);
    await page.getByRole('img', { name: /Latency per hour \(p50, p95\)/ }).waitFor();
    // The numbers behind the chart, as a table.
    const figure = page.getByRole('figure', { name: 'Deliveries by outcome, per hour' });
    await figure.getByText('Show the numbers').click();
    const table = figure.getByRole('table', { name: 'Deliveries by outcome, per hour: the numbers' });
    expect(await table.getByRole('row').count()).toBe(25);
    const last = table.getByRole('row').last();
    expect(await last.getByRole('cell').allTextContents()).toEqual(['3', '1', '0', '0']);

    // The failed delivery, one click from its response body.
    await page.getByRole('button', { name: /Response of the failed delivery patch\.installed/ }).click();
    const dialog = page.getByRole('dialog', { name: 'Failed delivery patch.installed' });
    await dialog.getByText('receiver exploded: disk full').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Close' }).click();
    await dialog.waitFor({ state: 'detached' });
    // A replay, one click away: the link opens the page header's Replay dialog.
    await page.getByRole('button', { name: 'Replay the events a receiver missed' }).click();
    const replay = page.getByRole('dialog', { name: 'Replay events' });
    await replay.getByLabel('From').waitFor();
    await replay.getByRole('button', { name: 'Cancel' }).click();
    await replay.waitFor({ state: 'detached' });
    // The audit of changes.
    await page.getByRole('region', { name: 'Changes' }).or(page.locator('section', { has: page.getByRole('heading', { name: 'Changes' }) })).getByText('webhook.create').waitFor();

    // The rate limit in the form and the settings.
    await page.getByRole('button', { name: 'Edit', exact: true }).click();
    await page.getByLabel('Rate limit (deliveries per second)').fill('10');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByText('10 deliveries a second').waitFor();
    // The edit is among the changes (the list refreshes with the webhook).
    await page.getByText(/webhook\.update by .*rateLimitPerSecond/).waitFor();

    expect(await axeViolations(page)).toEqual([]);
    await t.screenshot('webhook-activity');
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    await page.setViewportSize({ width: 390, height: 844 });
    await outcomes.waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await t.screenshot('webhook-activity-390-dark');
    // No CSP violation (chartist's inline styles go through the CSSOM), no error.
    expect(t.problems).toEqual([]);
  });
});
