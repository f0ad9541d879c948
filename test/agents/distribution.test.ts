/**
 * The fleet picture at scale (docs/decisions.md "Agent distribution at scale"): the distribution is
 * read from `device_version_counts`, which triggers keep in the transaction of every write to a
 * device; `GET /devices?behind=` lists, per reason, exactly the devices the distribution counts.
 * The counts are checked against a direct count of `devices` after each kind of write, and under
 * concurrent writers (postgres).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { createTenant, login } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { rowsOf } from '../../src/platform/db/client.js';
import { rollupVersionCounts } from '../../src/modules/agents/distribution.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, runSweep, type Enrolled } from './helpers.js';
import { clock } from '../../src/platform/clock.js';

describe.skipIf(!backendAvailable())(`agent distribution at scale (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let elsewhereAdmin: string;
  let elsewhereOrg: string;

  /** The counts table summed per key, and the same keys counted directly on `devices`: equal when the triggers kept up. */
  const counts = async () => {
    const db = app.server.keel.db;
    const key = (cols: string) => `jsonb_build_array(${cols})::text`;
    const kept = rowsOf<{ key: string; n: string | number }>(
      await db.execute(sql.raw(`select ${key('org_id, site_id, device_group_id, os, arch, auto_update, status, agent, helper, watchdog')} as key, sum(n) as n
        from device_version_counts group by 1 having sum(n) <> 0 order by 1`)),
    ).map((r) => [r.key, Number(r.n)]);
    const direct = rowsOf<{ key: string; n: string | number }>(
      await db.execute(sql.raw(`select ${key("org_id, site_id, device_group_id, os, arch, auto_update, status, components->>'agent', components->>'helper', components->>'watchdog'")} as key, count(*) as n
        from devices where decommissioned_at is null group by 1 order by 1`)),
    ).map((r) => [r.key, Number(r.n)]);
    return { kept, direct };
  };
  const expectCountsKept = async () => {
    const { kept, direct } = await counts();
    expect(kept).toEqual(direct);
  };

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    for (const version of ['1.1.0', '2.0.0']) await registerRemote(app, admin, { version });
    await registerRemote(app, admin, { version: '2.0.0', component: 'helper' });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '2.0.0' } })).status).toBe(200);
    const elsewhere = await createTenant(app);
    elsewhereOrg = elsewhere.orgId;
    elsewhereAdmin = (await login(app, elsewhere.orgAdmin)).accessToken;
    const theirs = await enroll(app, await enrollmentKey(app, elsewhereAdmin, elsewhere.orgId)); // behind by the rollout, in another partner
    expect((await heartbeat(app, theirs)).status).toBe(200);
  });
  afterAll(async () => app?.close());

  it('the devices GET /devices?behind= lists per reason are exactly the ones the distribution counts, over a seeded fleet', async () => {
    const partner = w.tokens.partnerFull;
    const org = w.otherOrgId;
    const group = (await app.api('POST', `/orgs/${org}/device-groups`, { token: partner, body: { name: 'Held' } })).body.id as string;
    const key = await enrollmentKey(app, partner, org);
    const many = async (n: number, extra: Record<string, unknown> = {}) => Promise.all(Array.from({ length: n }, () => enroll(app, key, extra)));
    const online = async (ds: Enrolled[], components: Record<string, string> = { agent: '1.0.0' }) => {
      for (const d of ds) expect((await heartbeat(app, d, { components })).status).toBe(200);
    };
    const rolling = await many(3);
    await online(rolling);
    const offline = await many(2); // never heartbeat
    const autoOff = await many(2);
    await online(autoOff);
    for (const d of autoOff) expect((await app.api('POST', `/devices/${d.deviceId}/auto-update`, { token: partner, body: { enabled: false } })).status).toBe(200);
    const arm = await many(2, { arch: 'arm64' });
    await online(arm);
    const current = await many(2, { agentVersion: '2.0.0' });
    await online(current, { agent: '2.0.0' });
    // Pinned: two by their group, one by a pin of its own (decided alone, out of its group of the rollout).
    const held = await Promise.all(Array.from({ length: 2 }, async () => enroll(app, await enrollmentKey(app, partner, org, { deviceGroupId: group }))));
    await online(held);
    expect((await app.api('PUT', `/device-groups/${group}/agent-update-settings`, { token: partner, body: { pinnedVersions: { agent: '1.1.0' } } })).status).toBe(200);
    const devicePinned = (await many(1))[0] as Enrolled;
    await online([devicePinned]);
    expect((await app.api('PUT', `/devices/${devicePinned.deviceId}/agent-update-settings`, { token: partner, body: { pinnedVersions: { agent: '1.0.0' } } })).status).toBe(200);
    // Rolled back: offered 2.0.0, reported rolled_back (blocked), decided alone.
    const rolledBack = (await many(1))[0] as Enrolled;
    expect((await heartbeat(app, rolledBack)).body.update?.version).toBe('2.0.0');
    expect((await app.api('POST', '/agents/update-report', { token: rolledBack.deviceToken, body: { component: 'agent', toVersion: '2.0.0', state: 'rolled_back', error: 'self-check failed' } })).status).toBe(204);
    // Behind on the helper only (agent up to date): counted for the helper.
    const helperBehind = (await many(1, { agentVersion: '2.0.0' }))[0] as Enrolled;
    await online([helperBehind], { agent: '2.0.0', helper: '1.0.0' });

    const dist = await app.api('GET', `/agent-versions/distribution?orgId=${org}`, { token: partner });
    expect(dist.status).toBe(200);
    expect(dist.body.behind).toEqual([
      { reason: 'auto_update_off', devices: 2 },
      { reason: 'pinned', devices: 3 },
      { reason: 'no_build', devices: 2 },
      { reason: 'rolled_back', devices: 1 },
      { reason: 'offline', devices: 2 },
      { reason: 'rollout', devices: 4 },
    ]);
    const listed = async (query: string, token = partner) => {
      const res = await app.api('GET', `/devices?orgId=${org}&limit=100&${query}`, { token });
      expect(res.status, query).toBe(200);
      return { ids: (res.body.data as { id: string }[]).map((d) => d.id).sort(), total: res.body.pagination.total as number };
    };
    const sorted = (ds: Enrolled[]) => ds.map((d) => d.deviceId).sort();
    const expected: Record<string, Enrolled[]> = {
      auto_update_off: autoOff, pinned: [...held, devicePinned], no_build: arm, rolled_back: [rolledBack], offline, rollout: [...rolling, helperBehind],
    };
    for (const { reason, devices } of dist.body.behind as { reason: string; devices: number }[]) {
      const l = await listed(`behind=${reason}`);
      expect(l.total, reason).toBe(devices);
      expect(l.ids, reason).toEqual(sorted(expected[reason] ?? []));
    }
    for (const reason of ['halted', 'updating', 'outside_window']) expect((await listed(`behind=${reason}`)).total, reason).toBe(0);
    // With a component: that component's reason (the helper device is behind on the helper only).
    expect((await listed('behind=rollout&component=helper')).ids).toEqual([helperBehind.deviceId]);
    expect((await listed('behind=rollout&component=agent')).ids).toEqual(sorted(rolling));
    // Paginated like the list, combined with the other filters.
    const page2 = await app.api('GET', `/devices?orgId=${org}&behind=rollout&limit=3&page=2`, { token: partner });
    expect(page2.body.pagination.total).toBe(4);
    expect(page2.body.data).toHaveLength(1);
    expect((await listed(`behind=pinned&deviceGroupId=${group}`)).ids).toEqual(sorted(held));
    // A bad reason is a 400 with the envelope.
    const bad = await app.api('GET', '/devices?behind=lazy', { token: partner });
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBeDefined();
    // `component` only narrows `behind`: alone it is refused in words, never silently ignored.
    const alone = await app.api('GET', `/devices?orgId=${org}&component=helper`, { token: partner });
    expect(alone.status).toBe(400);
    expect(alone.body.code).toBe('validation_failed');
    expect(JSON.stringify(alone.body.details)).toContain('component');
    await expectCountsKept();
  });

  it('another partner’s organisation is refused, and its devices never listed, with behind', async () => {
    const refused = await app.api('GET', `/devices?orgId=${elsewhereOrg}&behind=rollout`, { token: w.tokens.partnerFull });
    expect(refused.status).toBe(404);
    const mine = await app.api('GET', '/devices?behind=rollout&limit=100', { token: elsewhereAdmin });
    expect(mine.status).toBe(200);
    expect(mine.body.pagination.total).toBe(1);
    const ours = await app.api('GET', '/devices?behind=rollout&limit=100', { token: w.tokens.partnerFull });
    expect((ours.body.data as { orgId: string }[]).every((d) => d.orgId !== elsewhereOrg)).toBe(true);
  });

  it('the counts follow every kind of write: versions, status, moves, a deleted site, decommissioning; the rollup keeps the sums', async () => {
    const orgAdmin = w.tokens.orgAdmin;
    const site = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: orgAdmin, body: { name: 'Doomed' } })).body.id as string;
    const other = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: orgAdmin, body: { name: 'Other' } })).body.id as string;
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: orgAdmin, body: { name: 'Moving', siteId: site } })).body.id as string;
    const inGroup = await enroll(app, await enrollmentKey(app, orgAdmin, w.orgId, { deviceGroupId: group }));
    const inSite = await enroll(app, await enrollmentKey(app, orgAdmin, w.orgId, { siteId: site }));
    await expectCountsKept();
    expect((await heartbeat(app, inGroup, { components: { agent: '1.0.0', helper: '1.0.0' } })).status).toBe(200);
    expect((await heartbeat(app, inSite)).status).toBe(200);
    await expectCountsKept();
    expect((await app.api('PATCH', `/device-groups/${group}`, { token: orgAdmin, body: { siteId: other } })).status).toBe(200);
    await expectCountsKept();
    expect((await app.api('DELETE', `/sites/${site}`, { token: orgAdmin })).status).toBe(204);
    await expectCountsKept();
    // Silent for three intervals: the sweep's write moves it to offline.
    clock.advance(4 * 60_000);
    try {
      await runSweep(app);
    } finally {
      clock.reset();
    }
    await expectCountsKept();
    expect((await app.api('DELETE', `/devices/${inSite.deviceId}`, { token: orgAdmin })).status).toBe(204);
    await expectCountsKept();
    const before = (await counts()).kept;
    await rollupVersionCounts(app.server.keel.db);
    const rows = rowsOf<{ n: string | number; unfolded: string | number }>(
      await app.server.keel.db.execute(sql`select count(*) as n, count(*) filter (where not folded) as unfolded from device_version_counts`),
    )[0];
    expect(Number(rows?.unfolded)).toBe(0);
    expect(Number(rows?.n)).toBe(before.length);
    await expectCountsKept();
  });

  raceTest('concurrent enrolments, version changes, moves and rollups leave the counts equal to the devices', async () => {
    const orgAdmin = w.tokens.orgAdmin;
    const key = await enrollmentKey(app, orgAdmin, w.orgId);
    const ds = await Promise.all(Array.from({ length: 6 }, () => enroll(app, key)));
    for (const d of ds) expect((await heartbeat(app, d)).status).toBe(200);
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: orgAdmin, body: { name: 'Raced counts' } })).body.id as string;
    const groupKey = await enrollmentKey(app, orgAdmin, w.orgId, { deviceGroupId: group });
    const site = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: orgAdmin, body: { name: 'Raced site' } })).body.id as string;
    const answers = await together(16, async (i) => {
      if (i < 6) return (await heartbeat(app, ds[i] as Enrolled, { components: { agent: '2.0.0' } })).status;
      if (i < 11) return (await app.api('POST', '/agents/enroll', { body: { enrollmentKey: groupKey, hostname: `raced-${i}`, os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } })).status;
      if (i === 11) return (await app.api('PATCH', `/device-groups/${group}`, { token: orgAdmin, body: { siteId: site } })).status;
      if (i === 12) return (await app.api('POST', `/devices/${(ds[0] as Enrolled).deviceId}/auto-update`, { token: orgAdmin, body: { enabled: false } })).status;
      await rollupVersionCounts(app.server.keel.db);
      return 0;
    });
    expect(answers.filter((s) => s >= 400)).toEqual([]);
    await expectCountsKept();
    await rollupVersionCounts(app.server.keel.db);
    await expectCountsKept();
  });
});
