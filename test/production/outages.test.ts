import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { backend, backendAvailable } from '../helpers/app.js';
import { createPgDatabase, type PgTestDatabase } from '../helpers/backends.js';
import { cliEnv, startServe, type ServeProcess } from '../helpers/cli.js';
import { startOwnPostgres, startOwnRedis, type OwnServer } from '../helpers/servers.js';
import { call, startWorkerProcess, TOPOLOGY_ADMIN, type WorkerProcess } from '../helpers/topology.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';

/**
 * Faults (docs/decisions.md "Many processes and faults"): PostgreSQL restarted and Redis stopped under a running Keel, on servers of the
 * test's own. While PostgreSQL is down, what needs it answers 503 in the envelope (never 500) and
 * Keel comes back by itself; while Redis is down, sign-in, refresh, revocation and deliveries go on
 * (limits per process), and Redis is used again once it is back.
 */
describe.skipIf(backend !== 'postgres' || !backendAvailable())('outages of PostgreSQL and Redis', () => {
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c().catch(() => undefined);
  });

  function env(extra: Record<string, string>): Record<string, string> {
    const dir = mkdtempSync(join(tmpdir(), 'keel-outage-'));
    cleanup.push(() => Promise.resolve(rmSync(dir, { recursive: true, force: true })));
    return cliEnv(dir, { LOG_LEVEL: 'warn', ALLOW_INSECURE_TARGETS: 'true', ADMIN_EMAIL: TOPOLOGY_ADMIN.email, ADMIN_PASSWORD: TOPOLOGY_ADMIN.password, ...extra });
  }

  async function serve(e: Record<string, string>): Promise<ServeProcess> {
    const p = await startServe(e);
    cleanup.push(() => p.stop('SIGKILL'));
    return p;
  }

  async function until(what: string, fn: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > deadline) throw new Error(`never: ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it('PostgreSQL restarted under load: 503 in the envelope while it is down, recovery by itself, nothing committed lost', async () => {
    const pg: OwnServer = await startOwnPostgres();
    cleanup.push(() => pg.close());
    const A = (await serve(env({ DATABASE_URL: pg.url }))).url;
    const admin = (await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).body.accessToken as string;
    const partnerId = (await call(A, 'POST', '/partners', { token: admin, body: { name: 'Outage Partner' } })).body.id as string;
    const names: string[] = [];
    for (let i = 0; i < 5; i++) {
      names.push(`Before outage ${i}`);
      expect((await call(A, 'POST', '/orgs', { token: admin, body: { name: names[i], partnerId } })).status).toBe(201);
    }

    await pg.stop();
    const answers = await Promise.all([
      ...Array.from({ length: 5 }, () => call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })),
      ...Array.from({ length: 5 }, () => call(A, 'GET', '/orgs', { token: admin })),
      call(A, 'POST', '/orgs', { token: admin, body: { name: 'During outage', partnerId } }),
    ]);
    for (const a of answers) {
      if (a.status === 200) continue; // answered from memory (a cached session and profile)
      expect(a.status, JSON.stringify(a.body)).toBe(503);
      expect(a.body).toMatchObject({ code: 'database_unavailable', error: expect.any(String), retryAfter: 5 });
      expect(a.headers.get('retry-after')).toBe('5');
    }
    expect(answers.filter((a) => a.status === 503).length).toBeGreaterThan(0);

    await pg.restart();
    await until('a sign-in after the restart', async () => (await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).status === 200);
    const listed = await call(A, 'GET', '/orgs?limit=100', { token: admin });
    expect(listed.status).toBe(200);
    for (const name of names) expect(listed.body.data.map((o: { name: string }) => o.name)).toContain(name);
    expect((await call(A, 'POST', '/orgs', { token: admin, body: { name: 'After outage', partnerId } })).status).toBe(201);
  }, 240_000);

  it('Redis stopped: sign-in, refresh, revocation across processes and deliveries go on; limits hold per process; Redis is used again when back', async () => {
    const redis: OwnServer = await startOwnRedis();
    cleanup.push(() => redis.close());
    const db: PgTestDatabase = await createPgDatabase();
    cleanup.push(() => db.drop());
    const e = env({ DATABASE_URL: db.url, REDIS_URL: redis.url, WORKER: 'off', LOGIN_LIMIT: '3' });
    const A = (await serve(e)).url;
    const B = (await serve(e)).url;
    const worker: WorkerProcess = await startWorkerProcess(e);
    cleanup.push(() => worker.stop('SIGKILL'));
    const rx: Receiver = await startReceiver();
    cleanup.push(() => rx.close());

    const admin = (await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).body.accessToken as string;
    const partnerId = (await call(A, 'POST', '/partners', { token: admin, body: { name: 'Redis Outage Partner' } })).body.id as string;
    const org = (await call(A, 'POST', '/orgs', { token: admin, body: { name: 'Redis Outage Inc', partnerId } })).body.id as string;
    expect((await call(A, 'POST', '/webhooks', { token: admin, body: { orgId: org, name: 'psa', url: rx.url, events: ['alert.triggered'] } })).status).toBe(201);
    const key = (await call(A, 'POST', '/api-keys', { token: admin, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } })).body.key as string;

    await redis.stop();
    const ready = await fetch(`${A}/health/ready`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { details: { down: string[] } }).details.down).toContain('redis');

    // Sign-in and refresh.
    const session = await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN });
    expect(session.status).toBe(200);
    const refreshed = await call(B, 'POST', '/auth/refresh', { body: { refreshToken: session.body.refreshToken } });
    expect(refreshed.status).toBe(200);
    // A logout on A still reaches B (PostgreSQL NOTIFY stands in for Redis).
    const token = refreshed.body.accessToken as string;
    expect((await call(B, 'GET', '/users/me', { token })).status).toBe(200);
    expect((await call(A, 'POST', '/auth/logout', { token })).status).toBeLessThan(300);
    await until('B refuses the ended session', async () => (await call(B, 'GET', '/users/me', { token })).status === 401, 10_000);
    // Limits still hold, counted by each process alone.
    const wrong = { email: TOPOLOGY_ADMIN.email, password: 'not-the-password-at-all-3' };
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await call(B, 'POST', '/auth/login', { body: wrong })).status);
    expect(statuses).toEqual([401, 401, 401, 429]);
    // Deliveries: the worker finds them without Redis's wake-up hint.
    expect((await call(A, 'POST', '/events', { token: key, body: { orgId: org, type: 'alert.triggered', data: { during: 'outage' } } })).status).toBe(202);
    await rx.waitFor(1, undefined, 60_000);

    await redis.restart();
    expect((await call(A, 'POST', '/events', { token: key, body: { orgId: org, type: 'alert.triggered', data: { after: 'outage' } } })).status).toBe(202);
    await rx.waitFor(2, undefined, 60_000);
    await until('sign-in with Redis back', async () => (await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).status === 200, 30_000);
    await until('ready again', async () => (await fetch(`${A}/health/ready`)).status === 200, 30_000);
  }, 240_000);

  it('Redis down at start: two serve processes and a worker start, degraded as during an outage, and join Redis when it comes', async () => {
    const redis: OwnServer = await startOwnRedis();
    cleanup.push(() => redis.close());
    await redis.stop();
    const db: PgTestDatabase = await createPgDatabase();
    cleanup.push(() => db.drop());
    const e = env({ DATABASE_URL: db.url, REDIS_URL: redis.url, WORKER: 'off' });
    const A = (await serve(e)).url;
    const B = (await serve(e)).url;
    const worker: WorkerProcess = await startWorkerProcess(e);
    cleanup.push(() => worker.stop('SIGKILL'));

    const ready = await fetch(`${A}/health/ready`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { details: { down: string[] } }).details.down).toContain('redis');
    // Sign-in works, and a logout on A reaches B (PostgreSQL NOTIFY stands in for Redis).
    const token = (await call(A, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).body.accessToken as string;
    expect((await call(B, 'GET', '/users/me', { token })).status).toBe(200);
    expect((await call(A, 'POST', '/auth/logout', { token })).status).toBeLessThan(300);
    await until('B refuses the ended session', async () => (await call(B, 'GET', '/users/me', { token })).status === 401, 10_000);

    await redis.restart();
    await until('A ready with Redis', async () => (await fetch(`${A}/health/ready`)).status === 200, 30_000);
    await until('B ready with Redis', async () => (await fetch(`${B}/health/ready`)).status === 200, 30_000);
    const again = (await call(B, 'POST', '/auth/login', { body: TOPOLOGY_ADMIN })).body.accessToken as string;
    expect((await call(A, 'GET', '/users/me', { token: again })).status).toBe(200);
    expect((await call(B, 'POST', '/auth/logout', { token: again })).status).toBeLessThan(300);
    await until('A refuses the session ended on B', async () => (await call(A, 'GET', '/users/me', { token: again })).status === 401, 10_000);
  }, 240_000);
});

