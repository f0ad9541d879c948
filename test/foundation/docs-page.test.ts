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
    // Swagger UI keeps only the operations near the viewport in the page once the document is large:
    // scroll through it and collect what it showed. Every path and every webhook event of the
    // document is listed somewhere.
    const doc = (await app.api('GET', '/openapi.json')).body as { paths: Record<string, unknown>; webhooks: Record<string, unknown> };
    const expected = [...Object.keys(doc.paths), ...Object.keys(doc.webhooks)];
    const seen = new Set<string>();
    // Up to three passes from the top: on a busy machine the page may not have drawn a section yet
    // when the scroll passed it (it was seen missing a run of sections once, at a load average of 4).
    for (let pass = 0; pass < 3 && !expected.every((p) => seen.has(p)); pass++) {
      await page.evaluate('window.scrollTo(0, 0)');
      for (let step = 0, lastY = -1; step < 400; step++) {
        for (const text of await page.locator('.opblock-summary-path').allTextContents()) seen.add(text.replace(/\u200b/g, '').trim());
        if (expected.every((p) => seen.has(p))) break;
        await page.mouse.wheel(0, 600);
        await page.waitForTimeout(50 * (pass + 1));
        const y = Number(await page.evaluate('window.scrollY'));
        if (y === lastY && step > 5) break;
        lastY = y;
      }
    }
    expect(expected.filter((p) => !seen.has(p))).toEqual([]);
    // The stylesheet applied (swagger-ui's own layout class has its rules).
    expect(String(await page.evaluate("getComputedStyle(document.querySelector('.swagger-ui')).fontFamily"))).toMatch(/sans-serif/);
    expect(violations).toEqual([]);
    expect(failed).toEqual([]);
    await page.close();
  });
});
