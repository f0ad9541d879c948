/**
 * The console's integration and device pages in chromium (playwright-core), against one started Keel
 * with real peers on loopback: a node:http webhook receiver, and a real OpenID provider
 * (oidc-provider) whose login and consent forms the browser fills in.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { ok, startReceiver, status, verifyServiceSignature, type Receiver } from '../webhooks/receiver.js';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { enroll, enrollmentKey, heartbeat, registerRemote } from '../agents/helpers.js';
import { clock } from '../../src/platform/clock.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

afterEach(() => clock.reset());

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: webhooks, single sign-on, devices in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let receiver: Receiver;
  let idp: OidcIdp;
  const tabs = consoleTabs(() => browser, 'integrations');
  const tab = tabs.open;

  beforeAll(async () => {
    const [dir, rec] = await Promise.all([consoleBuild(), startReceiver()]);
    receiver = rec;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, AGENT_AUTO_PROMOTE: 'false' } });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await receiver?.close();
    await idp?.close();
  });

  it('an organisation admin creates a webhook (grouped event picker, a custom header), sends a test and sees it delivered with its payload; rotates the secret (shown once), pauses it, and retries a failed delivery from the history', async () => {
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/integrations/webhooks`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
    await page.getByText('No webhooks yet.').waitFor();
    await page.getByRole('button', { name: 'New webhook' }).click();
    const form = page.getByRole('form', { name: 'New webhook' });
    await form.getByLabel('Name', { exact: true }).fill('Ticketing');
    await form.getByLabel('URL', { exact: true }).fill(receiver.url);
    await form.getByLabel('All devices').check();
    await form.getByLabel('webhook.test').check();
    // Each type says what it means, from the server's event catalogue, as the checkbox's description.
    const about = form.getByText('A device missed its heartbeats for longer than the offline threshold');
    await about.waitFor();
    expect(await form.getByLabel('device.offline').getAttribute('aria-describedby')).toBe(await about.getAttribute('id'));
    await form.getByRole('button', { name: 'Add a header' }).click();
    await form.getByLabel('Header 1 name').fill('X-Ticket-Queue');
    await form.getByLabel('Header 1 value').fill('noc');
    await form.getByLabel('Retry schedule').selectOption('custom');
    await form.getByLabel('Retries after the first attempt').fill('3');
    await t.screenshot('webhooks-new');
    expect(await axeViolations(page)).toEqual([]);
    await form.getByRole('button', { name: 'Create webhook' }).click();

    await page.getByRole('heading', { name: 'Webhook Ticketing' }).waitFor();
    await page.getByText('custom: 3 after 1 s').waitFor();
    await page.getByText('No deliveries yet.').waitFor();
    await page.getByRole('button', { name: 'Send test' }).click();
    await page.getByText('A webhook.test delivery is queued').waitFor();
    const [got] = await receiver.waitFor(1);
    expect(got?.headers['x-ticket-queue']).toBe('noc');
    // The history shows it once the worker has delivered it (Refresh asks again).
    await expect.poll(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      return page.getByRole('cell', { name: 'delivered' }).count();
    }, { timeout: 60_000 }).toBe(1);
    await page.getByRole('button', { name: /^View delivery webhook\.test/ }).click();
    const dialog = page.getByRole('dialog', { name: 'Delivery webhook.test' });
    await dialog.getByText('HTTP 200').waitFor();
    expect(await dialog.getByLabel('Payload').textContent()).toContain('"type": "webhook.test"');
    await t.screenshot('webhook-delivery');
    expect(await axeViolations(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Close' }).click();
    await t.screenshot('webhook-detail');
    expect(await axeViolations(page)).toEqual([]);

    // Rotation: the generated secret is shown once, and the next delivery is signed with it.
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('button', { name: 'Rotate secret' }).click();
    const secret = (await page.getByLabel('Signing secret, shown once').textContent()) ?? '';
    expect(secret.length).toBeGreaterThanOrEqual(16);
    await page.getByRole('button', { name: 'Send test' }).click();
    const [, signed] = await receiver.waitFor(2);
    expect(signed && verifyServiceSignature(secret, signed)).toBe(true);
    // Beside it, the exact value the standardwebhooks library takes: it verifies the delivery as it is.
    const forLibrary = (await page.getByLabel('The secret for new Webhook() of standardwebhooks').textContent()) ?? '';
    expect(() => new StandardWebhook(forLibrary).verify(signed!.body, signed!.headers)).not.toThrow();
    // Paused from the edit form: the list shows it under the status filter.
    await page.getByRole('button', { name: 'Edit', exact: true }).click();
    await page.getByRole('form', { name: 'Edit webhook' }).getByLabel('Status').selectOption('paused');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.locator('dd .badge', { hasText: 'paused' }).waitFor();
    await page.getByRole('link', { name: 'All webhooks' }).click();
    await page.getByLabel('Status').selectOption('active');
    await page.getByText('No webhooks with this status.').waitFor();
    await page.getByLabel('Status').selectOption('paused');
    await page.getByRole('link', { name: 'Ticketing' }).waitFor();

    // A failed delivery (the receiver answers 500, no retries) is retried from the history.
    const token = (await login(app, tenant.orgAdmin)).accessToken;
    const flaky = await app.api('POST', '/webhooks', { token, body: { name: 'Flaky', url: receiver.url, events: ['webhook.test'], retryPolicy: { maxRetries: 0 } } });
    expect(flaky.status).toBe(201);
    receiver.behave(status(500));
    expect((await app.api('POST', `/webhooks/${flaky.body.id}/test`, { token })).status).toBe(202);
    await receiver.waitFor(3);
    await page.goto(`${app.publicUrl}/integrations/webhooks/${flaky.body.id}`);
    await page.getByLabel('Delivery status').selectOption('failed');
    await expect.poll(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      return page.getByRole('button', { name: /^Retry delivery webhook\.test/ }).count();
    }, { timeout: 60_000 }).toBe(1);
    await page.getByRole('cell', { name: 'HTTP 500' }).first().waitFor();
    receiver.behave(ok);
    await page.getByRole('button', { name: /^Retry delivery webhook\.test/ }).click();
    await receiver.waitFor(4);
    await page.getByLabel('Delivery status').selectOption('delivered');
    await expect.poll(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      return page.getByRole('cell', { name: 'delivered' }).count();
    }, { timeout: 60_000 }).toBe(1);
    // The history's Refresh refreshes the webhook's delivery counts on the same page too (one query-key
    // family per resource, web/src/api/keys.ts): no reload.
    // (Polled like the history above: under load the click that showed the row may come before the counts settle.)
    await expect.poll(async () => {
      await page.getByRole('button', { name: 'Refresh' }).click();
      return page.getByText('2 deliveries: 1 delivered, 1 failed, 0 retrying, 0 pending').count();
    }, { timeout: 60_000 }).toBe(1);
    // Attempts apart from deliveries, with the same words on the page and in the list; waits in human units.
    await page.getByText('2 attempts: 1 succeeded, 1 failed').waitFor();
    await page.getByText('0 after 1 s, ×2, at most 5 min apart').waitFor();
    expect(await page.locator('dd .badge').first().evaluate((el) => el.parentElement?.textContent)).toBe('active');
    await page.getByRole('link', { name: 'All webhooks' }).click();
    const flakyRow = page.getByRole('row').filter({ has: page.getByRole('link', { name: 'Flaky' }) });
    await flakyRow.getByText('1 delivered, 1 failed').waitFor();
    await flakyRow.getByText('2 attempts: 1 succeeded, 1 failed').waitFor();
    expect(t.problems).toEqual([]);
  });
  it('an organisation admin with a second factor sets up an OIDC provider from a preset, tests discovery and activates it with SSO enforced; a member then signs in through the real IdP in the browser', async () => {
    // Signed in with the password only: a provider write is refused (403 mfa_required), and the page says why.
    const before = await tab();
    await before.page.goto(`${app.publicUrl}/integrations/sso`);
    await submitPassword(before.page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await before.page.getByRole('button', { name: 'New provider' }).click();
    await before.page.getByRole('form', { name: 'New provider' }).getByLabel('Name', { exact: true }).fill('Too early');
    await before.page.getByRole('button', { name: 'Create provider' }).click();
    await before.page.getByRole('alert').getByText('can only be changed from a session signed in with a second factor').waitFor();
    expect(before.problems).toEqual([]);
    await before.close();

    const { secret } = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    const t = await tab();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/integrations/sso`, tenant.orgAdmin, secret);
    await page.getByRole('heading', { name: 'Single sign-on' }).waitFor();
    await page.getByText('No providers yet.').waitFor();
    await page.getByRole('button', { name: 'New provider' }).click();
    const create = page.getByRole('form', { name: 'New provider' });
    await create.getByLabel('Preset').selectOption('workforce-idp');
    await create.getByLabel('Name', { exact: true }).fill('Test IdP');
    await create.getByRole('button', { name: 'Create provider' }).click();

    await page.getByRole('heading', { name: 'Provider Test IdP' }).waitFor();
    const form = page.getByRole('form', { name: 'Provider settings' });
    // The preset filled the scopes and the attribute mapping.
    expect(await form.getByLabel('Scopes').inputValue()).toBe('openid profile email groups');
    expect(await form.getByLabel('Groups from').inputValue()).toBe('groups');
    await form.getByLabel('Client id').fill(idp.clientId);
    await form.getByLabel('Client secret').fill(idp.clientSecret);
    await form.getByLabel('Issuer URL').fill(idp.issuer);
    await form.getByLabel('Role of new users').selectOption({ label: SYSTEM_ROLES.orgReadOnly.name });
    await form.getByRole('button', { name: 'Add a mapping' }).click();
    await form.getByLabel('Group 1', { exact: true }).fill('noc-admins');
    await form.getByLabel('Role for group 1').selectOption({ label: SYSTEM_ROLES.orgTechnician.name });
    await form.getByRole('checkbox', { name: /Enforce single sign-on/ }).check();
    await form.getByRole('button', { name: 'Save settings' }).click();
    await form.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Test discovery' }).click();
    await page.getByText('Test passed.').waitFor();
    await page.getByRole('button', { name: 'Activate' }).click();
    // The status is said once: the badge, then what it means (not "active Active").
    await page.getByText('active: offered at sign-in').waitFor();
    expect(await page.getByText(/active\s*Active/).count()).toBe(0);
    // Discovery on save filled the endpoints.
    expect(await form.getByLabel('JWKS endpoint').inputValue()).toMatch(new RegExp(`^${idp.issuer}/`));
    await t.screenshot('sso-provider');
    expect(await axeViolations(page)).toEqual([]);
    // The dark theme keeps its contrast on these pages too (alerts, badges, fieldsets).
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    expect(t.problems).toEqual([]);

    // A member of the organisation, in another browser context: the sign-in page of the organisation.
    const sub = `sub-${Math.random().toString(36).slice(2)}`;
    idp.accounts.set(sub, { sub, email: tenant.orgReadOnly.email, name: 'Read Only' });
    const m = await tab();
    // The IdP's development pages link a web font from the internet, which this machine cannot reach.
    await m.context.route((u) => u.hostname !== 'localhost' && u.hostname !== '127.0.0.1', (r) => r.fulfill({ status: 200, body: '' }));
    await m.page.goto(`${app.publicUrl}/login?org=${tenant.orgId}`);
    const button = m.page.getByRole('link', { name: 'Sign in with Test IdP' });
    await button.waitFor();
    await m.page.getByText('This organisation signs in only through single sign-on.').waitFor();
    expect(await m.page.getByLabel('Password', { exact: true }).count()).toBe(0);
    await m.screenshot('login-sso');
    expect(await axeViolations(m.page)).toEqual([]);
    await button.click();
    // The IdP's own login and consent forms (oidc-provider's development interactions).
    await m.page.waitForURL((u) => u.origin === idp.issuer);
    await m.page.locator('input[name="login"]').fill(sub);
    await m.page.locator('input[name="password"]').fill('any');
    await m.page.locator('button[type="submit"]').click();
    await m.page.getByRole('button', { name: 'Continue' }).click();
    // Back in the console: #ssoCode consumed (and taken out of the address bar), signed in.
    await m.page.getByRole('button', { name: 'Sign out' }).waitFor();
    await m.page.locator(`.user-name[title="${tenant.orgReadOnly.email}"]`).waitFor();
    await m.page.getByRole('heading', { name: /^Welcome/ }).waitFor();
    expect(new URL(m.page.url()).hash).toBe('');
    expect(new URL(m.page.url()).origin).toBe(app.publicUrl);
    // The session is a real one: the refresh cookie the exchange set works after a reload.
    await m.page.reload();
    await m.page.locator(`.user-name[title="${tenant.orgReadOnly.email}"]`).waitFor();
    expect(m.problems).toEqual([]);
  });
  it('devices: an organisation admin filters by site, opens a device and turns its automatic updates off; a platform administrator with a second factor promotes a version at 10% and sees the rollout', async () => {
    // A tenant of its own: the organisation of the test above now enforces single sign-on.
    const tenant = await createTenant(app);
    const adminToken = (await login(app, tenant.orgAdmin)).accessToken;
    const site = await app.api('POST', `/orgs/${tenant.orgId}/sites`, { token: adminToken, body: { name: 'Head office' } });
    expect(site.status).toBe(201);
    const hq = await enroll(app, await enrollmentKey(app, adminToken, tenant.orgId, { siteId: site.body.id }), { hostname: 'hq-desk-01' });
    const branch = await enroll(app, await enrollmentKey(app, adminToken, tenant.orgId), { hostname: 'branch-laptop-07' });
    expect((await heartbeat(app, hq)).status).toBe(200);
    expect((await heartbeat(app, branch)).status).toBe(200);

    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/devices`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
    await page.getByRole('link', { name: 'branch-laptop-07' }).waitFor();
    await page.getByRole('link', { name: 'hq-desk-01' }).waitFor();
    await page.getByLabel('Site').selectOption({ label: 'Head office' });
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => page.getByRole('link', { name: 'branch-laptop-07' }).count()).toBe(0);
    await page.getByRole('link', { name: 'hq-desk-01' }).waitFor();
    await t.screenshot('devices');
    expect(await axeViolations(page)).toEqual([]);
    await page.getByRole('link', { name: 'hq-desk-01' }).click();
    await page.getByRole('heading', { name: 'Device hq-desk-01' }).waitFor();
    await page.getByText('1.0.0').first().waitFor();
    await page.getByRole('button', { name: 'Turn automatic updates off' }).click();
    await page.getByText('Automatic updates are off.').waitFor();
    const after = await app.api('GET', `/devices/${hq.deviceId}`, { token: adminToken });
    expect(after.body.autoUpdate).toBe(false);
    expect(await page.getByRole('button', { name: 'Update now' }).isDisabled()).toBe(true);
    // The organisation's update window and a pin.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Update windows' }).click();
    await page.getByRole('heading', { name: 'Update windows' }).waitFor();
    await page.getByRole('checkbox', { name: 'Updates only inside a window' }).check();
    await page.getByRole('checkbox', { name: 'Saturday' }).uncheck();
    await page.getByRole('checkbox', { name: 'Friday' }).check();
    await page.getByLabel('Starts at').fill('23:00');
    await page.getByLabel('Ends at').fill('03:30');
    await page.getByLabel('Pinned agent version').fill('1.0.0');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.getByText('Saved.').waitFor();
    const settings = await app.api('GET', `/orgs/${tenant.orgId}/agent-update-settings`, { token: adminToken });
    expect(settings.body).toEqual({ maintenanceWindow: { days: ['fri', 'sun'], start: '23:00', end: '03:30' }, pinnedVersions: { agent: '1.0.0' } });
    expect(await axeViolations(page)).toEqual([]);
    // Agent versions are the platform's: not in an organisation admin's navigation, and explained at their address.
    expect(await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Agent versions' }).count()).toBe(0);
    await page.goto(`${app.publicUrl}/devices/agent-versions`);
    await page.getByText('You do not have permission to see agent versions.').waitFor();
    expect(t.problems).toEqual([]);

    // The platform administrator: a registered version, promoted to a quarter of the fleet.
    const admin = await createUser(app, { name: 'Fleet Admin', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);
    await registerRemote(app, systemToken, { version: '1.1.0' });
    const p = await tab();
    await signInWithTotp(p.page, `${app.publicUrl}/devices/agent-versions`, admin, secret);
    await p.page.getByRole('heading', { name: 'Agent versions' }).waitFor();
    await p.page.getByRole('button', { name: 'Promote agent 1.1.0' }).click();
    const dialog = p.page.getByRole('dialog', { name: 'Promote agent 1.1.0' });
    await dialog.getByLabel('Offer to this share of devices (%)').fill('10');
    await dialog.getByRole('button', { name: 'Promote' }).click();
    await p.page.getByText('agent 1.1.0 is the fleet target for 10% of devices.').waitFor();
    await p.page.getByRole('button', { name: 'Widen the rollout of agent 1.1.0' }).waitFor();
    await p.page.getByRole('cell', { name: /active 10%/ }).waitFor();
    await p.screenshot('agent-versions');
    expect(await axeViolations(p.page)).toEqual([]);
    await p.page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(p.page)).toEqual([]);
    await p.screenshot('agent-versions-dark');
    expect(p.problems).toEqual([]);
  });
});
