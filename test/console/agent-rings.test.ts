/**
 * Rings in chromium (docs/decisions.md "Agent update rings"), against one started Keel: the platform
 * administrator promotes a version with two rings picked in the promote dialog (organisation, device
 * group, soak), sees each ring's state and counts on the Agent versions page, and advances the rings
 * by hand with Advance; the devices are offered the version ring by ring.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey, heartbeat, registerRemote } from '../agents/helpers.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp } from './helpers.js';

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: promote with rings, see each ring, advance', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  const tabs = consoleTabs(() => browser, 'agent-rings');

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

  it('the promote dialog adds two rings; the page shows them soaking and waiting; Advance opens ring 2, then the rest', async () => {
    const orgToken = (await login(app, tenant.orgAdmin)).accessToken;
    const group = async (name: string) => (await app.api('POST', `/orgs/${tenant.orgId}/device-groups`, { token: orgToken, body: { name } })).body.id as string;
    const canary = await group('Canary-PCs');
    const finance = await group('Finance-PCs');
    const inCanary = await enroll(app, await enrollmentKey(app, orgToken, tenant.orgId, { deviceGroupId: canary }));
    const inFinance = await enroll(app, await enrollmentKey(app, orgToken, tenant.orgId, { deviceGroupId: finance }));
    const other = await enroll(app, await enrollmentKey(app, orgToken, tenant.orgId));
    for (const d of [inCanary, inFinance, other]) expect((await heartbeat(app, d)).status).toBe(200);
    const admin = await createUser(app, { name: 'Release Manager', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);
    await registerRemote(app, systemToken, { version: '2.0.0' });
    const offered = async (d: typeof other) => ((await heartbeat(app, d)).body.update?.version as string | undefined) ?? null;

    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/devices/agent-versions`, admin, secret);
    await page.getByRole('button', { name: 'Promote agent 2.0.0' }).click();
    const promote = page.getByRole('dialog', { name: 'Promote agent 2.0.0' });
    await promote.getByLabel('Offer to this share of devices (%)').fill('100');
    for (const [n, name] of [[1, 'Canary-PCs'], [2, 'Finance-PCs']] as const) {
      await promote.getByRole('button', { name: 'Add a ring' }).click();
      const ring = promote.getByRole('group', { name: `Ring ${n}` });
      await ring.getByLabel(`Ring ${n}: organisation`).selectOption({ value: tenant.orgId });
      await ring.getByLabel(`Ring ${n}: device group`).getByRole('option', { name }).waitFor({ state: 'attached' });
      await ring.getByLabel(`Ring ${n}: device group`).selectOption({ label: name });
      await ring.getByLabel(`Ring ${n}: soak (minutes)`).fill('30');
    }
    expect(await axeViolations(page)).toEqual([]);
    await promote.getByRole('button', { name: 'Promote', exact: true }).click();
    await page.getByText('agent 2.0.0 is the fleet target: ring 1 is offered it now').waitFor();

    expect(await offered(inCanary)).toBe('2.0.0');
    expect(await offered(inFinance)).toBeNull();
    await page.reload();
    const rings = page.getByRole('list', { name: 'Rings of agent 2.0.0' });
    await rings.getByRole('listitem').filter({ hasText: 'Canary-PCs' }).getByText('soaking').waitFor();
    await rings.getByRole('listitem').filter({ hasText: 'Canary-PCs' }).getByText('1 offered, 0 succeeded, 0 failed; soaks 30 min').waitFor();
    await rings.getByRole('listitem').filter({ hasText: 'Finance-PCs' }).getByText('waiting').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await t.screenshot('agent-rings');

    await page.getByRole('button', { name: 'Advance the rings of agent 2.0.0' }).click();
    await page.getByText('agent 2.0.0: ring 2 is open.').waitFor();
    await rings.getByRole('listitem').filter({ hasText: 'Finance-PCs' }).getByText('soaking').waitFor();
    expect(await offered(inFinance)).toBe('2.0.0');
    expect(await offered(other)).toBeNull();
    await page.getByRole('button', { name: 'Advance the rings of agent 2.0.0' }).click();
    await page.getByText('agent 2.0.0: the rest of the fleet is offered it now.').waitFor();
    expect(await offered(other)).toBe('2.0.0');
    // Every ring done: no Advance any more.
    await rings.getByRole('listitem').filter({ hasText: 'Finance-PCs' }).getByText('done').waitFor();
    expect(await page.getByRole('button', { name: 'Advance the rings of agent 2.0.0' }).count()).toBe(0);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);
  });
});
