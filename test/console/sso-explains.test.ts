/**
 * The console's single sign-on page explains itself (docs/decisions.md "SSO that explains itself"),
 * in chromium against one started Keel and a real OpenID provider (oidc-provider): the sign-in link
 * and the organisation's id with Copy, group mappings refused inline at "Groups from" while no groups
 * claim is named, and Test saying whether the client secret was accepted; axe clean.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: single sign-on that explains itself in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  let idp: OidcIdp;
  const tabs = consoleTabs(() => browser, 'sso-explains');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir } });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
    tenant = await createTenant(app);
  }, 180_000);
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await idp?.close();
  });

  it('an organisation admin finds the sign-in link and id (copied), is told at "Groups from" why a mapping cannot be saved, and Test says whether the client secret was accepted', async () => {
    const { secret } = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    const t = await tabs.open();
    const { page } = t;
    await t.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: app.publicUrl });
    await signInWithTotp(page, `${app.publicUrl}/integrations/sso`, tenant.orgAdmin, secret);
    await page.getByRole('heading', { name: 'Single sign-on' }).waitFor();

    // The sign-in link and the organisation's id, each with Copy.
    const link = `${app.publicUrl}/api/v1/sso/login/${tenant.orgId}`;
    await page.getByText(link, { exact: true }).waitFor();
    await page.getByText(tenant.orgId, { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Copy sign-in link' }).click();
    await page.getByRole('button', { name: 'Copied sign-in link' }).waitFor();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe(link);
    await t.screenshot('sso-sign-in-link');
    expect(await axeViolations(page)).toEqual([]);

    // Google's preset names no groups claim: the create form says so.
    await page.getByRole('button', { name: 'New provider' }).click();
    const create = page.getByRole('form', { name: 'New provider' });
    // The presets arrive from the server after the form opens: wait for the option, then count it.
    const google = create.getByRole('option', { name: 'Google Workspace (OIDC)', exact: true });
    await google.first().waitFor({ state: 'attached' });
    expect(await google.count()).toBe(1);
    await create.getByLabel('Preset').selectOption('workspace-idp');
    await create.getByText('sends no groups claim').waitFor();
    await create.getByLabel('Name', { exact: true }).fill('Workspace');
    await create.getByRole('button', { name: 'Create provider' }).click();

    await page.getByRole('heading', { name: 'Provider Workspace' }).waitFor();
    const form = page.getByRole('form', { name: 'Provider settings' });
    await form.getByLabel('Client id').fill(idp.clientId);
    await form.getByLabel('Client secret').fill('not-the-secret');
    await form.getByLabel('Issuer URL').fill(idp.issuer);
    await form.getByRole('button', { name: 'Add a mapping' }).click();
    await form.getByLabel('Group 1', { exact: true }).fill('fabrikam-techs');
    await form.getByLabel('Role for group 1').selectOption({ label: SYSTEM_ROLES.orgReadOnly.name });
    await form.getByRole('button', { name: 'Save settings' }).click();
    // Refused, and said at the field it is about.
    const groupsFrom = form.getByLabel('Groups from');
    await form.locator('.field-error', { hasText: 'is needed for group-to-role mappings' }).waitFor();
    expect(await groupsFrom.getAttribute('aria-invalid')).toBe('true');
    const errorId = (await groupsFrom.getAttribute('aria-describedby'))?.split(' ').find((id) => id.endsWith('-err'));
    expect(await page.locator(`[id="${errorId}"]`).textContent()).toContain('is needed for group-to-role mappings');
    expect(await axeViolations(page)).toEqual([]);
    await t.screenshot('sso-mapping-refused');

    await groupsFrom.fill('groups');
    await form.getByLabel('Client secret').fill('not-the-secret');
    await form.getByRole('button', { name: 'Save settings' }).click();
    await form.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Test discovery and credentials' }).click();
    await page.getByText('Test failed.').waitFor();
    await page.getByRole('alert').getByText('invalid_client').waitFor();
    await page.getByRole('alert').getByText('refused', { exact: true }).waitFor();
    await t.screenshot('sso-test-refused');

    await form.getByLabel('Client secret').fill(idp.clientSecret);
    await form.getByRole('button', { name: 'Save settings' }).click();
    await form.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Test discovery and credentials' }).click();
    await page.getByText('Test passed.').waitFor();
    await page.getByText('accepted', { exact: true }).waitFor();
    expect(await axeViolations(page)).toEqual([]);

    // In testing: the page offers the trial through the sign-in link.
    await page.getByRole('button', { name: 'Set to testing' }).click();
    await page.getByRole('link', { name: link }).waitFor();
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    expect(t.problems).toEqual([]);
  });

  it('a member of an organisation that enforces SSO is given its sign-in link at the password form; a refused trial is said in words, the organisation kept', async () => {
    const admin = await createUser(app, { org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const token = (await enrollTotp(app, (await login(app, admin)).accessToken)).accessToken;
    const p = await app.api('POST', '/sso/providers', { token, body: { name: 'Enforced', type: 'oidc', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, enforceSSO: true } });
    expect(p.status).toBe(201);
    expect((await app.api('POST', `/sso/providers/${p.body.id}/status`, { token, body: { status: 'active' } })).status).toBe(200);
    const member = await createUser(app, { org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const t = await tabs.open();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await submitPassword(page, member.email, member.password);
    const link = page.getByRole('link', { name: 'Sign in with single sign-on' });
    await link.waitFor();
    expect(await link.getAttribute('href')).toBe(`${app.publicUrl}/api/v1/sso/login/${tenant.otherOrgId}`);
    expect(await axeViolations(page)).toEqual([]);

    await page.goto(`${app.publicUrl}/login?error=provider_testing&org=${tenant.otherOrgId}`);
    await page.getByText('still being tested: only its single sign-on administrators can sign in through it').waitFor();
    // The organisation is kept: its sign-in is offered again.
    await page.getByRole('link', { name: 'Sign in with Enforced' }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });
});
