import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFailed } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { ensureConsoleBuilt } from '../../bin/console.js';
import { nextTotpStep, totpCode } from '../helpers/fixtures.js';

/** The built console (dist/console/<fingerprint>/), built once here when web/ changed. */
export function consoleBuild(): Promise<string> {
  return ensureConsoleBuilt();
}

/** Where the browser tests leave a screenshot of each page they check (KEEL_SCREENSHOTS, else the temp dir). */
export const SCREENSHOTS = process.env.KEEL_SCREENSHOTS ?? join(tmpdir(), 'keel-console-screenshots');

export interface ConsoleTab {
  context: BrowserContext;
  page: Page;
  /** Console errors and CSP violations the page reported (a test asserts none). */
  problems: string[];
  screenshot(name: string): Promise<void>;
  close(): Promise<void>;
}

/** A fresh browser context (its own cookies) on Keel's console. */
export async function openConsole(browser: Browser, viewport = { width: 1280, height: 800 }): Promise<ConsoleTab> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  // Fail a step within 15 s with what it waited for, well inside the test's own timeout.
  page.setDefaultTimeout(60_000);
  const problems: string[] = [];
  page.on('console', (msg) => {
    // A 4xx the page handles itself is logged by chromium as a failed resource: not a problem.
    if (msg.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text())) problems.push(msg.text());
  });
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  mkdirSync(SCREENSHOTS, { recursive: true });
  return {
    context,
    page,
    problems,
    screenshot: async (name) => {
      await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
    },
    close: () => context.close(),
  };
}

/**
 * The tabs of one test file: `open` gives a fresh context (its own cookies) and, when the test
 * that opened it fails, saves a screenshot `<prefix>-failed-<n>` and prints what the page reported;
 * `closeAll` in afterAll.
 */
export function consoleTabs(browser: () => Browser, prefix: string) {
  const tabs: ConsoleTab[] = [];
  return {
    open: async (viewport?: { width: number; height: number }): Promise<ConsoleTab> => {
      const t = await openConsole(browser(), viewport);
      tabs.push(t);
      const n = tabs.length;
      onTestFailed(async () => {
        await t.screenshot(`${prefix}-failed-${n}`).catch(() => undefined);
        console.error(`console page problems: ${JSON.stringify(t.problems)}; at ${t.page.url()}`);
      });
      return t;
    },
    closeAll: async (): Promise<void> => {
      for (const t of tabs) await t.close().catch(() => undefined);
    },
  };
}

/** Opens `url`, signs in with the password and the authenticator's code of the next 30-second step. */
export async function signInWithTotp(page: Page, url: string, user: { email: string; password: string }, secret: string): Promise<void> {
  await nextTotpStep();
  await page.goto(url);
  await submitPassword(page, user.email, user.password);
  await page.getByLabel('6-digit code from your authenticator app').fill(await totpCode(secret));
  await page.getByRole('button', { name: 'Verify' }).click();
}

/**
 * Fills the sign-in form and submits it: on `/login` the email first (Continue, then sign-in discovery
 * shows the password field); an organisation's `/login?org=…` asks both at once.
 */
export async function submitPassword(page: Page, email: string, password: string): Promise<void> {
  await page.getByLabel('Email', { exact: true }).fill(email);
  const next = page.getByRole('button', { name: 'Continue', exact: true });
  if ((await next.count()) > 0) await next.click();
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
}

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

let axeSource: string | null = null;

/**
 * Runs axe-core (WCAG 2.0/2.1 A and AA rules) on the page as it is now and returns the serious and
 * critical violations. The script is evaluated through the DevTools protocol, which the page's CSP
 * does not govern, so the console's own policy stays as it is in production.
 */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  if (!axeSource) {
    const { readFileSync } = await import('node:fs');
    const { createRequire } = await import('node:module');
    axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  }
  if (!(await page.evaluate('typeof window.axe !== "undefined"'))) await page.evaluate(axeSource);
  const result = await page.evaluate<AxeViolation[]>(
    `axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => ({ target: n.target })) })))`,
  );
  return result.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}
