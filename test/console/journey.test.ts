/**
 * An MSP's first day, end to end in chromium against one started Keel, without curl: the bootstrap
 * administrator (ADMIN_EMAIL at first start) signs in, creates a partner and an organisation,
 * invites a user (a real SMTP server receives the email; the accept page names the organisation and
 * the address), sets up SSO with a group mapping against a real OpenID provider (oidc-provider) and
 * the invited user signs in through it and gets the mapped role, installs an agent from the
 * console's command (the reference agent runs in-process with the shown key and URL), publishes a
 * build and stages it, sees the update fail honestly (the agent rolls the build back: failing, never
 * a green success), reads the audit log by names, sets an update window in a time zone, and resets
 * the user's second factor. Axe on each page visited (light and dark).
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { enrollTotp, login, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { startSmtpServer, type SmtpTestServer } from '../helpers/smtp.js';
import { startOidcIdp, type OidcIdp } from '../sso/idp.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { Agent } from '../../agent/agent.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp } from './helpers.js';

const ADMIN = { email: 'root@msp.example', password: 'Bootstrap-Admin-Pass-7319' };

describe.skipIf(!chromiumAvailable() || !backendAvailable() || process.platform !== 'linux')('console: an MSP\'s whole day in chromium', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let smtp: SmtpTestServer;
  let idp: OidcIdp;
  const agents: Agent[] = [];
  const dirs: string[] = [];
  const tabs = consoleTabs(() => browser, 'journey');

  beforeAll(async () => {
    const dir = await consoleBuild();
    smtp = await startSmtpServer();
    app = await startTestApp({
      publicUrlFromPort: true,
      env: { CONSOLE_DIR: dir, SMTP_URL: smtp.url, BINARY_SOURCE: 'local', ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, LOGIN_LIMIT: '1000' },
    });
    idp = await startOidcIdp({ redirectUri: `${app.publicUrl}/api/v1/sso/callback` });
    browser = await launchChromium();
  }, 180_000);
  afterAll(async () => {
    for (const a of agents) await a.shutdown().catch(() => undefined);
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    await idp?.close();
    await smtp?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  async function axeClean(page: Page): Promise<void> {
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      expect(await axeViolations(page)).toEqual([]);
    }
    await page.emulateMedia({ colorScheme: 'light' });
  }

  /** The reference agent, in-process, with the settings of the command the console showed; its binary stays up. */
  function agentFrom(command: string, hostname: string): Agent {
    const env = Object.fromEntries([...command.matchAll(/(KEEL_[A-Z_]+)=(\S+)/g)].map((m) => [m[1], m[2]]));
    expect(Object.keys(env).sort()).toEqual(['KEEL_ENROLLMENT_KEY', 'KEEL_URL']);
    const dir = mkdtempSync(join(tmpdir(), 'keel-journey-agent-'));
    dirs.push(dir);
    const bin = join(dir, 'agent-bin');
    writeFileSync(bin, '#!/bin/sh\necho "started 1.0.0"\nexec sleep 300\n');
    chmodSync(bin, 0o755);
    const agent = new Agent({ server: env.KEEL_URL ?? '', enrollmentKey: env.KEEL_ENROLLMENT_KEY ?? '', stateDir: join(dir, 'state'), binaryPath: bin, initialVersion: '1.0.0', hostname, os: 'linux', arch: 'amd64' });
    agents.push(agent);
    return agent;
  }

  it('bootstrap admin → partner and organisation → invite (email, accept page) → SSO with a group mapping → install an agent → publish and stage a build → the failed update said honestly → audit by names → update window in a zone → reset MFA', async () => {
    const { secret } = await enrollTotp(app, (await login(app, ADMIN)).accessToken);
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/admin/partners`, ADMIN, secret);

    // A partner and an organisation, each from its page; the choice lands in the URL.
    await page.getByRole('heading', { name: 'Partners' }).waitFor();
    await page.getByLabel('Partner name').fill('Fabrikam MSP');
    await page.getByRole('button', { name: 'Create partner' }).click();
    const partnerItem = page.getByRole('list', { name: 'Partners' }).getByRole('listitem').filter({ hasText: 'Fabrikam MSP' });
    await partnerItem.getByRole('button', { name: 'Work in this partner' }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('partnerId')).not.toBeNull();
    const partnerId = new URL(page.url()).searchParams.get('partnerId') ?? '';
    await axeClean(page);
    await page.getByRole('link', { name: 'Organisations', exact: true }).click();
    await page.getByRole('heading', { name: 'Organisations' }).waitFor();
    await page.getByLabel('Organisation name').fill('Contoso');
    await page.getByRole('button', { name: 'Create organisation' }).click();
    const orgPicker = page.locator('.tenant-picker').getByLabel('Organisation', { exact: true });
    await orgPicker.locator('option', { hasText: 'Contoso' }).waitFor({ state: 'attached' });
    await orgPicker.selectOption({ label: 'Contoso' });
    await expect.poll(() => new URL(page.url()).searchParams.get('orgId')).not.toBeNull();
    const orgId = new URL(page.url()).searchParams.get('orgId') ?? '';
    await axeClean(page);
    const at = (path: string) => `${app.publicUrl}${path}?partnerId=${partnerId}&orgId=${orgId}`;

    // Invite a user: the email names the organisation; the accept page names it and the address.
    const ivy = { email: 'ivy@contoso.example', password: STRONG_PASSWORD };
    await page.goto(at('/admin/users'));
    await page.getByRole('button', { name: 'Invite a user' }).click();
    const dialog = page.getByRole('dialog', { name: 'Invite a user' });
    await dialog.getByLabel('Email').fill(ivy.email);
    await dialog.getByLabel('Name').fill('Ivy Tech');
    await dialog.getByLabel('Role').selectOption({ label: SYSTEM_ROLES.orgReadOnly.name });
    await dialog.getByRole('button', { name: 'Send invitation' }).click();
    await page.getByText(`An invitation was sent to ${ivy.email}.`).waitFor();
    await axeClean(page);
    const mail = await smtp.waitFor((m) => m.to.includes(ivy.email));
    expect(mail.subject).toBe('You are invited to Contoso on Keel');
    const link = mail.urls.find((u) => u.includes('/accept-invite?token=')) ?? '';
    expect(link.startsWith(`${app.publicUrl}/accept-invite?token=`)).toBe(true);

    const inv = await tabs.open();
    await inv.page.goto(link);
    await inv.page.getByText(`You are invited to join Contoso on Keel as ${ivy.email}.`).waitFor();
    await axeClean(inv.page);
    await inv.screenshot('accept-invite');
    await inv.page.setViewportSize({ width: 390, height: 844 });
    await axeClean(inv.page);
    await inv.page.getByLabel('Your name (optional)').fill('Ivy Tech');
    await inv.page.getByLabel('Password', { exact: true }).fill(ivy.password);
    await inv.page.getByRole('button', { name: 'Accept and sign in' }).click();
    await inv.page.getByRole('button', { name: 'Sign out' }).waitFor();
    expect(inv.problems).toEqual([]);
    await inv.close();

    // SSO with a group mapping, tested and activated from the SSO page.
    await page.goto(at('/integrations/sso'));
    await page.getByRole('button', { name: 'New provider' }).click();
    const create = page.getByRole('form', { name: 'New provider' });
    await create.getByRole('option', { name: 'Microsoft Entra ID (OIDC)' }).first().waitFor({ state: 'attached' });
    await create.getByLabel('Preset').selectOption('workforce-idp');
    await create.getByLabel('Name', { exact: true }).fill('Contoso IdP');
    await create.getByRole('button', { name: 'Create provider' }).click();
    await page.getByRole('heading', { name: 'Provider Contoso IdP' }).waitFor();
    const form = page.getByRole('form', { name: 'Provider settings' });
    expect(await form.getByLabel('Groups from').inputValue()).toBe('groups');
    await form.getByLabel('Client id').fill(idp.clientId);
    await form.getByLabel('Client secret').fill(idp.clientSecret);
    await form.getByLabel('Issuer URL').fill(idp.issuer);
    await form.getByRole('button', { name: 'Add a mapping' }).click();
    await form.getByLabel('Group 1', { exact: true }).fill('contoso-techs');
    await form.getByLabel('Role for group 1').selectOption({ label: SYSTEM_ROLES.orgTechnician.name });
    await form.getByRole('button', { name: 'Save settings' }).click();
    await form.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Test discovery and credentials' }).click();
    await page.getByText('Test passed.').waitFor();
    await page.getByRole('button', { name: 'Activate' }).click();
    // The status said once: the badge, then what it means.
    await page.getByText('active: offered at sign-in').waitFor();
    expect(await page.getByText(/active\s*Active/).count()).toBe(0);
    await axeClean(page);

    // Ivy signs in through the IdP, in the group: the mapping makes her a technician.
    const sub = 'ivy-at-idp';
    idp.accounts.set(sub, { sub, email: ivy.email, name: 'Ivy Tech', groups: ['contoso-techs'] });
    const s = await tabs.open();
    // The IdP's development pages link a web font from the internet, which this machine cannot reach.
    await s.context.route((u) => u.hostname !== 'localhost' && u.hostname !== '127.0.0.1', (r) => r.fulfill({ status: 200, body: '' }));
    await s.page.goto(`${app.publicUrl}/login?org=${orgId}`);
    await s.page.getByRole('link', { name: 'Sign in with Contoso IdP' }).click();
    await s.page.waitForURL((u) => u.origin === idp.issuer);
    await s.page.locator('input[name="login"]').fill(sub);
    await s.page.locator('input[name="password"]').fill('any');
    await s.page.locator('button[type="submit"]').click();
    await s.page.getByRole('button', { name: 'Continue' }).click();
    await s.page.locator(`.user-name[title="${ivy.email}"]`).waitFor();
    expect(s.problems).toEqual([]);
    await s.close();
    await page.goto(at('/admin/users'));
    const ivyRow = page.getByRole('row', { name: ivy.email });
    await expect.poll(() => ivyRow.getByLabel(`Role of ${ivy.email}`).inputValue()).toBe(SYSTEM_ROLES.orgTechnician.id);

    // Install an agent: the empty Devices page leads to the command; the reference agent runs it.
    await page.goto(at('/devices'));
    await page.getByRole('link', { name: 'Install the agent on a machine' }).click();
    await page.getByRole('heading', { name: 'Install agent' }).waitFor();
    const keyForm = page.getByRole('form', { name: 'New enrolment key' });
    await keyForm.getByLabel('Name (optional)').fill('Contoso laptops');
    await keyForm.getByRole('button', { name: 'Create enrolment key' }).click();
    const command = (await page.getByLabel('Install command').textContent()) ?? '';
    expect(command).toContain(`KEEL_URL=${app.publicUrl} `);
    await axeClean(page);
    const agent = agentFrom(command, 'contoso-lt-01');
    await agent.enroll();
    expect(await agent.start()).toBe(true);
    await page.goto(at('/devices'));
    await page.getByRole('link', { name: 'contoso-lt-01' }).waitFor();
    await axeClean(page);

    // Publish a build that cannot start, and stage it: registered only, then promoted at 10 %, widened.
    const build = join(mkdtempSync(join(tmpdir(), 'keel-journey-build-')), 'keel-agent');
    dirs.push(join(build, '..'));
    writeFileSync(build, '#!/bin/sh\necho "cannot start 1.1.0" >&2\nexit 3\n');
    await page.goto(at('/devices/agent-versions'));
    await page.getByRole('button', { name: 'Publish a build' }).click();
    const publish = page.getByRole('dialog', { name: 'Publish a build' });
    await publish.getByLabel('Version').fill('1.1.0');
    await publish.getByLabel('Binary').setInputFiles(build);
    await publish.getByRole('button', { name: 'Publish', exact: true }).click();
    await page.getByText('agent 1.1.0 for linux/amd64 is registered. No device is offered it until you promote it.').waitFor();
    await page.getByRole('button', { name: 'Promote agent 1.1.0' }).click();
    const promote = page.getByRole('dialog', { name: 'Promote agent 1.1.0' });
    expect(await promote.getByLabel('Offer to this share of devices (%)').inputValue()).toBe('10');
    await promote.getByRole('button', { name: 'Promote' }).click();
    await page.getByText('agent 1.1.0 is the fleet target for 10% of devices.').waitFor();
    await page.getByRole('button', { name: 'Widen the rollout of agent 1.1.0' }).click();
    const widen = page.getByRole('dialog', { name: 'Widen the rollout of agent 1.1.0' });
    await widen.getByLabel('New share of devices (%)').fill('100');
    await widen.getByRole('button', { name: 'Widen' }).click();
    await page.getByText('The agent rollout of 1.1.0 now reaches 100% of devices.').waitFor();

    // The agent takes it, the build exits at start, the agent restores 1.0.0 and says so.
    expect((await agent.tick()).outcome).toBe('rolled_back');
    expect(agent.version).toBe('1.0.0');
    await page.reload();
    await page.getByRole('status').filter({ hasText: 'The agent rollout of 1.1.0 is failing.' }).waitFor();
    await page.getByRole('cell', { name: /failing 100%/ }).getByText('0 succeeded, 1 failed').waitFor();
    expect(await page.getByRole('cell', { name: /complete/ }).count()).toBe(0);
    expect(await page.locator('.badge-ok', { hasText: /complete|succeeded/ }).count()).toBe(0);
    await axeClean(page);
    await t.screenshot('journey-rollout-failing');
    await page.goto(at(`/devices/${agent.deviceId ?? ''}`));
    await page.getByRole('table', { name: 'Update history' }).getByRole('row').filter({ hasText: 'rolled back' }).waitFor();
    await axeClean(page);

    // The audit log by names: who, in which organisation, to whom.
    await page.goto(at('/admin/audit'));
    await page.getByLabel('Action').fill('user.invite');
    await page.getByRole('button', { name: 'Filter' }).click();
    const invited = page.getByRole('table', { name: 'Audit log entries' }).getByRole('row').filter({ hasText: 'user.invite' });
    await invited.getByRole('cell', { name: `user ${ivy.email}` }).waitFor();
    await invited.getByRole('cell', { name: 'Contoso', exact: true }).waitFor();
    await invited.getByRole('cell', { name: 'Platform Administrator' }).waitFor();
    await axeClean(page);
    await t.screenshot('audit-log-names');

    // An update window in the organisation's time zone (a misspelt zone is said at its field).
    await page.goto(at('/devices/update-windows'));
    const windowForm = page.getByRole('form', { name: 'Update window' });
    await windowForm.getByRole('checkbox', { name: 'Updates only inside a window' }).check();
    await windowForm.getByLabel('Time zone').fill('Europe/Londn');
    await windowForm.getByRole('button', { name: 'Save' }).click();
    await windowForm.locator('.field-error', { hasText: 'is not a time zone name' }).waitFor();
    await windowForm.getByLabel('Time zone').fill('Europe/London');
    await windowForm.getByRole('button', { name: 'Save' }).click();
    await windowForm.getByText('Saved.').waitFor();
    await page.getByText('Now: Saturday and Sunday, 22:00 to 04:00 Europe/London time (ends the next day)', { exact: false }).waitFor();
    await axeClean(page);
    await t.screenshot('update-windows-time-zone');
    // A phone's width: the audit log and the window's form stay clean.
    await page.setViewportSize({ width: 390, height: 844 });
    await axeClean(page);
    await page.goto(at('/admin/audit'));
    await page.getByRole('table', { name: 'Audit log entries' }).waitFor();
    await axeClean(page);
    await page.setViewportSize({ width: 1280, height: 800 });

    // Ivy enrols an authenticator, loses it; the admin resets her second factor from the Users page.
    const ivyToken = (await enrollTotp(app, (await login(app, ivy)).accessToken)).accessToken;
    await page.goto(at('/admin/users'));
    page.once('dialog', (d) => void d.accept());
    await page.getByRole('row', { name: ivy.email }).getByRole('button', { name: 'Reset MFA' }).click();
    await page.getByText(`The second factors of ${ivy.email} are reset`).waitFor();
    expect((await app.api('GET', '/auth/me', { token: ivyToken })).status).toBe(401);
    await axeClean(page);
    expect(t.problems).toEqual([]);
  });
});
