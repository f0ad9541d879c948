/**
 * The web console in a real browser: Debian's chromium driven by playwright-core against a started
 * Keel serving the built console. Each test signs in the way a person would and checks what the page
 * shows; screenshots land in SCREENSHOTS (test/console/helpers.ts).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, nextTotpStep, STRONG_PASSWORD, totpCode, uniqueEmail, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { samlifyIdp } from '../sso/idp.js';
import { generate } from 'selfsigned';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { randomPhone, startTwilioStub, type TwilioStub } from '../mfa/twilio-stub.js';
import { clock } from '../../src/platform/clock.js';
import { axeViolations, consoleBuild, consoleTabs, submitPassword } from './helpers.js';

afterEach(() => clock.reset());

const haveChromium = chromiumAvailable();

// Each test walks a person's path through several pages: room for a slow, shared machine.
describe.skipIf(!haveChromium || !backendAvailable())('web console in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let smtp: SmtpTestServer;
  let sms: TwilioStub;
  let tenant: Tenant;
  const tabs = consoleTabs(() => browser, 'browser');
  const tab = tabs.open;

  beforeAll(async () => {
    const [dir, mail, gateway] = await Promise.all([consoleBuild(), startSmtpServer(), startTwilioStub()]);
    smtp = mail;
    sms = gateway;
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, SMTP_URL: smtp.url, ...sms.env() } });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await smtp?.close();
    await sms?.close();
  });

  it('signs in with email and password, stays signed in across a reload (refresh cookie + CSRF header), and signs out', async () => {
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/users`);
    // Not signed in: the sign-in page, remembering where to go.
    await page.waitForURL(/\/login\?next=%2Fadmin%2Fusers/);
    await t.screenshot('login');
    expect(await axeViolations(page)).toEqual([]);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: 'Users' }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/admin/users');
    await page.getByRole('cell', { name: tenant.orgReadOnly.email }).waitFor();
    // Navigation follows the effective permissions: an organisation admin has no partners page.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Audit log' }).waitFor();
    expect(await page.getByRole('link', { name: 'Partners' }).count()).toBe(0);

    const refresh = page.waitForRequest((r) => r.url().endsWith('/api/v1/auth/refresh'));
    await page.reload();
    const sent = await refresh;
    const csrf = (await t.context.cookies()).find((c) => c.name === 'service_csrf');
    expect(csrf?.value).toBeTruthy();
    expect(sent.headers()['x-service-csrf']).toBe(csrf?.value);
    await page.getByRole('cell', { name: tenant.orgReadOnly.email }).waitFor();
    await t.screenshot('users');
    expect(await axeViolations(page)).toEqual([]);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((u) => u.pathname === '/login' && u.search === '');
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(t.problems).toEqual([]);
  });

  it('signs in with a TOTP second factor', async () => {
    const user = await createUser(app, { name: 'Totp User', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { secret, recoveryCodes } = await enrollTotp(app, (await login(app, user)).accessToken);
    // A code is accepted once per step: the sign-in uses the next step's.
    await nextTotpStep();
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await submitPassword(page, user.email, user.password);
    await page.getByRole('heading', { name: 'Second step' }).waitFor();
    await t.screenshot('login-second-step');
    expect(await axeViolations(page)).toEqual([]);
    const code = page.getByLabel('6-digit code from your authenticator app');
    await code.fill('000000');
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('alert').waitFor();
    await code.fill(await totpCode(secret));
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('heading', { name: 'Welcome, Totp User' }).waitFor();
    // A technician has no users page: not in the navigation, and its address explains instead of showing nothing.
    expect(await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Users' }).count()).toBe(0);
    await page.goto(`${app.publicUrl}/admin/users`);
    await page.getByText('You do not have permission to see users.').waitFor();

    // Without the phone at hand: a recovery code signs in once.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await submitPassword(page, user.email, user.password);
    // By keyboard: the method tabs follow the tab pattern (arrows, Home, End).
    await page.getByRole('tab', { name: 'Authenticator app' }).focus();
    await page.keyboard.press('End');
    expect(await page.getByRole('tab', { name: 'Recovery code' }).getAttribute('aria-selected')).toBe('true');
    await page.getByLabel('Recovery code (XXXX-XXXX)').fill(recoveryCodes[0]!);
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('heading', { name: 'Welcome, Totp User' }).waitFor();
    expect(t.problems).toEqual([]);
  });

  it('adds a passkey on the security page, then signs in with it (CDP virtual authenticator)', async () => {
    const user = await createUser(app, { name: 'Passkey User', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const t = await tab();
    const { page } = t;
    const cdp = await t.context.newCDPSession(page);
    await cdp.send('WebAuthn.enable', { enableUI: false });
    const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { protocol: 'ctap2', ctap2Version: 'ctap2_1', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
    });
    await page.goto(`${app.publicUrl}/account/security`);
    await submitPassword(page, user.email, user.password);
    await page.getByRole('heading', { name: 'Sign-in and security' }).waitFor();
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByLabel('Name for this passkey').fill('Work laptop');
    await page.getByLabel('Current password').fill(user.password);
    await page.getByRole('button', { name: 'Create passkey' }).click();
    await page.getByText('Work laptop', { exact: true }).waitFor();
    // The first factor of an account without recovery codes brings them, shown once.
    await page.getByRole('list', { name: 'Recovery codes' }).waitFor();
    expect((await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials).toHaveLength(1);
    // Codes from an authenticator or a phone manage those factors: nothing to offer a passkey-only account.
    expect(await page.getByRole('region', { name: 'Recovery codes and turning MFA off' }).count()).toBe(0);
    await t.screenshot('security-passkey');

    await page.getByRole('button', { name: 'Sign out' }).click();
    await submitPassword(page, user.email, user.password);
    await page.getByRole('heading', { name: 'Second step' }).waitFor();
    await page.getByRole('tab', { name: 'Passkey' }).click();
    const verify = page.waitForResponse((r) => r.url().endsWith('/api/v1/auth/mfa/passkey/verify'));
    await page.getByRole('button', { name: 'Use a passkey' }).click();
    expect((await verify).status()).toBe(200);
    await page.getByRole('heading', { name: 'Welcome, Passkey User' }).waitFor();

    // Signed in with the passkey (a session with a second factor): rename it, then remove it.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Sign-in and security' }).click();
    await page.getByRole('button', { name: 'Rename Work laptop' }).click();
    await page.getByLabel('Passkey name').fill('Home laptop');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.getByText('Home laptop', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Remove Home laptop' }).click();
    await page.getByLabel('Current password').fill(user.password);
    await page.getByRole('button', { name: 'Remove passkey' }).click();
    await page.getByText('No passkeys yet.').waitFor();
    expect(t.problems).toEqual([]);
  });

  it('consumes #ssoCode through POST /sso/exchange and explains a refused code; shows SSO callback errors in plain words', async () => {
    const t = await tab();
    const { page } = t;
    // Held while the request is in flight: the address bar at that moment must no longer carry the code.
    let addressDuringExchange = '';
    await page.route('**/api/v1/sso/exchange', async (route) => {
      addressDuringExchange = String(await page.evaluate('location.href'));
      await route.continue();
    });
    const exchange = page.waitForRequest((r) => r.url().endsWith('/api/v1/sso/exchange') && r.method() === 'POST');
    await page.goto(`${app.publicUrl}/account#ssoCode=not-a-real-code`);
    expect((await exchange).postDataJSON()).toEqual({ code: 'not-a-real-code' });
    await page.getByText('That single sign-on link is invalid or has expired. Sign in again.').waitFor();
    expect(new URL(page.url()).pathname).toBe('/login');
    // The single-use code leaves the address bar (and so the history) before it is sent.
    expect(addressDuringExchange).toBe(`${app.publicUrl}/account`);
    expect(page.url()).not.toContain('ssoCode');

    await page.goto(`${app.publicUrl}/login?error=domain_not_allowed`);
    await page.getByText('Your email domain is not allowed to sign in to this organisation.').waitFor();
    // An organisation's sign-in link: without an active provider (the check answers ssoEnabled: false) the password form stays.
    // The sign-in through a real IdP, with enforceSSO hiding the form, is in integrations.test.ts.
    await page.goto(`${app.publicUrl}/login?org=${tenant.orgId}`);
    await page.getByLabel('Password', { exact: true }).waitFor();
    await t.screenshot('login-sso-error');
    expect(t.problems).toEqual([]);
  });

  it("a signed-in person who opens a link carrying someone else's #ssoCode stays signed in as themselves, told the link was not used", async () => {
    // The attacker: an organisation with a SAML provider (samlify as its IdP) and a finished sign-in of their own puppet.
    const other = await createTenant(app);
    const otherAdmin = (await enrollTotp(app, (await login(app, other.orgAdmin)).accessToken)).accessToken;
    const pems = await generate([{ name: 'commonName', value: 'Attacker IdP' }], { keySize: 2048, algorithm: 'sha256' });
    const provider = await app.api('POST', '/sso/providers', {
      token: otherAdmin,
      body: { name: 'IdP', type: 'saml', entityId: 'https://idp.example.test/csrf', ssoUrl: 'https://idp.example.test/sso', certificate: pems.cert, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect((await app.api('POST', `/sso/providers/${provider.body.id}/status`, { token: otherAdmin, body: { status: 'active' } })).status).toBe(200);
    const metadata = await app.request('GET', `/api/v1/sso/saml/metadata/${provider.body.id}`);
    const idp = samlifyIdp({ entityId: 'https://idp.example.test/csrf', ssoUrl: 'https://idp.example.test/sso', cert: pems.cert, key: pems.private, spMetadata: metadata.body as string });
    const started = await app.api('GET', `/sso/login/${other.orgId}?redirect=/integrations/webhooks`);
    const puppet = uniqueEmail('puppet');
    const acs = await app.request('POST', '/api/v1/sso/saml/acs', {
      raw: new URLSearchParams({ SAMLResponse: await idp.respond(new URL(started.headers.get('location')!), { email: puppet }) }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    const landing = acs.headers.get('location')!;
    expect(landing).toMatch(/\/integrations\/webhooks#ssoCode=/);

    // The victim, signed in in the console, opens the attacker's link.
    const victim = await createTenant(app);
    const t = await tab();
    const { page } = t;
    const exchanges: string[] = [];
    page.on('request', (r) => {
      if (r.url().endsWith('/api/v1/sso/exchange')) exchanges.push(r.url());
    });
    await page.goto(`${app.publicUrl}/`);
    await submitPassword(page, victim.orgAdmin.email, victim.orgAdmin.password);
    await page.locator(`.user-name[title="${victim.orgAdmin.email}"]`).waitFor();
    await page.goto(landing);
    await page.getByText(`You are signed in as ${victim.orgAdmin.email}. The single sign-on link you opened was not used`).waitFor();
    await page.locator(`.user-name[title="${victim.orgAdmin.email}"]`).waitFor();
    expect(await page.locator(`.user-name[title="${puppet}"]`).count()).toBe(0);
    expect(page.url()).not.toContain('ssoCode');
    expect(exchanges).toEqual([]);
    // Still the victim after a reload, and the server agrees.
    await page.reload();
    await page.locator(`.user-name[title="${victim.orgAdmin.email}"]`).waitFor();
    await t.screenshot('sso-code-while-signed-in');
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });

  it('an organisation admin invites a user on the Users page; the invitee accepts from the emailed link and lands signed in', async () => {
    const invitee = uniqueEmail('invitee');
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/users`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('button', { name: 'Invite a user' }).click();
    const dialog = page.getByRole('dialog', { name: 'Invite a user' });
    await dialog.getByLabel('Email').fill(invitee);
    await dialog.getByLabel('Name').fill('New Colleague');
    await dialog.getByLabel('Role').selectOption({ label: 'Organization Technician' });
    await t.screenshot('users-invite');
    expect(await axeViolations(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Send invitation' }).click();
    await page.getByText(`An invitation was sent to ${invitee}.`).waitFor();
    await page.getByRole('cell', { name: invitee }).first().waitFor();

    const mail = await smtp.waitFor((m) => m.to.includes(invitee));
    const link = mail.urls.find((u) => u.includes('/accept-invite?token='));
    expect(link?.startsWith(`${app.publicUrl}/accept-invite?token=`)).toBe(true);
    const other = await tab();
    await other.page.goto(link!);
    await other.page.getByRole('heading', { name: 'Accept your invitation' }).waitFor();
    // The API's details.fields land beside the field they name.
    const password = other.page.getByLabel('Password', { exact: true });
    await password.fill('password1');
    await other.page.getByRole('button', { name: 'Accept and sign in' }).click();
    // One sentence, in the field (the field's name and the policy's reason), and no "The request is not valid" above the form.
    const weak = other.page.getByText(/^Password is too weak: [a-z][^.]*\.$/);
    await weak.waitFor();
    expect(await other.page.getByRole('alert').filter({ hasText: 'not valid' }).count()).toBe(0);
    expect(await password.getAttribute('aria-invalid')).toBe('true');
    expect(await password.getAttribute('aria-describedby')).toContain(await weak.getAttribute('id'));
    await password.fill(STRONG_PASSWORD);
    await other.page.getByRole('button', { name: 'Accept and sign in' }).click();
    await other.page.getByRole('heading', { name: 'Welcome, New Colleague' }).waitFor();

    // Back on the admin's page: the colleague is active; change the role, then disable the account.
    await page.reload();
    await page.getByLabel(`Role of ${invitee}`).selectOption({ label: 'Organization Read Only' });
    await page.getByText(`${invitee} now has the role Organization Read Only.`).waitFor();
    const row = page.getByRole('row').filter({ hasText: invitee });
    await row.getByRole('button', { name: 'Disable' }).click();
    await page.getByText(`${invitee} is disabled and signed out everywhere.`).waitFor();
    await row.getByRole('cell', { name: 'disabled', exact: true }).waitFor();
    // The colleague's open page loses its session at the next call.
    await other.page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Sign-in and security' }).click();
    await other.page.getByText('Your session has ended. Sign in again.').waitFor();
    expect(t.problems).toEqual([]);
    expect(other.problems).toEqual([]);
  });

  it('a role with Force MFA and no factor: the 428 leads straight to enrolment, with the QR code and recovery codes to download', async () => {
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await submitPassword(page, tenant.partnerAdmin.email, tenant.partnerAdmin.password);
    await page.waitForURL((u) => u.pathname === '/account/security' && u.searchParams.get('enrol') === '1');
    await page.getByText('Your role requires a second factor before you can continue.').waitFor();
    await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
    await page.getByRole('img', { name: 'QR code for your authenticator app' }).waitFor();
    const secret = (await page.locator('code.secret').textContent())!.trim();
    await page.getByLabel('Code from the app').fill(await totpCode(secret));
    await page.getByRole('button', { name: 'Turn on' }).click();
    const codes = page.getByRole('list', { name: 'Recovery codes' });
    await codes.waitFor();
    expect(await codes.getByRole('listitem').count()).toBeGreaterThanOrEqual(8);
    await t.screenshot('security-totp-enrolled');
    expect(await axeViolations(page)).toEqual([]);
    const download = page.waitForEvent('download');
    await page.getByRole('button', { name: 'Download' }).click();
    expect((await download).suggestedFilename()).toBe('keel-recovery-codes.txt');
    // Enrolled: the administration pages answer now.
    await page.getByRole('link', { name: 'Users' }).click();
    await page.getByRole('cell', { name: tenant.partnerAdmin.email }).waitFor();

    // A partner-level invitation reaching only the organisations picked.
    const invitee = uniqueEmail('partner-tech');
    await page.getByRole('button', { name: 'Invite a user' }).click();
    const dialog = page.getByRole('dialog', { name: 'Invite a user' });
    await dialog.getByLabel('Email').fill(invitee);
    await dialog.getByLabel('Name').fill('Field Tech');
    await dialog.getByLabel('Role').selectOption({ label: 'Partner Technician' });
    await dialog.getByLabel('Access').selectOption('selected');
    await dialog.getByRole('button', { name: 'Send invitation' }).click();
    await dialog.getByText('Pick at least one organisation.').waitFor();
    await dialog.getByRole('checkbox', { name: 'Org A' }).check();
    await dialog.getByRole('button', { name: 'Send invitation' }).click();
    await page.getByText(`An invitation was sent to ${invitee}.`).waitFor();
    // What the API holds, read as the same admin (signed in with the next step's code).
    await nextTotpStep();
    const challenge = await app.api('POST', '/auth/login', { body: { email: tenant.partnerAdmin.email, password: tenant.partnerAdmin.password } });
    const verified = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: await totpCode(secret) } });
    const pending = await app.api('GET', '/users/invitations', { token: verified.body.accessToken });
    expect(pending.body.data).toContainEqual(expect.objectContaining({ email: invitee, orgAccess: 'selected', orgIds: [tenant.orgId] }));
    expect(t.problems).toEqual([]);
  });

  it('an organisation admin builds a role on a parent and sees its effective permissions, creates an API key shown once, and exports the audit log', async () => {
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/roles`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('button', { name: 'New role' }).click();
    const form = page.getByRole('form', { name: 'New role' });
    await form.getByLabel('Role name').fill('Helpdesk');
    await form.getByLabel('Parent role (its permissions are inherited)').selectOption({ label: 'Organization Read Only' });
    await form.getByText(/Inherits \d+ permission\(s\) from Organization Read Only/).waitFor();
    await form.getByRole('checkbox', { name: 'Execute scripts' }).check();
    await t.screenshot('roles-builder');
    expect(await axeViolations(page)).toEqual([]);
    await form.getByRole('button', { name: 'Create role' }).click();
    await page.getByRole('link', { name: 'Helpdesk' }).click();
    const effective = page.getByRole('table', { name: 'Effective permissions' });
    await effective.getByRole('row', { name: /scripts:execute this role/ }).waitFor();
    await effective.getByRole('row', { name: /\*:read inherited from Organization Read Only/ }).waitFor();
    await t.screenshot('role-effective');
    expect(await axeViolations(page)).toEqual([]);
    // A clone keeps the permissions and the parent.
    await page.getByLabel('Name of the copy').fill('Helpdesk nights');
    await page.getByRole('button', { name: 'Clone role' }).click();
    await page.getByRole('heading', { name: 'Helpdesk nights' }).waitFor();
    await page.getByRole('table', { name: 'Effective permissions' }).getByRole('row', { name: /scripts:execute this role/ }).waitFor();
    await page.getByRole('table', { name: 'Effective permissions' }).getByRole('row', { name: /\*:read inherited from Organization Read Only/ }).waitFor();

    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByRole('button', { name: 'New API key' }).click();
    const keyForm = page.getByRole('form', { name: 'New API key' });
    await keyForm.getByLabel('Name').fill('Monitoring');
    await keyForm.getByRole('checkbox', { name: 'Read devices' }).check();
    await keyForm.getByRole('button', { name: 'Create key' }).click();
    const shown = (await page.getByLabel('API key, shown once', { exact: true }).textContent())!;
    expect(shown).toMatch(/^kk_/);
    // The key works, once shown: a client can use it.
    expect((await app.api('GET', '/devices', { token: shown })).status).not.toBe(401);

    await page.getByRole('link', { name: 'Audit log' }).click();
    await page.getByRole('cell', { name: 'role.create', exact: true }).first().waitFor();
    await t.screenshot('audit');
    expect(await axeViolations(page)).toEqual([]);
    const download = page.waitForEvent('download');
    await page.getByRole('button', { name: 'Export CSV' }).click();
    const file = await download;
    expect(file.suggestedFilename()).toBe('keel-audit.csv');
    const { readFileSync } = await import('node:fs');
    expect(readFileSync(await file.path(), 'utf8')).toContain('role.create');
    expect(t.problems).toEqual([]);
  });

  it('fits a 390-pixel-wide screen (the navigation folds behind the Menu button), in the light and the dark theme', async () => {
    const t = await tab({ width: 390, height: 844 });
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await submitPassword(page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await page.getByRole('heading', { name: /^Welcome/ }).waitFor();
    const nav = page.getByRole('navigation', { name: 'Console' });
    expect(await nav.isVisible()).toBe(false);
    await page.getByRole('button', { name: 'Menu' }).click();
    await nav.getByRole('link', { name: 'Users' }).click();
    await page.getByRole('heading', { name: 'Users' }).waitFor();
    // Nothing wider than the screen but the tables, which scroll inside their frame.
    const widest = await page.evaluate(`[...document.querySelectorAll('body *')].filter((e) => !e.closest('.table-wrap')).map((e) => [e.getBoundingClientRect().right, e.tagName + '.' + e.className]).sort((a, b) => b[0] - a[0])[0]`);
    expect(widest, 'the element reaching furthest right').toEqual([expect.any(Number), expect.any(String)]);
    expect((widest as [number, string])[0], String(widest)).toBeLessThanOrEqual(390);
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await t.screenshot('users-390');
    expect(await axeViolations(page)).toEqual([]);
    // The dark theme follows the system and keeps its contrast.
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await page.evaluate('getComputedStyle(document.body).backgroundColor')).toBe('rgb(13, 17, 23)');
    await t.screenshot('users-390-dark');
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });

  it('resets a forgotten password from the emailed link, then lists the new session on the sessions page', async () => {
    const user = await createUser(app, { name: 'Forgetful', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await page.getByRole('link', { name: 'Forgot your password?' }).click();
    await page.getByLabel('Email').fill(user.email);
    await page.getByRole('button', { name: 'Email me a link' }).click();
    await page.getByText(`If an account exists for ${user.email}`).waitFor();
    const mail = await smtp.waitFor((m) => m.to.includes(user.email));
    const link = mail.urls.find((u) => u.includes('/reset-password?token='));
    expect(link?.startsWith(`${app.publicUrl}/reset-password?token=`)).toBe(true);

    await page.goto(link!);
    const fresh = 'a-new-and-long-passphrase-77';
    await page.getByLabel('New password', { exact: true }).fill(fresh);
    await page.getByLabel('Repeat the new password').fill(`${fresh}x`);
    await page.getByText('The two passwords differ').waitFor();
    await page.getByLabel('Repeat the new password').fill(fresh);
    await page.getByRole('button', { name: 'Set password' }).click();
    await page.getByText('Your password is changed').waitFor();
    await page.getByRole('link', { name: 'Sign in' }).click();
    await submitPassword(page, user.email, fresh);
    await page.getByRole('heading', { name: 'Welcome, Forgetful' }).waitFor();

    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Profile' }).click();
    await page.getByLabel('Name').fill('Remembers Now');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.getByText('Saved.').waitFor();
    await page.getByRole('banner').getByText('Remembers Now').waitFor();
    // Changing the password ends every session, this one too; the new one signs in.
    const newer = 'an-even-newer-passphrase-88';
    await page.getByLabel('Current password').fill(fresh);
    await page.getByLabel('New password').fill(newer);
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await submitPassword(page, user.email, newer);
    await page.getByRole('heading', { name: 'Welcome, Remembers Now' }).waitFor();

    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Sessions' }).click();
    await page.getByRole('cell', { name: /this one/ }).waitFor();
    expect(await axeViolations(page)).toEqual([]);
    // Ending the current session signs this browser out.
    await page.getByRole('button', { name: 'End this session' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(t.problems).toEqual([]);
  });

  it('a platform administrator creates a partner, works in it, creates an organisation with a site, a device group and required MFA', async () => {
    const admin = await createUser(app, { name: 'Platform Admin', platformAdmin: true });
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/admin/partners`);
    await submitPassword(page, admin.email, admin.password);
    const partnerName = `Acme MSP ${Date.now()}`;
    await page.getByLabel('Partner name').fill(partnerName);
    await page.getByRole('button', { name: 'Create partner' }).click();
    const row = page.getByRole('listitem').filter({ hasText: partnerName });
    await row.getByRole('button', { name: 'Work in this partner' }).click();
    await expect.poll(() => page.getByLabel('Partner', { exact: true }).inputValue()).not.toBe('');

    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Organisations' }).click();
    await page.getByLabel('Organisation name').fill('Contoso');
    await page.getByRole('button', { name: 'Create organisation' }).click();
    await page.getByRole('link', { name: 'Contoso' }).click();
    await page.getByRole('heading', { name: 'Contoso' }).waitFor();

    await page.getByLabel('New site').fill('Head office');
    await page.getByRole('button', { name: 'Add site' }).click();
    await page.getByRole('region', { name: 'Sites' }).getByText('Head office', { exact: true }).waitFor();
    await page.getByLabel('New device group').fill('Servers');
    await page.getByLabel('In site').selectOption({ label: 'Head office' });
    await page.getByRole('button', { name: 'Add group' }).click();
    await page.getByText('(Head office)').waitFor();

    await page.getByRole('checkbox', { name: 'Require a second factor to sign in' }).check();
    await page.getByRole('checkbox', { name: 'Text message' }).uncheck();
    await page.getByRole('button', { name: 'Save security settings' }).click();
    await page.getByText('Security settings saved.').waitFor();
    await t.screenshot('organisation');
    expect(await axeViolations(page)).toEqual([]);

    // What the page did is what the API now holds.
    const token = (await login(app, admin)).accessToken;
    const orgs = await app.api('GET', '/orgs', { token });
    const org = orgs.body.data.find((o: { name: string }) => o.name === 'Contoso');
    expect(org.settings.security).toEqual({ requireMfa: true, allowedMfaMethods: { totp: true, sms: false, passkey: true } });
    const groups = await app.api('GET', `/orgs/${org.id}/device-groups`, { token });
    const sites = await app.api('GET', `/orgs/${org.id}/sites`, { token });
    expect(sites.body.data.map((x: { name: string }) => x.name)).toEqual(['Head office']);
    expect(groups.body.data).toEqual([expect.objectContaining({ name: 'Servers', siteId: sites.body.data[0].id })]);
    expect(t.problems).toEqual([]);
  });

  it('an existing account with an authenticator accepts an invitation: password, then its second factor, then it joins signed in', async () => {
    const user = await createUser(app, { name: 'Existing Person' });
    const { secret } = await enrollTotp(app, (await login(app, user)).accessToken);
    await nextTotpStep();
    const admin = await login(app, tenant.orgAdmin);
    const invited = await app.api('POST', '/users/invite', { token: admin.accessToken, body: { email: user.email, name: 'Existing Person', roleId: SYSTEM_ROLES.orgReadOnly.id } });
    expect(invited.status).toBe(201);
    const mail = await smtp.waitFor((m) => m.to.includes(user.email) && m.urls.some((u) => u.includes('/accept-invite?token=')));
    const link = mail.urls.find((u) => u.includes('/accept-invite?token='))!;

    const t = await tab();
    const { page } = t;
    await page.goto(link);
    await page.getByLabel('Password', { exact: true }).fill(user.password);
    await page.getByRole('button', { name: 'Accept and sign in' }).click();
    await page.getByRole('heading', { name: 'Second step' }).waitFor();
    await page.getByLabel('6-digit code from your authenticator app').fill(await totpCode(secret));
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('heading', { name: 'Welcome, Existing Person' }).waitFor();
    // Joined: the organisation's pages are there, and the organisation lists the account as active.
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Audit log' }).waitFor();
    const listed = await app.api('GET', `/users?search=${encodeURIComponent(user.email)}`, { token: admin.accessToken });
    expect(listed.body.data).toEqual([expect.objectContaining({ email: user.email, status: 'active', roleId: SYSTEM_ROLES.orgReadOnly.id })]);
    expect(t.problems).toEqual([]);
  });

  it('verifies a phone on the security page, makes SMS the second factor, and signs in with a texted code', async () => {
    const user = await createUser(app, { name: 'Sms User', org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const phone = randomPhone();
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/account/security`);
    await submitPassword(page, user.email, user.password);
    await page.getByLabel('Phone number').fill(phone);
    await page.getByRole('button', { name: 'Send a code' }).click();
    await page.getByText('A code was sent to').waitFor();
    await page.getByLabel('Code from the text message').fill(sms.lastCode(phone));
    await page.getByRole('button', { name: 'Verify phone' }).click();
    await page.getByText(/^Verified phone:/).waitFor();
    await page.getByRole('button', { name: 'Use text messages as my second factor' }).click();
    await page.getByRole('list', { name: 'Recovery codes' }).waitFor();

    await page.getByRole('button', { name: 'Sign out' }).click();
    await submitPassword(page, user.email, user.password);
    await page.getByRole('heading', { name: 'Second step' }).waitFor();
    expect(await page.getByRole('tab', { name: 'Text message' }).getAttribute('aria-selected')).toBe('true');
    const sent = sms.received.length;
    await page.getByRole('button', { name: 'Send code' }).click();
    await page.getByLabel('6-digit code from the text message').waitFor();
    expect(sms.received.length).toBe(sent + 1);
    await page.getByLabel('6-digit code from the text message').fill(sms.lastCode(phone));
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('heading', { name: 'Welcome, Sms User' }).waitFor();
    expect(t.problems).toEqual([]);
  });

  it('an organisation user whose role forces MFA is sent to enrolment from the start page', async () => {
    const admin = await login(app, tenant.orgAdmin);
    const role = await app.api('POST', '/roles', { token: admin.accessToken, body: { name: `Strict ${Date.now()}`, parentRoleId: SYSTEM_ROLES.orgReadOnly.id, forceMfa: true, permissions: [] } });
    expect(role.status).toBe(201);
    const user = await createUser(app, { name: 'Strict User', org: { orgId: tenant.orgId, roleId: role.body.id } });
    const t = await tab();
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await submitPassword(page, user.email, user.password);
    await page.waitForURL((u) => u.pathname === '/account/security' && u.searchParams.get('enrol') === '1');
    await page.getByText('Your role requires a second factor before you can continue.').waitFor();
    expect(t.problems).toEqual([]);
  });
});
