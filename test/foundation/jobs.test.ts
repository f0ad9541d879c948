import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { openKeel, processRoles } from '../../src/compose.js';
import { clock } from '../../src/platform/clock.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { devices } from '../../src/modules/agents/schema.js';
import { agentsOf } from '../../src/modules/agents/context.js';
import { enroll, enrollmentKey, heartbeat } from '../agents/helpers.js';
import { waitUntil } from '../helpers/wait.js';
import { cliEnv } from '../helpers/cli.js';
import { startWorkerProcess } from '../helpers/topology.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Modules and their jobs (docs/architecture.md "Modules and their jobs"): which process role runs what. */
describe.skipIf(!backendAvailable())(`background jobs per process role (${backend})`, () => {
  let app: TestApp;
  let w: World;
  /** A worker container still open when a test failed half-way. */
  let open: { close(): Promise<void> } | null = null;
  beforeAll(async () => {
    // The API role alone: nothing the worker role does may happen in this process.
    app = await startTestApp({ env: { WORKER: 'off' } });
    w = await createWorld(app);
  });
  afterAll(async () => {
    await open?.close();
    await app?.close();
  });
  afterEach(() => clock.reset());

  const names = (roles: ReturnType<typeof processRoles>) => app.server.keel.modules.jobsFor(roles).map((j) => j.name);

  it('each role runs exactly its jobs: serve (WORKER=inline), serve (WORKER=off), worker', () => {
    expect(names(processRoles('serve', 'inline'))).toEqual(['audit.checkpoint', 'audit.retention', 'audit.security-events', 'webhooks.delivery', 'webhooks.retention', 'webhooks.replay', 'agents.last-seen-flush', 'agents.offline-sweep', 'agents.ring-advance', 'agents.version-counts-rollup', 'domains.recheck', 'scim.reevaluation', 'siem.sender']);
    expect(names(processRoles('serve', 'off'))).toEqual(['agents.last-seen-flush']);
    expect(names(processRoles('worker'))).toEqual(['audit.checkpoint', 'audit.retention', 'audit.security-events', 'webhooks.delivery', 'webhooks.retention', 'webhooks.replay', 'agents.offline-sweep', 'agents.ring-advance', 'agents.version-counts-rollup', 'domains.recheck', 'scim.reevaluation', 'siem.sender']);
    // The server started the jobs of its configuration, not more (mounting routes starts nothing).
    expect(app.server.keel.modules.running().map((j) => j.name)).toEqual(['agents.last-seen-flush']);
    expect(app.server.keel.modules.jobs().map((j) => j.name)).toHaveLength(13);
  });

  it('a module is read from the container, never created on first use', async () => {
    const k = app.server.keel;
    expect(agentsOf(k)).toBe(agentsOf(k));
    // A second container on the same database, with its modules installed, holds its own handles.
    const other = await openKeel({ config: k.config, log: k.log, database: k.database, skipMigrate: true });
    try {
      expect(agentsOf(other)).not.toBe(agentsOf(k));
      expect(() => other.modules.install('agents', { handle: agentsOf(other) })).toThrow(/installed twice/);
    } finally {
      await other.close();
    }
  });

  it('the worker role marks a silent device offline on its own timer, with no HTTP request to it, and writes its buffered stamps when it closes', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    expect((await heartbeat(app, d)).status).toBe(200);
    await agentsOf(app.server.keel).state.flushLastSeen();
    const status = async () => (await app.server.keel.db.select({ status: devices.status }).from(devices).where(eq(devices.id, d.deviceId)))[0]?.status;
    expect(await status()).toBe('online');
    clock.advance(3 * 60_000 + 1000);
    // A `keel worker` process: the container and the jobs of its role, no server, no metrics scrape.
    const k = app.server.keel;
    const worker = await openKeel({ config: k.config, log: k.log, database: k.database, skipMigrate: true });
    open = worker;
    // Only the jobs' intervals are faked: the sweep's 10 s pass without waiting them.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      await worker.modules.start(processRoles('worker'));
      expect(worker.modules.running().map((j) => j.name)).toContain('agents.offline-sweep');
      vi.advanceTimersByTime(10_000);
      expect(await waitUntil('the worker role\'s sweep to mark the device offline', status, (s) => s === 'offline')).toBe('offline');
    } finally {
      await worker.modules.stop({ graceful: false });
      vi.useRealTimers();
    }
    // No flush job runs in a worker, yet a stamp it buffered is written when its container closes.
    const state = agentsOf(worker).state;
    const device = await state.device(sha256Hex(d.deviceToken));
    const at = clock.nowMs();
    state.seen(device!, at);
    await worker.close();
    open = null;
    const [row] = await app.server.keel.db.select({ lastSeenAt: devices.lastSeenAt }).from(devices).where(eq(devices.id, d.deviceId));
    expect(row?.lastSeenAt?.getTime()).toBe(at);
  });

  // A separate `keel worker` needs PostgreSQL (the embedded database is held by one process).
  it.runIf(backend === 'postgres')('a `keel worker` process marks a silent device offline with no request or scrape', async () => {
    const d = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId));
    expect((await heartbeat(app, d)).status).toBe(200);
    await agentsOf(app.server.keel).state.flushLastSeen();
    const status = async () => (await app.server.keel.db.select({ status: devices.status }).from(devices).where(eq(devices.id, d.deviceId)))[0]?.status;
    expect(await status()).toBe('online');
    const c = app.server.keel.config;
    const dir = mkdtempSync(join(tmpdir(), 'keel-jobs-'));
    // The worker's own heartbeat interval: silent for 3 s is offline to it (its clock is its own).
    const worker = await startWorkerProcess(cliEnv(dir, { DATABASE_URL: c.DATABASE_URL ?? '', REDIS_URL: c.REDIS_URL ?? '', AGENT_HEARTBEAT_SECONDS: '1', METRICS_ENABLED: 'false' }));
    try {
      expect(await waitUntil('keel worker to mark the device offline', status, (s) => s === 'offline', { timeoutMs: 60_000, everyMs: 200 })).toBe('offline');
    } finally {
      expect(await worker.stop('SIGTERM')).toBe(0);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
