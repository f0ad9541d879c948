/**
 * The console without curl, in chromium against one started Keel: an organisation installs the agent
 * from the console (the empty Devices page leads there; the shown command enrols a machine through
 * the reference agent; a revoked key is refused), and the helpdesk tasks (reset a user's second
 * factors, sign a user out everywhere, decommission a device, rename a device group, rename and
 * delete a partner), each confirmed before it runs and its result seen on the page and in the API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey } from '../agents/helpers.js';
import { Agent } from '../../agent/agent.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: install the agent, helpdesk tasks', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  const dirs: string[] = [];
  const tabs = consoleTabs(() => browser, 'install-helpdesk');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, LOGIN_LIMIT: '1000' } });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  async function axeClean(page: Page): Promise<void> {
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      expect(await axeViolations(page)).toEqual([]);
    }
    await page.emulateMedia({ colorScheme: 'light' });
  }

  /** Answers the next confirm (or prompt, with `text`) the page opens. */
  const answerNextDialog = (page: Page, text?: string) => page.once('dialog', (d) => void (text === undefined ? d.accept() : d.accept(text)));

  /** The reference agent, in-process, with the settings of the command the console showed. */
  function agentFrom(command: string, hostname: string): Agent {
    const env = Object.fromEntries([...command.matchAll(/(KEEL_[A-Z_]+)=(\S+)/g)].map((m) => [m[1], m[2]]));
    expect(Object.keys(env).sort()).toEqual(['KEEL_ENROLLMENT_KEY', 'KEEL_URL']);
    expect(command).toMatch(/ npx keel-agent$/);
    const dir = mkdtempSync(join(tmpdir(), 'keel-console-agent-'));
    dirs.push(dir);
    const bin = join(dir, 'agent-bin');
    writeFileSync(bin, '#!/bin/sh\necho started\nsleep 60\n', { mode: 0o755 });
    return new Agent({ server: env.KEEL_URL ?? '', enrollmentKey: env.KEEL_ENROLLMENT_KEY ?? '', stateDir: join(dir, 'state'), binaryPath: bin, initialVersion: '1.0.0', hostname, os: 'linux', arch: 'amd64' });
  }

  it('an organisation with no device: the empty Devices page leads to Install agent; the shown command enrols a machine that is then listed; a revoked key is refused', async () => {
    const tenant = await createTenant(app);
    const { secret, accessToken: admin } = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    const site = (await app.api('POST', `/orgs/${tenant.orgId}/sites`, { token: admin, body: { name: 'Head office' } })).body.id as string;
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/devices`, tenant.orgAdmin, secret);
    await page.getByRole('link', { name: 'Install the agent on a machine' }).waitFor();
    await t.screenshot('devices-empty-install');
    await page.getByRole('link', { name: 'Install the agent on a machine' }).click();
    await page.getByRole('heading', { name: 'Install agent' }).waitFor();
    const form = page.getByRole('form', { name: 'New enrolment key' });
    await form.getByLabel('Name (optional)').fill('Head office laptops');
    await form.getByLabel('Site').selectOption(site);
    await form.getByRole('button', { name: 'Create enrolment key' }).click();
    const command = (await page.getByLabel('Install command').textContent()) ?? '';
    // KEEL_URL is the configured PUBLIC_URL the key's answer carries (here also the page's origin).
    expect(command).toContain(`KEEL_URL=${app.publicUrl} `);
    await page.getByText(`Keel's address for agents: ${app.publicUrl} (PUBLIC_URL).`).waitFor();
    await t.screenshot('install-agent-key');
    await axeClean(page);
    // A phone: the command wraps inside its frame, nothing overflows, axe stays clean.
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await axeClean(page);
    await t.screenshot('install-agent-390');
    await page.setViewportSize({ width: 1280, height: 800 });

    const agent = agentFrom(command, 'laptop-042');
    await agent.enroll();
    await agent.heartbeat();
    await page.goto(`${app.publicUrl}/devices`);
    await page.getByRole('link', { name: 'laptop-042' }).waitFor();
    const listed = await app.api('GET', '/devices', { token: admin });
    expect(listed.body.data.map((d: { hostname: string; siteId: string }) => [d.hostname, d.siteId])).toEqual([['laptop-042', site]]);

    await page.goto(`${app.publicUrl}/devices/install`);
    answerNextDialog(page);
    await page.getByRole('button', { name: 'Revoke key Head office laptops' }).click();
    await page.getByText('is revoked: enrolling with it is refused').waitFor();
    await page.getByRole('cell', { name: 'revoked' }).waitFor();
    await expect(agentFrom(command, 'laptop-043').enroll()).rejects.toThrow('enrolment refused: 401');
    expect(t.problems).toEqual([]);
  });

  it('helpdesk: reset a user’s MFA, sign a user out everywhere, decommission a device, rename a device group, each confirmed first', async () => {
    const tenant = await createTenant(app);
    const { secret, accessToken: admin } = await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken);
    // The technician lost their authenticator; the reader's laptop was stolen.
    const techSession = await enrollTotp(app, (await login(app, tenant.orgTechnician)).accessToken);
    const readerToken = (await login(app, tenant.orgReadOnly)).accessToken;
    const group = (await app.api('POST', `/orgs/${tenant.orgId}/device-groups`, { token: admin, body: { name: 'Kiosks' } })).body.id as string;
    const device = await enroll(app, await enrollmentKey(app, admin, tenant.orgId), { hostname: 'kiosk-7' });
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/admin/users`, tenant.orgAdmin, secret);

    answerNextDialog(page);
    await page.getByRole('row', { name: tenant.orgTechnician.email }).getByRole('button', { name: 'Reset MFA' }).click();
    await page.getByText(`The second factors of ${tenant.orgTechnician.email} are reset`).waitFor();
    expect((await app.api('GET', '/auth/me', { token: techSession.accessToken })).status).toBe(401);
    expect((await app.api('GET', `/users/${tenant.orgTechnician.id}`, { token: admin })).body.mfaEnabled).toBe(false);

    answerNextDialog(page);
    await page.getByRole('row', { name: tenant.orgReadOnly.email }).getByRole('button', { name: 'End all sessions' }).click();
    await page.getByText(`${tenant.orgReadOnly.email} is signed out everywhere (`).waitFor();
    expect((await app.api('GET', '/auth/me', { token: readerToken })).status).toBe(401);
    await t.screenshot('helpdesk-users');
    await axeClean(page);

    await page.goto(`${app.publicUrl}/admin/orgs/${tenant.orgId}`);
    answerNextDialog(page, 'Lobby kiosks');
    await page.getByRole('button', { name: 'Rename group Kiosks' }).click();
    await page.getByText('Lobby kiosks').waitFor();
    expect((await app.api('GET', `/orgs/${tenant.orgId}/device-groups`, { token: admin })).body.data.find((g: { id: string }) => g.id === group)?.name).toBe('Lobby kiosks');

    await page.goto(`${app.publicUrl}/devices/${device.deviceId}`);
    // Dismissed: nothing happens.
    page.once('dialog', (d) => void d.dismiss());
    await page.getByRole('button', { name: 'Decommission this device' }).click();
    await page.getByRole('heading', { name: 'Device kiosk-7' }).waitFor();
    expect((await app.api('GET', `/devices/${device.deviceId}`, { token: admin })).status).toBe(200);
    answerNextDialog(page);
    await page.getByRole('button', { name: 'Decommission this device' }).click();
    await page.getByText('kiosk-7 is decommissioned.').waitFor();
    expect((await app.api('GET', `/devices/${device.deviceId}`, { token: admin })).status).toBe(404);
    expect((await app.api('POST', '/agents/heartbeat', { token: device.deviceToken, body: { components: { agent: '1.0.0' } } })).status).toBe(401);
    expect(t.problems).toEqual([]);
  });

  it('a platform administrator renames a partner and deletes an empty one; a partner with organisations is refused with the reason', async () => {
    const platformAdmin = await createUser(app, { name: 'Platform', platformAdmin: true });
    const { secret, accessToken } = await enrollTotp(app, (await login(app, platformAdmin)).accessToken);
    const busy = await createTenant(app);
    const busyName = (await app.api('GET', `/partners/${busy.partnerId}`, { token: accessToken })).body.name as string;
    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/admin/partners`, platformAdmin, secret);
    await page.getByLabel('Partner name').fill('Contoso MSP');
    await page.getByRole('button', { name: 'Create partner' }).click();
    answerNextDialog(page, 'Contoso Managed Services');
    await page.getByRole('button', { name: 'Rename partner Contoso MSP' }).click();
    await page.getByText('The partner is now called Contoso Managed Services.').waitFor();

    answerNextDialog(page);
    await page.getByRole('button', { name: `Delete partner ${busyName}` }).click();
    await page.getByText(/still has 2 organization/).waitFor();
    expect((await app.api('GET', `/partners/${busy.partnerId}`, { token: accessToken })).status).toBe(200);

    answerNextDialog(page);
    await page.getByRole('button', { name: 'Delete partner Contoso Managed Services' }).click();
    await page.getByText('The partner Contoso Managed Services is deleted.').waitFor();
    await page.getByRole('button', { name: 'Delete partner Contoso Managed Services' }).waitFor({ state: 'detached' });
    const partners = await app.api('GET', '/partners?limit=100', { token: accessToken });
    expect(partners.body.data.map((p: { name: string }) => p.name)).not.toContain('Contoso Managed Services');
    await axeClean(page);
    expect(t.problems).toEqual([]);
  });
});
