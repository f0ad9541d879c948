/**
 * Update channel: a rollout moves only on reports of updates Keel offered to the reporting device
 * (recorded when offered, per device, component and version), once per device, per platform; the
 * automatic halt decides under a row lock on the platform's target, so parallel failures halt it.
 */
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, login } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { createWorld, type World } from '../access/helpers.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { agentTargets } from '../../src/modules/agents/schema.js';
import { closeSecond, enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, startSecondProcess, type Enrolled } from '../agents/helpers.js';
import { waitUntil } from '../helpers/wait.js';
import type { RunningServer } from '../../src/server.js';

describe.skipIf(!backendAvailable())(`rollout reports count only real offers (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  let foreignKey: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', ENROLL_IP_LIMIT: '100000' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    // Another partner's organisation and its enrolment key (keys ship in installers).
    const other = await createTenant(app);
    foreignKey = await enrollmentKey(app, (await login(app, other.orgAdmin)).accessToken, other.orgId);
    // agent 2.1.0 for linux/amd64, auto-promoted at 100%.
    await registerRemote(app, admin, { version: '2.1.0' });
  });
  afterAll(async () => app?.close());

  const report = (d: Enrolled, toVersion: string, state: string) =>
    app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion, state } });
  const rolloutOf = async (version: string) => (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: { version: string }) => v.version === version)?.rollout;
  const halts = async (version: string) => (await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.action, 'agent.rollout.halt'))).filter((a) => (a.details as { version?: string }).version === version);

  it("another partner's devices reporting a version never offered to them move no rollout; the first partner's device is still offered it", async () => {
    const mine = await enroll(app, key);
    const foreign = await Promise.all(Array.from({ length: 5 }, () => enroll(app, foreignKey, { os: 'windows', arch: 'arm64' })));
    for (const d of foreign) {
      expect((await heartbeat(app, d)).body.update).toBeNull(); // no windows/arm64 build: nothing offered
      expect((await report(d, '2.1.0', 'failed')).status).toBe(204);
    }
    // Fake successes do not dilute either.
    const liars = await Promise.all(Array.from({ length: 5 }, () => enroll(app, foreignKey, { os: 'windows', arch: 'arm64' })));
    for (const d of liars) expect((await report(d, '2.1.0', 'succeeded')).status).toBe(204);
    // Nothing counted, and the one linux/amd64 device has not updated: active (docs/decisions.md "Honest rollouts").
    expect(await rolloutOf('2.1.0')).toMatchObject({ status: 'active', succeeded: 0, failed: 0, pending: 1 });
    expect(await halts('2.1.0')).toHaveLength(0);
    expect((await heartbeat(app, mine)).body.update).toMatchObject({ component: 'agent', version: '2.1.0' });
  });

  it('a report of an offered version counts once, even when sent five times (the default threshold is five reports)', async () => {
    const d = await enroll(app, key);
    expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '2.1.0' });
    for (let i = 0; i < 5; i++) expect((await report(d, '2.1.0', 'failed')).status).toBe(204);
    expect(await rolloutOf('2.1.0')).toMatchObject({ status: 'failing', failed: 1, blocked: 1 });
    expect(await halts('2.1.0')).toHaveLength(0);
    const fresh = await enroll(app, key);
    expect((await heartbeat(app, fresh)).body.update).toMatchObject({ version: '2.1.0' });
  });

  it('failures on windows/arm64 halt windows/arm64 only: linux/amd64 keeps being offered the version', async () => {
    await registerRemote(app, admin, { version: '2.2.0', os: 'windows', arch: 'arm64' });
    await registerRemote(app, admin, { version: '2.2.0' });
    const linux = await enroll(app, key);
    expect((await heartbeat(app, linux)).body.update).toMatchObject({ version: '2.2.0' });
    const windows = await Promise.all(Array.from({ length: 5 }, () => enroll(app, foreignKey, { os: 'windows', arch: 'arm64' })));
    for (const d of windows) {
      expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '2.2.0' });
      expect((await report(d, '2.2.0', 'failed')).status).toBe(204);
    }
    const targets = await app.server.keel.db.select().from(agentTargets).where(and(eq(agentTargets.component, 'agent'), eq(agentTargets.version, '2.2.0')));
    expect(Object.fromEntries(targets.map((t) => [`${t.os}/${t.arch}`, t.rolloutStatus]))).toEqual({ 'windows/arm64': 'halted', 'linux/amd64': 'active' });
    const [halt] = await halts('2.2.0');
    expect(halt?.details).toMatchObject({ platforms: ['windows/arm64'], failed: 5 });
    expect((await heartbeat(app, await enroll(app, key))).body.update).toMatchObject({ version: '2.2.0' });
    expect((await heartbeat(app, await enroll(app, foreignKey, { os: 'windows', arch: 'arm64' }))).body.update).toBeNull();
  });

  describe('race: parallel failure reports', () => {
    let second: RunningServer | undefined;
    afterAll(async () => closeSecond(second));

    raceTest('five parallel failed reports (the threshold), half through a second process, halt the rollout every round; both processes then offer nothing', async () => {
      second = await startSecondProcess(app);
      const via = async (server: RunningServer, path: string, token: string, body: unknown) => {
        const res = await fetch(`${server.url}/api/v1${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-forwarded-for': app.ip }, body: JSON.stringify(body) });
        return { status: res.status, body: (await res.text()) || null };
      };
      const devices = await Promise.all(Array.from({ length: 5 }, () => enroll(app, key, { arch: 'race' })));
      for (let round = 1; round <= 6; round++) {
        const version = `3.${round}.0`;
        await registerRemote(app, admin, { version, arch: 'race' });
        for (const d of devices) expect((await heartbeat(app, d)).body.update).toMatchObject({ version });
        const answers = await together(devices.length, (i) =>
          via(i % 2 === 0 ? app.server : second!, '/agents/update-report', devices[i]!.deviceToken, { component: 'agent', fromVersion: '1.0.0', toVersion: version, state: 'failed' }),
        );
        expect(answers.map((a) => a.status)).toEqual([204, 204, 204, 204, 204]);
        const [target] = await app.server.keel.db.select().from(agentTargets).where(and(eq(agentTargets.arch, 'race'), eq(agentTargets.version, version)));
        expect(target?.rolloutStatus, `round ${round}`).toBe('halted');
        expect(await halts(version)).toHaveLength(1);
        const newcomer = await enroll(app, key, { arch: 'race' });
        expect((await heartbeat(app, newcomer)).body.update).toBeNull();
        // The other process dropped its cached targets (published after commit): it offers nothing either.
        const offered = await waitUntil(
          `the other process to offer no update after the halt (round ${round})`,
          async () => (JSON.parse((await via(second!, '/agents/heartbeat', newcomer.deviceToken, { components: { agent: '1.0.0' } })).body ?? '{}') as { update?: unknown }).update,
          (update) => update === null,
        );
        expect(offered).toBeNull();
      }
    }, 120_000);
  });
});
