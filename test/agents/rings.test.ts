/**
 * Agent update rings over HTTP (docs/decisions.md "Agent update rings"): a promotion names ordered
 * device groups; ring 1 is offered first, the next ring (then the rest of the fleet) opens when the
 * ring has soaked on the controllable clock with few enough failures (the `agents.ring-advance` job,
 * run here at once), or by hand; a ring's failures halt the whole rollout; the status shows each ring.
 * Each test promotes its own version on its own platform (arch), so their rollouts are apart.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { createTenant, login } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { agentRolloutRings } from '../../src/modules/agents/schema.js';
import { advanceSoakedRings } from '../../src/modules/agents/rings.js';
import { behindLock, expectOneWinner, raceTest } from '../helpers/race.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, type Enrolled } from './helpers.js';

const MINUTE = 60_000;

describe.skipIf(!backendAvailable())(`agent update rings (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let canary: string;
  let finance: string;
  let elsewhereGroup: string;
  let keys: Record<string, string>;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false', AGENT_HALT_MIN_REPORTS: '2' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    const made = async (token: string, path: string, body: Record<string, unknown>) => {
      const res = await app.api('POST', path, { token, body });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    canary = await made(w.tokens.orgAdmin, `/orgs/${w.orgId}/device-groups`, { name: 'Canary-PCs' });
    finance = await made(w.tokens.orgAdmin, `/orgs/${w.orgId}/device-groups`, { name: 'Finance-PCs' });
    const elsewhere = await createTenant(app);
    const elsewhereAdmin = (await login(app, elsewhere.orgAdmin)).accessToken;
    elsewhereGroup = await made(elsewhereAdmin, `/orgs/${elsewhere.orgId}/device-groups`, { name: 'Elsewhere-PCs' });
    keys = {
      canary: await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: canary }),
      finance: await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: finance }),
      none: await enrollmentKey(app, w.tokens.orgAdmin, w.orgId),
      elsewhere: await enrollmentKey(app, elsewhereAdmin, elsewhere.orgId, { deviceGroupId: elsewhereGroup }),
    };
  });
  afterEach(() => clock.reset());
  afterAll(async () => app?.close());

  /** A device of `group` (a key of `keys`) on `arch`, heartbeating once. */
  const device = async (group: string, arch: string): Promise<Enrolled> => {
    const d = await enroll(app, keys[group]!, { arch });
    expect((await heartbeat(app, d)).status).toBe(200);
    return d;
  };
  const offered = async (d: Enrolled) => ((await heartbeat(app, d)).body.update?.version as string | undefined) ?? null;
  const report = (d: Enrolled, toVersion: string, state: string) =>
    app.api('POST', '/agents/update-report', { token: d.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion, state } });
  const promote = (body: Record<string, unknown>, token = admin) => app.api('POST', '/agent-versions/promote', { token, body: { component: 'agent', ...body } });
  const advance = (token = admin, component = 'agent') => app.api('POST', '/agent-versions/rollout/advance', { token, body: { component } });
  const rolloutOf = async (version: string, token = admin) => {
    const res = await app.api('GET', '/agent-versions?limit=100', { token });
    expect(res.status).toBe(200);
    return res.body.data.find((v: { version: string; component: string }) => v.version === version && v.component === 'agent')?.rollout;
  };
  const decisionOf = async (d: Enrolled) => {
    const res = await app.api('GET', `/devices/${d.deviceId}/update-decision`, { token: w.tokens.orgAdmin });
    expect(res.status).toBe(200);
    return res.body.data.find((r: { component: string }) => r.component === 'agent');
  };
  const audits = (action: string, version: string) =>
    app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, action), eq(auditLogs.targetId, version)));

  it('ring 1 first; ring 2 opens after ring 1 soaked on the clock, then the rest of the fleet; the status shows each ring', async () => {
    const [c, f, p] = [await device('canary', 'r1'), await device('finance', 'r1'), await device('none', 'r1')];
    await registerRemote(app, admin, { version: '3.0.0', arch: 'r1' });
    const res = await promote({ version: '3.0.0', rollout: { rings: [{ deviceGroupId: canary, soakMinutes: 5 }, { deviceGroupId: finance, soakMinutes: 5 }] } });
    expect(res.status).toBe(200);
    expect(res.body.rollout).toEqual({ percent: 100, rings: [{ deviceGroupId: canary, soakMinutes: 5 }, { deviceGroupId: finance, soakMinutes: 5 }] });

    expect(await offered(c)).toBe('3.0.0');
    expect(await offered(f)).toBeNull();
    expect(await offered(p)).toBeNull();
    expect(await decisionOf(f)).toMatchObject({ offer: null, rule: 'ring_waiting', detail: 'The fleet target is 3.0.0; waiting for ring 2 (Finance-PCs) (1 of 2 rings open)' });
    expect(await decisionOf(p)).toMatchObject({ offer: null, rule: 'ring_waiting', detail: 'The fleet target is 3.0.0; waiting for its rings to finish (1 of 2 rings open)' });
    expect((await report(c, '3.0.0', 'succeeded')).status).toBe(204);
    let rollout = await rolloutOf('3.0.0');
    expect(rollout.rings).toMatchObject([
      { ring: 1, deviceGroupId: canary, name: 'Canary-PCs', soakMinutes: 5, state: 'soaking', offered: 1, succeeded: 1, failed: 0 },
      { ring: 2, deviceGroupId: finance, name: 'Finance-PCs', soakMinutes: 5, state: 'waiting', openedAt: null, offered: 0, succeeded: 0, failed: 0 },
    ]);

    // Not yet soaked: nothing moves.
    clock.advance(5 * MINUTE - 1000);
    expect(await advanceSoakedRings(app.server.keel)).toEqual([]);
    expect(await offered(f)).toBeNull();
    clock.advance(2000);
    const before = clock.nowMs();
    expect(await advanceSoakedRings(app.server.keel)).toEqual([{ component: 'agent', version: '3.0.0', ring: 2 }]);
    expect(await offered(f)).toBe('3.0.0');
    expect(await offered(p)).toBeNull();
    rollout = await rolloutOf('3.0.0');
    expect(rollout.rings.map((r: { state: string }) => r.state)).toEqual(['done', 'soaking']);
    expect(Date.parse(rollout.rings[1].openedAt)).toBeGreaterThanOrEqual(before);

    // Ring 2 soaks from when it opened (no report: nothing failed), then the rest of the fleet opens.
    clock.advance(5 * MINUTE + 1000);
    expect(await advanceSoakedRings(app.server.keel)).toEqual([{ component: 'agent', version: '3.0.0', ring: null }]);
    expect(await offered(p)).toBe('3.0.0');
    expect((await rolloutOf('3.0.0')).rings.map((r: { state: string }) => r.state)).toEqual(['done', 'done']);
    expect(await advanceSoakedRings(app.server.keel)).toEqual([]);
    const entries = await audits('agent.rollout.advance', '3.0.0');
    expect(entries.map((e) => (e.details as { opened: unknown; by: string }).opened)).toEqual([2, 'fleet']);
    expect(entries.every((e) => (e.details as { by: string }).by === 'soak' && e.actorType === 'system')).toBe(true);
  });

  it('advancing by hand: platform release writers only, audited; 409 once no ring is left', async () => {
    const [f, p] = [await device('finance', 'r2'), await device('none', 'r2')];
    await registerRemote(app, admin, { version: '3.1.0', arch: 'r2' });
    expect((await promote({ version: '3.1.0', rollout: { rings: [{ deviceGroupId: canary, soakMinutes: 600 }, { deviceGroupId: finance, soakMinutes: 600 }] } })).status).toBe(200);
    expect(await offered(f)).toBeNull();
    const refused = await advance(w.tokens.orgAdmin);
    expect(refused.status).toBe(403);
    expect(await offered(f)).toBeNull();

    const first = await advance();
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ advanced: [{ component: 'agent', version: '3.1.0', ring: 2 }] });
    expect(await offered(f)).toBe('3.1.0');
    expect(await offered(p)).toBeNull();
    expect((await advance()).body).toEqual({ advanced: [{ component: 'agent', version: '3.1.0', ring: null }] });
    expect(await offered(p)).toBe('3.1.0');
    const none = await advance();
    expect(none.status).toBe(409);
    expect(none.body.code).toBe('no_further_ring');
    const entries = await audits('agent.rollout.advance', '3.1.0');
    expect(entries.map((e) => [(e.details as { opened: unknown }).opened, (e.details as { by: string }).by, e.actorType])).toEqual([
      [2, 'hand', 'user'],
      ['fleet', 'hand', 'user'],
    ]);
  });

  it('failures in ring 1 over the threshold halt the whole rollout (counted on the ring, across platforms): ring 2 is never offered', async () => {
    // One ring-1 device on each of two platforms: each platform alone has too few reports to halt.
    const [c1, c2, f] = [await device('canary', 'r3a'), await device('canary', 'r3b'), await device('finance', 'r3a')];
    for (const arch of ['r3a', 'r3b']) await registerRemote(app, admin, { version: '3.2.0', arch });
    expect((await promote({ version: '3.2.0', rollout: { rings: [{ deviceGroupId: canary, soakMinutes: 5 }, { deviceGroupId: finance, soakMinutes: 5 }] } })).status).toBe(200);
    for (const d of [c1, c2]) expect(await offered(d)).toBe('3.2.0');
    expect((await report(c1, '3.2.0', 'failed')).status).toBe(204);
    expect((await rolloutOf('3.2.0')).status).not.toBe('halted');
    expect((await report(c2, '3.2.0', 'rolled_back')).status).toBe(204);

    const rollout = await rolloutOf('3.2.0');
    expect(rollout.status).toBe('halted');
    expect(rollout.rings).toMatchObject([
      { ring: 1, state: 'halted', offered: 2, succeeded: 0, failed: 2 },
      { ring: 2, state: 'waiting', offered: 0 },
    ]);
    const [halt] = await audits('agent.rollout.halt', '3.2.0');
    expect(halt?.details).toMatchObject({ component: 'agent', ring: 1, deviceGroupId: canary, failed: 2, platforms: ['linux/r3a', 'linux/r3b'] });

    // Soaked or not, by the job or by hand: ring 2 stays shut while halted.
    clock.advance(10 * MINUTE);
    expect(await advanceSoakedRings(app.server.keel)).toEqual([]);
    const byHand = await advance();
    expect(byHand.status).toBe(409);
    expect(byHand.body.code).toBe('rollout_halted');
    expect(await offered(f)).toBeNull();
    expect(await decisionOf(f)).toMatchObject({ offer: null, rule: 'halted' });

    // A resume restarts ring 1's soak and its failure count.
    const before = clock.nowMs();
    expect((await app.api('POST', '/agent-versions/rollout/resume', { token: admin, body: { component: 'agent' } })).status).toBe(200);
    const resumed = await rolloutOf('3.2.0');
    expect(resumed.rings).toMatchObject([{ state: 'soaking', failed: 0 }, { state: 'waiting' }]);
    expect(Date.parse(resumed.rings[0].openedAt)).toBeGreaterThanOrEqual(before);
    expect(await advanceSoakedRings(app.server.keel)).toEqual([]);
    expect(await offered(f)).toBeNull();
  });

  it('validation: unique groups, at most 10 rings, soak bounds, a group that exists; only the platform promotes', async () => {
    await registerRemote(app, admin, { version: '3.3.0', arch: 'r4' });
    const ring = (deviceGroupId: string, soakMinutes = 5) => ({ deviceGroupId, soakMinutes });
    const bad: [unknown, string][] = [
      [[ring(canary), ring(canary)], 'rollout.rings.1.deviceGroupId'],
      [Array.from({ length: 11 }, () => ring(canary)), 'rollout.rings'],
      [[ring(canary, 0)], 'rollout.rings.0.soakMinutes'],
      [[ring(canary, 20_161)], 'rollout.rings.0.soakMinutes'],
      [[ring(canary, 1.5)], 'rollout.rings.0.soakMinutes'],
      [[ring('not-a-uuid')], 'rollout.rings.0.deviceGroupId'],
      [[], 'rollout.rings'],
    ];
    for (const [rings, path] of bad) {
      const res = await promote({ version: '3.3.0', rollout: { rings } });
      expect(res.status, JSON.stringify(rings).slice(0, 80)).toBe(400);
      expect(res.body.code).toBe('validation_failed');
      expect(res.body.details.fields.map((f: { path: string }) => f.path)).toContain(path);
    }
    // A device group that does not exist (a deleted one's id): 404, and nothing is promoted.
    const gone = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'Gone' } })).body.id as string;
    expect((await app.api('DELETE', `/device-groups/${gone}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const missing = await promote({ version: '3.3.0', rollout: { rings: [ring(canary), ring(gone)] } });
    expect(missing.status).toBe(404);
    expect((await rolloutOf('3.3.0')) ?? null).toBeNull();
    // A partner's administrator may not promote, with rings naming another partner's (real) group or its own.
    for (const groupId of [elsewhereGroup, canary]) {
      const partner = await promote({ version: '3.3.0', rollout: { rings: [ring(groupId)] } }, w.tokens.partnerFull);
      expect(partner.status).toBe(403);
    }
    expect(await app.server.keel.db.select().from(agentRolloutRings).where(eq(agentRolloutRings.version, '3.3.0'))).toEqual([]);
  });

  it('the platform rings groups of any organisation; a caller sees only its own groups in the status', async () => {
    const [e, c] = [await device('elsewhere', 'r5'), await device('canary', 'r5')];
    await registerRemote(app, admin, { version: '3.4.0', arch: 'r5' });
    expect((await promote({ version: '3.4.0', rollout: { rings: [{ deviceGroupId: elsewhereGroup, soakMinutes: 5 }, { deviceGroupId: canary, soakMinutes: 5 }] } })).status).toBe(200);
    expect(await offered(e)).toBe('3.4.0');
    expect(await offered(c)).toBeNull();
    expect((await rolloutOf('3.4.0')).rings).toMatchObject([
      { ring: 1, deviceGroupId: elsewhereGroup, name: 'Elsewhere-PCs', offered: 1 },
      { ring: 2, deviceGroupId: canary, name: 'Canary-PCs' },
    ]);
    // The organisation's administrator: the other tenant's group and its devices are not told.
    expect((await rolloutOf('3.4.0', w.tokens.orgAdmin)).rings).toMatchObject([
      { ring: 1, deviceGroupId: null, name: null, offered: 0, state: 'soaking' },
      { ring: 2, deviceGroupId: canary, name: 'Canary-PCs', state: 'waiting' },
    ]);
  });

  raceTest('two parallel advances move one ring', async () => {
    // The helper component: apart from the agent rollouts of the other tests.
    await registerRemote(app, admin, { version: '3.5.0', arch: 'r6', component: 'helper' });
    const rings = [canary, finance, elsewhereGroup].map((deviceGroupId) => ({ deviceGroupId, soakMinutes: 600 }));
    expect((await promote({ version: '3.5.0', component: 'helper', rollout: { rings } })).status).toBe(200);
    // Both requests have read the rollout and wait for the promote lock: one moves it, the other is told.
    const answers = await behindLock(app.server.keel.config.DATABASE_URL ?? '', 'select pg_advisory_xact_lock(7345016)', 2, () =>
      Promise.all([advance(admin, 'helper'), advance(admin, 'helper')]),
    );
    const winner = expectOneWinner(answers, 200, [409]);
    expect(winner.body).toEqual({ advanced: [{ component: 'helper', version: '3.5.0', ring: 2 }] });
    expect(answers.find((a) => a.status === 409)?.body.code).toBe('rollout_changed');
    const [row] = await app.server.keel.db.select().from(agentRolloutRings).where(eq(agentRolloutRings.version, '3.5.0'));
    expect(row?.opened).toBe(2);
  });
});
