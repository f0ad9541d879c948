import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { agentsOf } from '../../src/modules/agents/context.js';
import { flushStatement } from '../../src/modules/agents/state.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote } from './helpers.js';

type Fn = (...args: unknown[]) => unknown;

/**
 * The hottest route: a heartbeat that changes nothing costs no statement and no transaction (last
 * seen is batched, the answer's inputs cached). Counted at the driver: every query, transaction and
 * pooled connection taken by the process's database client. The same with METRICS_ENABLED: the
 * heartbeat counter is in memory, devices by status are counted on scrape.
 */
describe.skipIf(!backendAvailable()).each(['false', 'true'])(`heartbeat cost (${backend}, METRICS_ENABLED=%s)`, (metrics) => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    // The staleness pass (every CACHE_MAX_STALENESS_SECONDS on PostgreSQL, run by the invalidation bus,
    // which outlives the modules the counts stop) reads every cache back: the one timer still running
    // during the count. The test that needs the pass runs it by hand. (The stray calls once seen in
    // full runs, 10 per drop, were other test workers' `agents.config` drops heard over a shared Redis
    // channel, before each Redis database had a channel of its own: platform/invalidation.ts.)
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', METRICS_ENABLED: metrics, CACHE_MAX_STALENESS_SECONDS: '3600' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  /** Counts calls into the driver client behind Keel's database handle until `stop` is called. */
  function countDriverCalls(): { count: () => number; stop: () => void } {
    const client = (app.server.keel.db as unknown as { session: { client: Record<string, Fn> } }).session.client;
    let n = 0;
    const originals: [string, Fn][] = [];
    for (const name of ['query', 'connect', 'transaction', 'exec', 'execProtocol']) {
      const original = client[name];
      if (typeof original !== 'function') continue;
      originals.push([name, original]);
      client[name] = function (this: unknown, ...args: unknown[]) {
        n++;
        return original.apply(this, args);
      };
    }
    return { count: () => n, stop: () => originals.forEach(([name, fn]) => (client[name] = fn)) };
  }

  it('200 unchanged heartbeats of 20 devices run no statement; the batched last-seen write is one', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const devices = await Promise.all(Array.from({ length: 20 }, () => enroll(app, key)));
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200); // online: a change, one transaction each
    const state = agentsOf(app.server.keel).state;
    // The process's background jobs (the once-a-second flush itself, the offline sweep, the delivery
    // worker's polls) stop first: on a slow machine they would run statements during the count. The
    // flush is then called by hand.
    await app.server.keel.modules.stop({ graceful: true });
    await state.flushLastSeen();
    const calls = countDriverCalls();
    try {
      for (let round = 0; round < 10; round++) {
        const answers = await Promise.all(devices.map((d) => heartbeat(app, d)));
        for (const a of answers) expect(a.body).toEqual({ nextHeartbeatSeconds: 60, autoUpdate: true, update: null, releaseKeys: null });
      }
      expect(calls.count()).toBe(0);
      const before = calls.count();
      await state.flushLastSeen();
      // One statement (node-postgres's Pool.query takes a connection for it: two calls there).
      expect(calls.count() - before).toBeLessThanOrEqual(backend === 'postgres' ? 2 : 1);
    } finally {
      calls.stop();
    }
  });

  // The staleness bound (CACHE_MAX_STALENESS_SECONDS, every process on PostgreSQL; refreshAll by hand
  // here) used to drop every cached device, and each then cost its next heartbeat a read of its own:
  // at 10,000 devices, 10,000 statements every 30 s. Now one statement reads them all back and only
  // a device whose row changed without a message is read again.
  it.skipIf(metrics === 'true')('the staleness bound reads the cached devices back in one statement; only a device changed without a message is read again', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const devices = await Promise.all(Array.from({ length: 20 }, () => enroll(app, key)));
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200); // online: cached
    const keel = app.server.keel;
    await keel.modules.stop({ graceful: true });
    await agentsOf(keel).state.flushLastSeen();
    for (const a of await Promise.all(devices.map((d) => heartbeat(app, d)))) expect(a.body).toMatchObject({ autoUpdate: true, update: null }); // every cache warm
    // Written behind the caches' back (a process that died before announcing it): one device's
    // auto-update turned off, another decommissioned.
    const [changed, gone] = [devices[0]!, devices[1]!];
    await rawQuery(keel.db, 'update devices set auto_update = false where id = $1', [changed.deviceId]);
    await rawQuery(keel.db, 'update devices set decommissioned_at = now() where id = $1', [gone.deviceId]);
    expect((await heartbeat(app, changed)).body.autoUpdate).toBe(true); // no message: still the cached state
    const calls = countDriverCalls();
    try {
      await keel.invalidation.refreshAll();
      // One statement: two calls at the driver (node-postgres's Pool.query takes a connection for it;
      // PGlite parses a named statement in a call of its own the first time).
      expect(calls.count()).toBeLessThanOrEqual(2);
      const before = calls.count();
      const answers = await Promise.all(devices.map((d) => heartbeat(app, d)));
      expect(answers[0]!.body).toMatchObject({ autoUpdate: false });
      expect(answers[1]!.status).toBe(401);
      for (const a of answers.slice(2)) expect(a.body).toMatchObject({ autoUpdate: true, update: null });
      // The two devices read again, and what the resync dropped for everyone: targets, the platform's
      // builds, the organisation's and partner's settings, the placement pins (one statement each).
      expect(calls.count() - before).toBeLessThanOrEqual((backend === 'postgres' ? 2 : 1) * 7);
    } finally {
      calls.stop();
    }
  });

  it.skipIf(metrics === 'true')('pins at every level cost an unchanged heartbeat nothing; a pin change costs the next heartbeat one read of every placement pin', async () => {
    const admin = w.tokens.orgAdmin;
    const site = (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: admin, body: { name: 'Pinned site' } })).body.id as string;
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: admin, body: { name: 'Pinned group', siteId: site } })).body.id as string;
    const key = await enrollmentKey(app, admin, w.orgId, { deviceGroupId: group });
    const devices = await Promise.all(Array.from({ length: 5 }, () => enroll(app, key)));
    const pin = (path: string, agent: string) => app.api('PUT', `${path}/agent-update-settings`, { token: admin, body: { pinnedVersions: { agent } } });
    expect((await pin(`/sites/${site}`, '1.0.0')).status).toBe(200);
    expect((await pin(`/device-groups/${group}`, '1.0.0')).status).toBe(200);
    expect((await pin(`/devices/${devices[0]!.deviceId}`, '1.0.0')).status).toBe(200);
    expect((await pin(`/orgs/${w.orgId}`, '1.0.0')).status).toBe(200);
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200);
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200); // every cache warm
    const state = agentsOf(app.server.keel).state;
    await state.flushLastSeen();
    const calls = countDriverCalls();
    try {
      for (let round = 0; round < 5; round++) {
        for (const a of await Promise.all(devices.map((d) => heartbeat(app, d)))) expect(a.body.update).toBeNull();
      }
      expect(calls.count()).toBe(0);
      // A pin changed (here, in this process; invalidation.publish reaches the others alike): the next
      // heartbeats read the placement pins once between them.
      state.dropConfig();
      const before = calls.count();
      for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200);
      // targets, the platform's builds, the organisation's and partner's settings, the placement pins: one statement each.
      expect(calls.count() - before).toBeLessThanOrEqual(backend === 'postgres' ? 10 : 5);
    } finally {
      calls.stop();
    }
  });

  it.skipIf(metrics === 'true')('rings cost an unchanged heartbeat nothing, in an open ring, a waiting ring or none; an advance costs the next heartbeats the target read', async () => {
    const admin = await mfaAdmin(app, w);
    // The other organisation: the pins test above pinned this one's agent.
    const made = async (name: string) => (await app.api('POST', `/orgs/${w.otherOrgId}/device-groups`, { token: w.tokens.partnerFull, body: { name } })).body.id as string;
    const [first, second] = [await made('Ring one'), await made('Ring two')];
    const inGroup = async (deviceGroupId?: string) =>
      Promise.all(Array.from({ length: 3 }, async () => enroll(app, await enrollmentKey(app, w.tokens.partnerFull, w.otherOrgId, deviceGroupId ? { deviceGroupId } : {}), { arch: 'ringcost' })));
    const devices = [...(await inGroup(first)), ...(await inGroup(second)), ...(await inGroup())];
    await registerRemote(app, admin, { version: '9.0.0', arch: 'ringcost' });
    const rings = [{ deviceGroupId: first, soakMinutes: 60 }, { deviceGroupId: second, soakMinutes: 60 }];
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '9.0.0', component: 'agent', rollout: { rings } } })).status).toBe(200);
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200);
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200); // offers recorded, every cache warm
    const state = agentsOf(app.server.keel).state;
    await app.server.keel.modules.stop({ graceful: true });
    await state.flushLastSeen();
    const calls = countDriverCalls();
    try {
      for (let round = 0; round < 5; round++) {
        const answers = await Promise.all(devices.map((d) => heartbeat(app, d)));
        expect(answers.map((a) => a.body.update?.version ?? null)).toEqual([...Array(3).fill('9.0.0'), ...Array(6).fill(null)]);
      }
      expect(calls.count()).toBe(0);
    } finally {
      calls.stop();
    }
    // An advance publishes agents.config: the next heartbeats read the targets (with their rings) again, and ring 2 is offered.
    expect((await app.api('POST', '/agent-versions/rollout/advance', { token: admin, body: { component: 'agent' } })).status).toBe(200);
    const answers = await Promise.all(devices.map((d) => heartbeat(app, d)));
    expect(answers.map((a) => a.body.update?.version ?? null)).toEqual([...Array(6).fill('9.0.0'), ...Array(3).fill(null)]);
  });

  // The batched last-seen write changes no indexed column of devices, so PostgreSQL updates each row in
  // place (a HOT update: no index entries written), in the room fillfactor 80 keeps in every page. An
  // index covering last_seen_at (there was one) makes every such update write each index of the table.
  it.skipIf(metrics === 'true')('the flush statement writes rows in place, and no index of devices covers last_seen_at', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const devices = await Promise.all(Array.from({ length: 5 }, () => enroll(app, key)));
    for (const d of devices) expect((await heartbeat(app, d)).status).toBe(200);
    const keel = app.server.keel;
    await agentsOf(keel).state.flushLastSeen();
    // Whether an update fits in its page also depends on the dead versions earlier tests left there (a
    // full page makes even a HOT-eligible update move the row): VACUUM frees them first, so what is
    // measured is the statement and the indexes.
    await rawQuery(keel.db, 'vacuum devices', []);
    const ids = devices.map((d) => d.deviceId);
    const stamp = Date.now() + 60_000;
    // In one transaction, so the transaction's own counters say how each row was updated.
    // The counter may still hold earlier transactions' counts not yet flushed: the difference is this statement's.
    const hotSoFar = async (db: typeof keel.db) =>
      Number((await rawQuery<{ hot: number | string }>(db, `select pg_stat_get_xact_tuples_hot_updated('devices'::regclass) as hot`, []))[0]?.hot);
    const [updated, hot] = await transaction(keel.db, async (tx) => {
      const before = await hotSoFar(tx.db);
      const rows = await rawQuery<{ last_seen_at: unknown }>(tx.db, `${flushStatement.text} returning d.id, d.last_seen_at`, [ids, ids.map(() => stamp)]);
      // Sent as epoch milliseconds, stored to the millisecond.
      for (const r of rows) expect(new Date(r.last_seen_at as string).getTime()).toBe(stamp);
      return [rows.length, (await hotSoFar(tx.db)) - before];
    });
    expect(updated).toBe(5);
    expect(hot).toBe(5);
    const indexes = await rawQuery<{ indexdef: string }>(keel.db, `select indexdef from pg_indexes where tablename = 'devices'`, []);
    expect(indexes.length).toBeGreaterThan(0);
    for (const i of indexes) expect(i.indexdef).not.toMatch(/last_seen_at/);
    const [options] = await rawQuery<{ reloptions: string[] | string | null }>(keel.db, `select reloptions from pg_class where relname = 'devices'`, []);
    expect(String(options?.reloptions)).toContain('fillfactor=80');
  });
});
