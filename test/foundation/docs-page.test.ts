/**
 * The API docs page in a real browser: swagger-ui renders the OpenAPI document under the page's
 * strict Content-Security-Policy (docs/decisions.md), with no policy violation.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';

describe.skipIf(!backendAvailable() || !chromiumAvailable())('docs page under its CSP', () => {
  let app: TestApp;
  let browser: Browser;
  beforeAll(async () => {
    app = await startTestApp({});
    browser = await launchChromium();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('renders the operations from its own assets, with no CSP violation and no failed request', async () => {
    const page = await browser.newPage({ extraHTTPHeaders: { 'x-forwarded-for': app.ip } });
    const violations: string[] = [];
    const failed: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
    });
    page.on('requestfailed', (r) => failed.push(r.url()));
    const answer = await page.goto(`${app.url}/api/v1/docs`);
    expect(answer?.headers()['content-security-policy']).toContain("script-src 'self'");
    await page.locator('.opblock-summary-path').first().waitFor();
    expect(await page.locator('.opblock').count()).toBeGreaterThan(50);
    // The stylesheet applied (swagger-ui's own layout class has its rules).
    expect(String(await page.evaluate("getComputedStyle(document.querySelector('.swagger-ui')).fontFamily"))).toMatch(/sans-serif/);
    expect(violations).toEqual([]);
    expect(failed).toEqual([]);
    await page.close();
  });
});
