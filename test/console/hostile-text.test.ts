/**
 * Hostile text in every console page that shows user-controlled text: names carrying markup
 * (`<img onerror>`, a closing `</script>`), a right-to-left override mark and one very long word,
 * all created through the API, then each page opened once in chromium. The page must show the text
 * as text (its textContent holds the literal), build no element from it, run nothing from it, let
 * no other text follow the override mark in the name's paragraph (a name sits in `<bdi>` where text
 * follows it), and wrap the long word instead of widening the page past the viewport.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey, heartbeat, registerRemote } from '../agents/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { consoleBuild, openConsole, signInWithTotp, type ConsoleTab } from './helpers.js';

afterEach(() => clock.reset());

/** Markup that would run or build an element if a page put it into the DOM as HTML. */
const MARKUP = '<img src=x onerror="window.__pwned=1"></script><script>window.__pwned=1</script>';
/**
 * Markup, a right-to-left override mark and what the value names (each object its own, so a page
 * cannot pass on a value another part of it shows), within the 100 characters a role name allows.
 */
const hostile = (what: string) => `${MARKUP}\u202E${what}`;
const H = {
  partner: hostile('partner'), org: hostile('organisation'), me: hostile('signed-in admin'), user: hostile('user'), role: hostile('role'),
  site: hostile('site'), group: hostile('device group'), apiKey: hostile('API key'), webhook: hostile('webhook'), sso: hostile('SSO provider'), device: hostile('device'),
};
/** One word as long as a 255-character name allows, and 500 characters where the field takes it. */
const LONG_NAME = 'W'.repeat(255);
const LONG_WORD = 'W'.repeat(500);
/** A version takes no markup (semantic versioning) and at most 64 characters: its longest word. */
const AGENT_VERSION = `1.2.0-${'w'.repeat(58)}`;
/** Room for a scrollbar's rounding: the page must not be wider than the viewport by more. */
const MARGIN = 2;

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: hostile text shows as text on every page', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  /** The organisation admin's tab and the platform administrator's, each signed in once. */
  let org: ConsoleTab;
  let platform: ConsoleTab;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, AGENT_AUTO_PROMOTE: 'false' } });
    browser = await launchChromium();
    tenant = await createTenant(app);

    // The platform administrator renames the tenant's partner and organisation and adds a partner with a long name.
    const admin = await createUser(app, { name: 'Hostile Admin', platformAdmin: true });
    const adminMfa = await enrollTotp(app, (await login(app, admin)).accessToken);
    const sys = adminMfa.accessToken;
    const must = async (status: number, p: Promise<{ status: number; body: any }>) => {
      const res = await p;
      if (res.status !== status) throw new Error(`arrange: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body;
    };
    await must(200, app.api('PATCH', `/partners/${tenant.partnerId}`, { token: sys, body: { name: H.partner } }));
    await must(201, app.api('POST', '/partners', { token: sys, body: { name: LONG_NAME } }));
    await must(200, app.api('PATCH', `/orgs/${tenant.orgId}`, { token: sys, body: { name: H.org } }));
    await must(200, app.api('PATCH', `/orgs/${tenant.otherOrgId}`, { token: sys, body: { name: LONG_NAME } }));
    await registerRemote(app, sys, { version: AGENT_VERSION });

    // The organisation admin (with a second factor: SSO providers need one) fills everything else.
    const orgMfa = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    const token = orgMfa.accessToken;
    // Its own name shows in the top bar of every page and on the home page.
    await must(200, app.api('PATCH', '/users/me', { token, body: { name: H.me } }));
    await must(200, app.api('PATCH', `/users/${tenant.orgReadOnly.id}`, { token, body: { name: H.user } }));
    await must(200, app.api('PATCH', `/users/${tenant.orgTechnician.id}`, { token, body: { name: LONG_NAME } }));
    ids.role = (await must(201, app.api('POST', '/roles', { token, body: { name: H.role, description: LONG_WORD, permissions: [] } }))).id;
    await must(201, app.api('POST', '/roles', { token, body: { name: 'W'.repeat(100), description: LONG_WORD, permissions: [] } }));
    const site = await must(201, app.api('POST', `/orgs/${tenant.orgId}/sites`, { token, body: { name: H.site } }));
    ids.site = site.id;
    await must(201, app.api('POST', `/orgs/${tenant.orgId}/sites`, { token, body: { name: LONG_NAME } }));
    const group = await must(201, app.api('POST', `/orgs/${tenant.orgId}/device-groups`, { token, body: { name: H.group } }));
    await must(201, app.api('POST', `/orgs/${tenant.orgId}/device-groups`, { token, body: { name: LONG_NAME } }));
    await must(201, app.api('POST', '/api-keys', { token, body: { name: H.apiKey, permissions: [{ resource: 'devices', action: 'read' }] } }));
    await must(201, app.api('POST', '/api-keys', { token, body: { name: LONG_NAME, permissions: [{ resource: 'devices', action: 'read' }] } }));
    const hook = { url: 'http://127.0.0.1:9/hook', events: ['webhook.test'] };
    ids.webhook = (await must(201, app.api('POST', '/webhooks', { token, body: { name: H.webhook, ...hook } }))).id;
    await must(201, app.api('POST', '/webhooks', { token, body: { name: LONG_NAME, ...hook } }));
    ids.sso = (await must(201, app.api('POST', '/sso/providers', { token, body: { name: H.sso, type: 'oidc' } }))).id;
    await must(201, app.api('POST', '/sso/providers', { token, body: { name: LONG_NAME, type: 'oidc' } }));
    const key = await enrollmentKey(app, token, tenant.orgId, { name: hostile('enrolment key'), siteId: site.id, deviceGroupId: group.id });
    const device = await enroll(app, key, { hostname: H.device });
    ids.device = device.deviceId;
    expect((await heartbeat(app, device)).status).toBe(200);
    await enroll(app, key, { hostname: LONG_NAME });

    org = await openConsole(browser);
    await signInWithTotp(org.page, `${app.publicUrl}/`, tenant.orgAdmin, orgMfa.secret);
    await org.page.getByRole('button', { name: 'Sign out' }).waitFor();
    platform = await openConsole(browser);
    await signInWithTotp(platform.page, `${app.publicUrl}/`, admin, adminMfa.secret);
    await platform.page.getByRole('button', { name: 'Sign out' }).waitFor();
  }, 120_000); // a console build when web/ changed, about thirty objects and two sign-ins
  afterAll(async () => {
    await org?.close();
    await platform?.close();
    await browser?.close();
    await app?.close();
  });

  /** What a page did with the hostile text, read in the page (a string: the tests compile without the DOM types). */
  const INSPECT = `(() => {
    const beyond = (e) => e.getBoundingClientRect().right > window.innerWidth + ${MARGIN};
    return {
      pwned: window.__pwned,
      images: document.querySelectorAll('img[src="x"]').length,
      scripts: [...document.querySelectorAll('script')].filter((s) => (s.textContent || '').includes('__pwned')).length,
      text: document.body.textContent || '',
      scrollWidth: document.documentElement.scrollWidth,
      innerWidth: window.innerWidth,
      // Text after a right-to-left override mark in the same paragraph shows reversed (a name that
      // turns "· 3 deliveries" around, or a file name's extension): every name carrying one must end
      // its paragraph, or sit in an isolating element (<bdi>, unicode-bidi: isolate).
      overrides: (() => {
        const out = [];
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const at = (n.nodeValue || '').indexOf('\u202E');
          if (at < 0) continue;
          let box = n.parentElement;
          for (; box && box !== document.body; box = box.parentElement) {
            const cs = getComputedStyle(box);
            if (cs.display !== 'inline' && cs.display !== 'contents') break;
            if (/isolate|plaintext/.test(cs.unicodeBidi)) break;
          }
          // The text after the mark up to the paragraph's end (a nested block starts the next one).
          // What follows the mark in its own text node is first the rest of the name itself.
          const own = (n.nodeValue || '').slice(at + 1);
          const named = ${JSON.stringify(Object.values(H).map((v) => v.split('\u202E')[1]).concat(['enrolment key']))}.filter((w) => own.startsWith(w)).sort((x, y) => y.length - x.length)[0] || '';
          let after = own.slice(named.length);
          const rest = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
          rest.currentNode = n;
          for (let m = rest.nextNode(); m; m = rest.nextNode()) {
            let block = false;
            for (let e = m.parentElement; e && e !== box; e = e.parentElement) {
              const d = getComputedStyle(e).display;
              if (d !== 'inline' && d !== 'contents') block = true;
            }
            if (block) break;
            after += m.nodeValue || '';
          }
          // What the name itself says after its mark is the name: only text beyond it counts.
          after = after.trim();
          if (after) out.push(box.tagName.toLowerCase() + ': ' + JSON.stringify(after.slice(0, 60)));
        }
        return out.slice(0, 5);
      })(),
      // The innermost elements that reach past the viewport, to name in a failure.
      wide: [...document.body.querySelectorAll('*')].filter((e) => beyond(e) && ![...e.children].some(beyond)).slice(0, 3)
        .map((e) => e.tagName.toLowerCase() + '.' + e.className + ' in ' + (e.parentElement ? e.parentElement.tagName.toLowerCase() + '.' + e.parentElement.className : '')),
    };
  })()`;
  interface Seen { pwned: unknown; images: number; scripts: number; text: string; scrollWidth: number; innerWidth: number; wide: string[]; overrides: string[] }

  /**
   * Opens `path`, waits until every literal shows (`expect` holds text the page renders as the
   * hostile value; the long word counts when the page lists it), then checks the DOM.
   */
  async function visit(t: ConsoleTab, path: string, expected: string[], open?: (page: Page) => Promise<void>): Promise<void> {
    const { page } = t;
    await page.goto(`${app.publicUrl}${path}`);
    await page.getByRole('button', { name: 'Sign out' }).waitFor();
    await open?.(page);
    // Waits for the values to show; when they never do, the assertions below say which is missing.
    // (A function, not a string: the console's CSP forbids evaluating strings in the page.)
    const shows = (want: string[]) => want.every((v) => ((globalThis as unknown as { document: { body: { textContent: string | null } } }).document.body.textContent ?? '').includes(v));
    await page.waitForFunction(shows, expected).catch((e: unknown) => {
      if (!(e instanceof Error && e.name === 'TimeoutError')) throw e;
    });
    const seen = await page.evaluate<Seen>(INSPECT);
    for (const s of expected) expect.soft(seen.text.includes(s), `${path} shows ${JSON.stringify(s.slice(0, 40))} as text`).toBe(true);
    expect.soft(seen.images, `${path}: no <img> built from a name`).toBe(0);
    expect.soft(seen.scripts, `${path}: no <script> built from a name`).toBe(0);
    expect.soft(seen.pwned, `${path}: nothing from a name ran`).toBeUndefined();
    expect.soft(seen.overrides, `${path}: no text follows a name's right-to-left override in its paragraph`).toEqual([]);
    expect.soft(seen.scrollWidth, `${path}: the long word wraps inside the ${seen.innerWidth}px viewport (wider: ${seen.wide.join('; ')})`).toBeLessThanOrEqual(seen.innerWidth + MARGIN);
    expect.soft(t.problems, `${path}: no console error or CSP violation`).toEqual([]);
    t.problems.length = 0;
  }

  it('organisation pages: home, users, roles (list and detail), organisations (list and detail with sites and device groups), API keys, audit log', async () => {
    await visit(org, '/', [H.me, `Welcome, ${H.me}`]);
    await visit(org, '/admin/users', [H.user, LONG_NAME]);
    await visit(org, '/admin/roles', [H.role, 'W'.repeat(100)]);
    // A role's description shows only in its edit form, whole.
    await visit(org, `/admin/roles/${ids.role}`, [H.role, `Edit ${H.role}`], async (page) => {
      await page.getByRole('button', { name: 'Edit role' }).click();
      expect(await page.getByLabel('Description').inputValue()).toBe(LONG_WORD);
    });
    await visit(org, '/admin/orgs', [H.org]);
    await visit(org, `/admin/orgs/${tenant.orgId}`, [H.org, H.site, H.group, LONG_NAME]);
    await visit(org, '/admin/api-keys', [H.apiKey, LONG_NAME]);
    // The audit log shows an entry's recorded values (as JSON) when its details are opened: the site's
    // creation, the override mark written as its escape (in JSON it is the same string).
    await visit(org, '/admin/audit', [JSON.stringify(H.site).slice(1, -1).replace('\u202E', '\\u202e')], async (page) => {
      await page.getByLabel('Target id').fill(ids.site!);
      await page.getByRole('button', { name: 'Filter' }).click();
      await expect.poll(() => page.getByRole('button', { name: 'Details' }).count()).toBe(1);
      await page.getByRole('button', { name: 'Details' }).click();
    });
  });

  it('integration and device pages: webhooks and SSO providers (list and detail), devices (list and detail), update windows', async () => {
    await visit(org, '/integrations/webhooks', [H.webhook, LONG_NAME]);
    await visit(org, `/integrations/webhooks/${ids.webhook}`, [`Webhook ${H.webhook}`]);
    await visit(org, '/integrations/sso', [H.sso, LONG_NAME]);
    await visit(org, `/integrations/sso/${ids.sso}`, [H.sso]);
    await visit(org, '/devices', [H.device, LONG_NAME]);
    await visit(org, `/devices/${ids.device}`, [`Device ${H.device}`]);
    // No user-controlled text here for an organisation admin (its own settings): the top bar's name still is.
    await visit(org, '/devices/update-windows', [H.me]);
  });

  it('platform pages: partners and agent versions', async () => {
    await visit(platform, '/admin/partners', [H.partner, LONG_NAME]);
    await visit(platform, '/devices/agent-versions', [AGENT_VERSION]);
  });
});
