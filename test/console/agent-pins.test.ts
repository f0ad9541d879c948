/**
 * Agent pins and the fleet picture in chromium (docs/decisions.md "Agent pins and distribution"): the
 * organisation's administrator reads a device's update decision, pins the device in the "Update pins"
 * panel and sees the decision follow; the platform administrator reads the distribution tables on the
 * Agent versions page, each reason a link to the Devices page filtered by it (a removable chip). Axe on each.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey, heartbeat, registerRemote } from '../agents/helpers.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: update decision, pins and distribution', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  const tabs = consoleTabs(() => browser, 'agent-pins');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, AGENT_AUTO_PROMOTE: 'false' } });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  it('the device page explains the decision and pins the device; the Agent versions page shows the distribution; a reason links to its devices', async () => {
    const orgToken = (await login(app, tenant.orgAdmin)).accessToken;
    const device = await enroll(app, await enrollmentKey(app, orgToken, tenant.orgId), { hostname: 'till-09' });
    expect((await heartbeat(app, device)).status).toBe(200);
    const admin = await createUser(app, { name: 'Release Manager', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);
    for (const version of ['1.5.0', '2.0.0']) await registerRemote(app, systemToken, { version });
    expect((await app.api('POST', '/agent-versions/promote', { token: systemToken, body: { version: '2.0.0' } })).status).toBe(200);

    const o = await tabs.open();
    await o.page.goto(`${app.publicUrl}/devices/${device.deviceId}`);
    await submitPassword(o.page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await o.page.getByRole('heading', { name: 'Device till-09' }).waitFor();
    const decision = o.page.getByRole('table', { name: 'Update decision per component' });
    await decision.getByRole('row').filter({ hasText: 'agent' }).getByText('Fleet target 2.0.0 (rollout at 100%)').waitFor();
    expect(await axeViolations(o.page)).toEqual([]);

    const panel = o.page.getByRole('region', { name: 'Update pins' });
    await panel.getByLabel('Pinned agent version').fill('1.5.0');
    await panel.getByRole('button', { name: 'Save pins' }).click();
    await panel.getByText('Pins saved.').waitFor();
    await decision.getByRole('row').filter({ hasText: 'agent' }).getByText('Pinned by the device to 1.5.0').waitFor();
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.5.0' });
    expect(await axeViolations(o.page)).toEqual([]);
    await o.screenshot('device-update-pins');
    expect(o.problems).toEqual([]);

    const t = await tabs.open();
    await signInWithTotp(t.page, `${app.publicUrl}/devices/agent-versions`, admin, secret);
    await t.page.getByRole('heading', { name: 'Agent versions' }).waitFor();
    const versions = t.page.getByRole('table', { name: 'Devices per version (the whole fleet)', exact: true });
    await versions.getByRole('row').filter({ hasText: '1.0.0' }).getByRole('cell', { name: '1', exact: true }).waitFor();
    // The same numbers as pictures: the console's chart component, an SVG image named by its title.
    await t.page.getByRole('img', { name: /^Devices per version \(the whole fleet\)\. \d+ component installations/ }).waitFor();
    await t.page.getByRole('img', { name: /^Devices behind the target, per reason \(the whole fleet\)\. \d+ devices behind/ }).waitFor();
    const behind = t.page.getByRole('table', { name: 'Devices behind the target, per reason (the whole fleet)', exact: true });
    const pinned = behind.getByRole('link', { name: 'Pinned to another version' });
    await pinned.waitFor();
    expect(await pinned.getAttribute('href')).toBe('/devices?behind=pinned');
    expect(await axeViolations(t.page)).toEqual([]);
    await t.screenshot('agent-versions-distribution');
    // The reason's link: the Devices page filtered by it (the devices the reason counts), as a removable chip
    // (opened by the organisation's administrator: the Devices page works in one tenant).
    await o.page.goto(`${app.publicUrl}${(await pinned.getAttribute('href')) ?? ''}`);
    await o.page.getByRole('heading', { name: 'Devices', exact: true, level: 1 }).waitFor();
    const chips = o.page.getByRole('list', { name: 'Active filters' });
    await chips.getByText('Behind the target: Pinned to another version').waitFor();
    const devices = o.page.getByRole('table', { name: 'Devices' });
    await devices.getByRole('row').filter({ hasText: 'till-09' }).waitFor();
    expect(await devices.getByRole('row').count()).toBe(2);
    expect(await axeViolations(o.page)).toEqual([]);
    await o.screenshot('devices-behind-filter');
    await chips.getByRole('button', { name: 'Remove the filter: behind the target, Pinned to another version' }).click();
    await chips.waitFor({ state: 'detached' });
    expect(new URL(o.page.url()).search).toBe('');
    expect(o.problems).toEqual([]);
    expect(t.problems).toEqual([]);
  });
});
