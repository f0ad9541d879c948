/**
 * The console's sign-in options (docs/decisions.md "Sign-in options") in chromium with its virtual
 * authenticator: the sign-in page asks for the email first and follows sign-in discovery (single
 * sign-on or the password), signs in with a passkey through the browser's autofill on the email field
 * (conditional mediation) or the "Sign in with a passkey" button; the Account page registers sign-in
 * passkeys and removes the password once two exist. axe clean in both themes at 390 px.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant, type TestUser } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium, openPasskeyDevice, type PasskeyDevice } from '../helpers/browser.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { ssoProviders } from '../../src/modules/sso/schema.js';
import { DEFAULT_MAPPING } from '../../src/modules/sso/presets.js';
import { passkeys } from '../../src/modules/mfa/schema.js';
import { eq } from 'drizzle-orm';
import { axeViolations, consoleBuild } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: sign-in options in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  const devices: PasskeyDevice[] = [];
  const ssoDomain = `sso-${Date.now().toString(36)}.example`;

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, LOGIN_LIMIT: '1000', PASSWORD_REENTRY_LIMIT: '1000', PASSKEY_SIGNIN_LIMIT: '1000' } });
    browser = await launchChromium();
    tenant = await createTenant(app);
    const db = app.server.keel.db;
    await db.insert(ssoProviders).values({ orgId: tenant.orgId, name: 'IdP', type: 'oidc', scopes: 'openid', attributeMapping: DEFAULT_MAPPING, status: 'active', enforceSso: true });
    await db.insert(verifiedDomains).values({ orgId: tenant.orgId, domain: ssoDomain, status: 'verified', token: 't', verifiedAt: new Date() });
  }, 180_000);
  afterAll(async () => {
    for (const d of devices) await d.close().catch(() => undefined);
    await browser?.close();
    await app?.close();
  });

  /** A browser context with a platform authenticator, on the console (390 px wide when asked). */
  async function device(narrow = false): Promise<PasskeyDevice> {
    const d = await openPasskeyDevice(browser, app.publicUrl);
    devices.push(d);
    if (narrow) await d.page.setViewportSize({ width: 390, height: 844 });
    d.page.setDefaultTimeout(60_000);
    return d;
  }

  async function registerSignInPasskey(dev: PasskeyDevice, user: TestUser, token: string, name: string): Promise<void> {
    const options = await app.api('POST', '/auth/passkeys/register/options', { token, body: { currentPassword: user.password, name, signIn: true } });
    const credential = await dev.create(options.body);
    expect((await app.api('POST', '/auth/passkeys/register/verify', { token, body: { credential } })).status).toBe(201);
  }

  async function axeBothThemes(page: Page): Promise<void> {
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      expect(await axeViolations(page), scheme).toEqual([]);
    }
    await page.emulateMedia({ colorScheme: 'light' });
  }

  it('signs in with the passkey the browser offers in the email field (conditional mediation), and with the passkey button', async () => {
    const user = await createUser(app, { name: 'Passkey Person', org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const dev = await device(true);
    await registerSignInPasskey(dev, user, (await login(app, user)).accessToken, 'Phone');

    const { page } = dev;
    // The passkey options are held until the field is read: once they arrive, the virtual
    // authenticator answers the conditional request at once and the sign-in page is gone.
    let release = (): void => undefined;
    const held = new Promise<void>((r) => (release = r));
    await page.route('**/api/v1/auth/passkey/options', async (route) => {
      await held;
      await route.continue();
    });
    await page.goto(`${app.publicUrl}/login`);
    const email = page.getByLabel('Email', { exact: true });
    expect(await email.getAttribute('autocomplete')).toBe('username webauthn');
    release();
    // The virtual authenticator answers the pending conditional request: the autofill signs in.
    await page.getByRole('heading', { name: 'Welcome, Passkey Person' }).waitFor();

    // The button: on an organisation's sign-in page (no email step, so no autofill is pending).
    // (Signed out by dropping the session cookies: on /login the virtual authenticator would answer the autofill again at once.)
    await dev.context.clearCookies();
    await page.goto(`${app.publicUrl}/login?org=${tenant.otherOrgId}`);
    await page.getByLabel('Password', { exact: true }).waitFor();
    await axeBothThemes(page);
    await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
    await page.getByRole('heading', { name: 'Welcome, Passkey Person' }).waitFor();
  });

  it('asks for the email first and follows discovery: the password field for a password domain, single sign-on only for an enforcing domain', async () => {
    const t = await device(true);
    const { page } = t;
    await page.goto(`${app.publicUrl}/login`);
    await page.getByLabel('Email', { exact: true }).fill(`someone@${ssoDomain}`);
    await page.getByRole('button', { name: 'Continue', exact: true }).click();
    const sso = page.getByRole('link', { name: 'Continue with single sign-on' });
    await sso.waitFor();
    expect(await sso.getAttribute('href')).toBe(`${app.publicUrl}/api/v1/sso/login/${tenant.orgId}`);
    await page.getByText('Your organisation signs in only through single sign-on.').waitFor();
    expect(await page.getByLabel('Password', { exact: true }).count()).toBe(0);
    await axeBothThemes(page);

    await page.getByRole('button', { name: 'Use another email' }).click();
    await page.getByLabel('Email', { exact: true }).fill(tenant.orgReadOnly.email);
    await page.getByRole('button', { name: 'Continue', exact: true }).click();
    await page.getByLabel('Password', { exact: true }).waitFor();
    await axeBothThemes(page);
  });

  it('the Account page registers sign-in passkeys, marks them, removes the password once two exist, then adds and removes passkeys confirmed by a passkey', async () => {
    const user = await createUser(app, { name: 'Going Passwordless', org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const dev = await device(true);
    const { page } = dev;
    // A first sign-in passkey (API), then sign in with it: a fresh session with a second factor.
    await registerSignInPasskey(dev, user, (await login(app, user)).accessToken, 'Laptop');
    await page.goto(`${app.publicUrl}/login`);
    await page.getByRole('heading', { name: 'Welcome, Going Passwordless' }).waitFor();
    // This device's authenticator forgets the first key (the account keeps it), so it may create the second.
    for (const c of await dev.credentials()) await dev.cdp.send('WebAuthn.removeCredential', { authenticatorId: dev.authenticatorId, credentialId: c.credentialId });
    await page.goto(`${app.publicUrl}/account/security`);
    await page.getByText('With two sign-in passkeys you may remove your password.').waitFor();
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByLabel('Name for this passkey').fill('Security key');
    await page.getByLabel('Current password').fill(user.password);
    // A second factor unless asked: the box makes it a sign-in passkey.
    const alone = page.getByLabel('Sign in with it alone, without a password');
    expect(await alone.isChecked()).toBe(false);
    await alone.check();
    await page.getByRole('button', { name: 'Create passkey' }).click();
    await page.getByText('Signs in', { exact: true }).nth(1).waitFor();
    const stored = await app.server.keel.db.select({ signIn: passkeys.signIn }).from(passkeys).where(eq(passkeys.userId, user.id));
    expect(stored).toEqual([{ signIn: true }, { signIn: true }]);
    await page.getByRole('button', { name: 'Remove your password' }).click();
    await axeBothThemes(page);
    await page.getByLabel('Current password').fill(user.password);
    await page.getByRole('button', { name: 'Remove password' }).click();
    await page.getByText('You sign in with your passkeys only').waitFor();
    await axeBothThemes(page);
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(401);

    // Without a password the card asks for a passkey instead (docs/decisions.md "Passwordless accounts").
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByText('Your account has no password: you confirm with one of your passkeys first').waitFor();
    expect(await page.getByLabel('Current password').count()).toBe(0);
    await axeBothThemes(page);
    await page.getByLabel('Name for this passkey').fill('Phone');
    await page.getByLabel('Sign in with it alone, without a password').check();
    // The re-authentication signs with "Security key"; then this authenticator forgets it, so the new
    // key is not refused as one it already holds (the account keeps it).
    const reauths: unknown[] = [];
    await page.route('**/api/v1/auth/passkeys/register/options', async (route) => {
      reauths.push((route.request().postDataJSON() as { reauth?: unknown }).reauth);
      for (const c of await dev.credentials()) await dev.cdp.send('WebAuthn.removeCredential', { authenticatorId: dev.authenticatorId, credentialId: c.credentialId });
      await route.continue();
    });
    await page.getByRole('button', { name: 'Create passkey' }).click();
    await page.getByText('Phone', { exact: true }).waitFor();
    await page.unroute('**/api/v1/auth/passkeys/register/options');
    expect(reauths).toEqual([expect.objectContaining({ challengeId: expect.any(String) })]);
    expect(await app.server.keel.db.select({ name: passkeys.name }).from(passkeys).where(eq(passkeys.userId, user.id))).toHaveLength(3);

    // Removing one is confirmed with the passkey this device holds ("Phone").
    await page.getByRole('button', { name: 'Remove Laptop' }).click();
    await page.getByText('Confirm with one of your passkeys (your account has no password).').waitFor();
    expect(await page.getByLabel('Current password').count()).toBe(0);
    // (No password exists, so the removal's success is the re-authentication's.)
    const removal = page.waitForResponse((r) => r.request().method() === 'DELETE' && r.url().includes('/api/v1/auth/passkeys/'));
    await page.getByRole('button', { name: 'Remove passkey' }).click();
    expect((await removal).status()).toBe(204);
    await page.getByRole('button', { name: 'Remove Laptop' }).waitFor({ state: 'detached' });
    const left = await app.server.keel.db.select({ name: passkeys.name }).from(passkeys).where(eq(passkeys.userId, user.id));
    expect(left.map((k) => k.name).sort()).toEqual(['Phone', 'Security key']);
  });
});
