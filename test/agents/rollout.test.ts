import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, type Enrolled } from './helpers.js';
import { agentsOf } from '../../src/modules/agents/context.js';

const FLEET = 2000;

/** In parallel batches, to keep the test short without flooding the server. */
async function inBatches<T>(n: number, size: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += size) out.push(...(await Promise.all(Array.from({ length: Math.min(size, n - i) }, (_, k) => fn(i + k)))));
  return out;
}

describe.skipIf(!backendAvailable())(`staged rollout with automatic halt (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let fleet: Enrolled[];
  beforeAll(async () => {
    // The whole fleet enrols from one address with one key: beyond the default enrolment limits.
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false', ENROLL_IP_LIMIT: '100000', ENROLL_KEY_LIMIT: '100000' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    fleet = await inBatches(FLEET, 25, () => enroll(app, key));
    for (const version of ['1.0.0', '1.1.0']) await registerRemote(app, admin, { version });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.0.0' } })).status).toBe(200);
  }, 240_000);
  afterAll(async () => app?.close());

  it(`a 10% rollout offers the update to 10% ± 3% of ${FLEET} devices, the same ones every time; halts after failures`, async () => {
    const promoted = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.1.0', rollout: { percent: 10 } } });
    expect(promoted.status).toBe(200);
    expect(promoted.body.rollout).toEqual({ percent: 10, rings: [] });
    const offered = async (i: number) => {
      const res = await heartbeat(app, fleet[i]!);
      expect(res.status).toBe(200);
      return res.body.update?.version === '1.1.0';
    };
    const offers = await inBatches(FLEET, 50, offered);
    const cohort = fleet.filter((_, i) => offers[i]);
    expect(cohort.length).toBeGreaterThanOrEqual(FLEET * 0.07);
    expect(cohort.length).toBeLessThanOrEqual(FLEET * 0.13);
    // Stable: the same devices again.
    const again = await inBatches(FLEET, 50, offered);
    expect(again).toEqual(offers);

    let entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === '1.1.0');
    expect(entry.rollout).toMatchObject({ percent: 10, status: 'active', succeeded: 0, failed: 0 });

    // 4 succeed, then failures: halted once failed ≥ 20% of at least 5 reports.
    const report = (d: Enrolled, state: string) =>
      app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', state } });
    for (const d of cohort.slice(0, 4)) {
      expect((await report(d, 'started')).status).toBe(204);
      expect((await report(d, 'succeeded')).status).toBe(204);
    }
    entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === '1.1.0');
    expect(entry.rollout).toMatchObject({ status: 'active', succeeded: 4, failed: 0 });
    expect((await report(cohort[4]!, 'failed')).status).toBe(204);
    entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === '1.1.0');
    expect(entry.rollout).toMatchObject({ status: 'halted', succeeded: 4, failed: 1 });
    // Halted: nobody is offered the version any more, update-now included.
    const left = cohort.slice(5);
    expect(left.length).toBeGreaterThan(0);
    await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [left[0]!.deviceId] } });
    for (const d of left) expect((await heartbeat(app, d)).body.update).toBeNull();
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.action, 'agent.rollout.halt'));
    expect(audit).toHaveLength(1);
    expect(audit[0]!.details).toMatchObject({ component: 'agent', version: '1.1.0', succeeded: 4, failed: 1 });

    // Widening does not resume a halted rollout; resume does (counting restarts).
    await app.api('POST', '/agent-versions/rollout', { token: admin, body: { percent: 20 } });
    expect((await heartbeat(app, left[0]!)).body.update).toBeNull();
    const resumed = await app.api('POST', '/agent-versions/rollout/resume', { token: admin, body: {} });
    expect(resumed.status).toBe(200);
    expect((await heartbeat(app, left[0]!)).body.update?.version).toBe('1.1.0');
    entry = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === '1.1.0');
    expect(entry.rollout).toMatchObject({ percent: 20, status: 'active', succeeded: 0, failed: 0 });
  }, 240_000);

  it('a heartbeat whose load of the builds raced with an invalidation still decides with the builds it read', async () => {
    const state = agentsOf(app.server.keel).state;
    state.dropConfig();
    const loading = state.builds('linux', 'amd64');
    // A promote elsewhere, heard while the builds were being read: they are not cached...
    state.dropConfig();
    const builds = await loading;
    // ...but this heartbeat's decision has them (before, it found the cache empty and offered nothing).
    expect(builds('1.1.0', 'agent')).toMatchObject({ sha256: 'a'.repeat(64), size: 1000 });
    expect(builds('9.9.9', 'agent')).toBeUndefined();
    expect((await state.builds('linux', 'amd64'))('1.0.0', 'agent')).toMatchObject({ size: 1000 });
  });
});
