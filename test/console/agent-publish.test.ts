/**
 * Publishing and honest rollouts in chromium (docs/decisions.md "Honest rollouts"), against one started
 * Keel with release keys and AGENT_AUTO_PROMOTE on (the default): the platform administrator uploads a
 * signed build from the empty Agent versions page (registered, not promoted), promotes it staged (10 %
 * proposed), widens it; the one device rolls it back; the page says the rollout is failing and the
 * device's page shows its update history with the agent's reason; Update now retries it.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { chromiumAvailable, launchChromium } from '../helpers/browser.js';
import { enroll, enrollmentKey, heartbeat } from '../agents/helpers.js';
import { signBuild } from '../../src/modules/agents/signing.js';
import { axeViolations, consoleBuild, consoleTabs, signInWithTotp, submitPassword } from './helpers.js';

const keys = generateKeyPairSync('ed25519');
const rawPublic = keys.publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');

describe.skipIf(!chromiumAvailable() || !backendAvailable())('console: publish a build, stage it, see a failed update honestly', { timeout: 120_000 }, () => {
  let app: TestApp;
  let browser: Browser;
  let tenant: Tenant;
  const tabs = consoleTabs(() => browser, 'agent-publish');

  beforeAll(async () => {
    const dir = await consoleBuild();
    app = await startTestApp({ publicUrlFromPort: true, env: { CONSOLE_DIR: dir, BINARY_SOURCE: 'local', AGENT_RELEASE_PUBLIC_KEYS: rawPublic } });
    browser = await launchChromium();
    tenant = await createTenant(app);
  });
  afterAll(async () => {
    await tabs.closeAll();
    await browser?.close();
    await app?.close();
  });

  it('upload (signed, not promoted) → promote staged → widen → rolled back: failing, not offered again, history with the reason; Update now retries', async () => {
    const orgToken = (await login(app, tenant.orgAdmin)).accessToken;
    const device = await enroll(app, await enrollmentKey(app, orgToken, tenant.orgId), { hostname: 'till-07' });
    expect((await heartbeat(app, device)).body.update).toBeNull();
    const admin = await createUser(app, { name: 'Release Manager', platformAdmin: true });
    const { accessToken: systemToken, secret } = await enrollTotp(app, (await login(app, admin)).accessToken);

    // The binary and its release signature, as `keel release sign` prints it.
    const bytes = Buffer.from('#!/bin/sh\nexit 2\n');
    const file = join(mkdtempSync(join(tmpdir(), 'keel-build-')), 'keel-agent');
    writeFileSync(file, bytes);
    const signature = signBuild(keys.privateKey, { version: '1.1.0', component: 'agent', os: 'linux', arch: 'amd64', sha256: createHash('sha256').update(bytes).digest('hex'), size: bytes.length });

    const t = await tabs.open();
    const { page } = t;
    await signInWithTotp(page, `${app.publicUrl}/devices/agent-versions`, admin, secret);
    await page.getByRole('heading', { name: 'Agent versions' }).waitFor();
    await page.getByText('No versions registered yet. To publish one').waitFor();
    expect(await axeViolations(page)).toEqual([]);

    await page.getByRole('button', { name: 'Publish a build' }).click();
    const publish = page.getByRole('dialog', { name: 'Publish a build' });
    await publish.getByLabel('Version').fill('1.1.0');
    await publish.getByLabel('Binary').setInputFiles(file);
    await publish.getByLabel('Release signature (base64)').fill(signature);
    expect(await axeViolations(page)).toEqual([]);
    await publish.getByRole('button', { name: 'Publish', exact: true }).click();
    await page.getByText('agent 1.1.0 for linux/amd64 is registered. No device is offered it until you promote it.').waitFor();
    // Registered, signed, and not promoted although AGENT_AUTO_PROMOTE is on.
    const entry = (await app.api('GET', '/agent-versions?limit=100', { token: systemToken })).body.data.find((v: { version: string }) => v.version === '1.1.0');
    expect(entry).toMatchObject({ target: [], rollout: null, builds: [{ os: 'linux', arch: 'amd64', signed: true, source: 'local' }] });
    expect((await heartbeat(app, device)).body.update).toBeNull();

    // Promote: the dialog proposes a staged share.
    await page.getByRole('button', { name: 'Promote agent 1.1.0' }).click();
    const promote = page.getByRole('dialog', { name: 'Promote agent 1.1.0' });
    expect(await promote.getByLabel('Offer to this share of devices (%)').inputValue()).toBe('10');
    await promote.getByRole('button', { name: 'Promote' }).click();
    await page.getByText('agent 1.1.0 is the fleet target for 10% of devices.').waitFor();
    // Nobody updated yet: active, never complete.
    await page.getByRole('cell', { name: /active 10%/ }).waitFor();
    await page.getByRole('button', { name: 'Widen the rollout of agent 1.1.0' }).click();
    const widen = page.getByRole('dialog', { name: 'Widen the rollout of agent 1.1.0' });
    await widen.getByLabel('New share of devices (%)').fill('100');
    await widen.getByRole('button', { name: 'Widen' }).click();
    await page.getByText('The agent rollout of 1.1.0 now reaches 100% of devices.').waitFor();
    await page.getByRole('cell', { name: /active 100%/ }).getByText('1 to update').waitFor();

    // The one device is offered it and rolls it back: not offered again.
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.1.0' });
    const report = (body: Record<string, unknown>) => app.api('POST', '/agents/update-report', { token: device.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', ...body } });
    expect((await report({ state: 'started' })).status).toBe(204);
    expect((await report({ state: 'rolled_back', error: 'the new binary exited at start (status 2); restored 1.0.0' })).status).toBe(204);
    expect((await heartbeat(app, device)).body.update).toBeNull();

    await page.reload();
    const failing = page.getByRole('status').filter({ hasText: 'The agent rollout of 1.1.0 is failing.' });
    await failing.getByText('Update now on their page').waitFor();
    await page.getByRole('cell', { name: /failing 100%/ }).getByText('0 succeeded, 1 failed').waitFor();
    expect(await page.getByRole('cell', { name: /complete/ }).count()).toBe(0);
    await t.screenshot('agent-rollout-failing');
    expect(await axeViolations(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(page)).toEqual([]);
    // A phone's width: the publish dialog and the page stay usable and clean.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole('button', { name: 'Publish a build' }).click();
    await page.getByRole('dialog', { name: 'Publish a build' }).getByLabel('Binary').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    await page.getByRole('dialog', { name: 'Publish a build' }).getByRole('button', { name: 'Cancel' }).click();
    expect(await axeViolations(page)).toEqual([]);
    expect(t.problems).toEqual([]);

    // The device's page (its organisation's administrator): the history with the agent's reason, and the retry.
    const o = await tabs.open();
    await o.page.goto(`${app.publicUrl}/devices/${device.deviceId}`);
    await submitPassword(o.page, tenant.orgAdmin.email, tenant.orgAdmin.password);
    await o.page.getByRole('heading', { name: 'Device till-07' }).waitFor();
    const history = o.page.getByRole('table', { name: 'Update history' });
    const rolledBack = history.getByRole('row').filter({ hasText: 'rolled back' });
    await rolledBack.getByText('the new binary exited at start (status 2); restored 1.0.0').waitFor();
    await rolledBack.getByText('agent 1.0.0 → 1.1.0').waitFor();
    await history.getByRole('row').filter({ hasText: 'offered' }).waitFor();
    await history.getByRole('row').filter({ hasText: 'started' }).waitFor();
    expect(await axeViolations(o.page)).toEqual([]);
    await o.screenshot('device-update-history');
    await o.page.setViewportSize({ width: 390, height: 844 });
    expect(await axeViolations(o.page)).toEqual([]);
    await o.page.emulateMedia({ colorScheme: 'dark' });
    expect(await axeViolations(o.page)).toEqual([]);
    await o.screenshot('device-update-history-390-dark');
    await o.page.getByRole('button', { name: 'Update now' }).click();
    await o.page.getByText('The current version is offered at the next heartbeat.').waitFor();
    await history.getByRole('row').filter({ hasText: 'retry requested' }).waitFor();
    expect((await heartbeat(app, device)).body.update).toMatchObject({ version: '1.1.0' });
    expect(o.problems).toEqual([]);
  });
});
