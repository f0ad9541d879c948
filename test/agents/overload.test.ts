/**
 * Device requests are shed under overload: past AGENT_MAX_IN_FLIGHT device requests in flight in one
 * process, the next is answered at once with 503 `overloaded` and `Retry-After` (which the reference
 * agent honours), instead of queueing until the agent's own time-out. The requests in flight are held
 * inside their statement by a table lock (PostgreSQL project).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Agent, HeartbeatDeferred } from '../../agent/agent.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { waitUntil } from '../helpers/wait.js';
import { enroll, enrollmentKey, heartbeat } from './helpers.js';

describe.skipIf(!backendAvailable() || backend !== 'postgres')(`device requests under overload (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { AGENT_MAX_IN_FLIGHT: '2', LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  it('sheds the device request past AGENT_MAX_IN_FLIGHT with 503 overloaded and Retry-After; the others finish', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const [a, b, c] = [await enroll(app, key), await enroll(app, key), await enroll(app, key)];
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-overload-'));
    const agent = new Agent({ server: app.url, enrollmentKey: key, stateDir: join(dir, 'state'), binaryPath: join(dir, 'bin'), initialVersion: '1.0.0', hostname: 'ref-overload', os: 'linux', arch: 'amd64' });
    await agent.enroll();
    const lock = new pg.Client({ connectionString: app.server.keel.config.DATABASE_URL });
    await lock.connect();
    try {
      await lock.query('begin');
      // First heartbeats write (the device comes online): they wait here, in flight.
      await lock.query('lock table devices in exclusive mode');
      const held = [heartbeat(app, a), heartbeat(app, b)];
      const waiting = async () => Number((await lock.query("select count(*)::int as n from pg_locks where relation = 'devices'::regclass and not granted")).rows[0].n);
      await waitUntil('both first heartbeats waiting on the devices lock', waiting, (n) => n >= 2);
      expect(await waiting()).toBe(2);
      const shed = await heartbeat(app, c);
      expect(shed.status).toBe(503);
      expect(shed.body).toMatchObject({ code: 'overloaded', retryAfter: 5 });
      expect(shed.headers.get('retry-after')).toBe('5');
      // The reference agent takes it as "wait Retry-After seconds" (its loop adds up to 50% jitter).
      const deferred = await agent.heartbeat().then(() => null, (err: unknown) => err);
      expect(deferred).toBeInstanceOf(HeartbeatDeferred);
      expect((deferred as HeartbeatDeferred).retryAfterSeconds).toBe(5);
      await lock.query('commit');
      for (const res of await Promise.all(held)) expect(res.status).toBe(200);
    } finally {
      await lock.end();
      rmSync(dir, { recursive: true, force: true });
    }
    expect((await heartbeat(app, c)).status).toBe(200);
  });
});
