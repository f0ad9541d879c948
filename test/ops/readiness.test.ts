/**
 * GET /health/ready: 200 when the database answers and, with REDIS_URL, Redis answers a
 * PING; 503 in the error envelope naming what is down; back to 200 by itself when it returns.
 * `/health` stays the liveness check. Redis is stopped for real: a redis-server of this test's own on
 * a free port (the shared test Redis serves other files in parallel), killed and started again. The
 * database is taken away on PostgreSQL by refusing connections to the test's own database.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type ApiResponse, type TestApp } from '../helpers/app.js';
import { pgAdminUrl } from '../helpers/backends.js';
import { startOwnRedis, type OwnServer } from '../helpers/servers.js';
import { findBinaries } from '../setup/real-backends.js';

const redisServer = 'binaries' in findBinaries();

/** Asks until `done` holds (a bounded number of times, paced; no assertion on how long it took). */
async function until(ask: () => Promise<ApiResponse>, done: (r: ApiResponse) => boolean, tries = 400): Promise<ApiResponse> {
  let last = await ask();
  for (let i = 0; i < tries && !done(last); i++) {
    await new Promise((r) => setTimeout(r, 25));
    last = await ask();
  }
  return last;
}

describe.skipIf(!backendAvailable())(`readiness (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  }, 60_000);
  afterAll(async () => app?.close());

  it('is 200 with every dependency up; /health stays liveness and version', async () => {
    const ready = await app.request('GET', '/health/ready');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({
      status: 'ready',
      checks: {
        database: { status: 'up', kind: backend, ms: expect.any(Number) },
        ...(backend === 'postgres' ? { redis: { status: 'up', ms: expect.any(Number) } } : {}),
      },
    });
    const live = await app.request('GET', '/health');
    expect(live.status).toBe(200);
    expect(live.body).toMatchObject({ status: 'ok', version: expect.any(String) });
    const doc = await app.api('GET', '/openapi.json');
    expect(Object.keys(doc.body.paths as object)).toContain('/health/ready');
  });

  it.skipIf(backend !== 'postgres')('is 503 naming the database while its connections are refused, and recovers by itself', async () => {
    const name = new URL(app.server.keel.config.DATABASE_URL ?? '').pathname.slice(1);
    const admin = new pg.Client({ connectionString: pgAdminUrl() });
    await admin.connect();
    try {
      await admin.query(`alter database "${name}" allow_connections false`);
      await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [name]);
      const down = await until(() => app.request('GET', '/health/ready'), (r) => r.status === 503);
      expect(down.status).toBe(503);
      expect(down.body).toMatchObject({ error: expect.stringContaining('database'), code: 'not_ready', details: { down: ['database'], checks: { database: { status: 'down' }, redis: { status: 'up' } } } });
      expect(Object.keys(down.body as object).sort()).toEqual(['code', 'details', 'error']);
    } finally {
      await admin.query(`alter database "${name}" allow_connections true`);
      await admin.end();
    }
    const back = await until(() => app.request('GET', '/health/ready'), (r) => r.status === 200);
    expect(back.status).toBe(200);
  }, 60_000);
});

describe.skipIf(!backendAvailable() || !redisServer)(`readiness with Redis stopped (${backend})`, () => {
  let app: TestApp;
  let redis: OwnServer;

  beforeAll(async () => {
    redis = await startOwnRedis();
    app = await startTestApp({ env: { REDIS_URL: redis.url } });
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await redis?.close();
  });

  it('is 503 naming redis while it is down, and 200 again once it is back', async () => {
    expect((await app.request('GET', '/health/ready')).status).toBe(200);
    await redis.stop();
    const down = await until(() => app.request('GET', '/health/ready'), (r) => r.status === 503);
    expect(down.status).toBe(503);
    expect(down.body).toEqual({
      error: 'Not ready: redis is down',
      code: 'not_ready',
      details: { down: ['redis'], checks: { database: { status: 'up', kind: backend, ms: expect.any(Number) }, redis: { status: 'down', ms: expect.any(Number) } } },
    });
    // Liveness does not depend on Redis.
    expect((await app.request('GET', '/health')).status).toBe(200);

    await redis.restart();
    const back = await until(() => app.request('GET', '/health/ready'), (r) => r.status === 200);
    expect(back.status).toBe(200);
    expect(back.body.checks.redis.status).toBe('up');
  }, 60_000);
});
