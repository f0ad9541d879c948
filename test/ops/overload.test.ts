/**
 * Overload: the password-hashing queue is bounded (HASH_QUEUE_MAX); a login beyond it is
 * refused at once with 503 `overloaded`, `Retry-After` and `retryAfter`, never queued; authenticated
 * reads never touch the pool. Deterministic, not timed: every hashing thread is held by a job that
 * does not end until the test releases it (`holdHashWorkers`), so the queue admits exactly
 * HASH_QUEUE_MAX − threads logins and refuses the rest.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login, type TestUser } from '../helpers/fixtures.js';
import { waitUntil } from '../helpers/wait.js';
import { HASH_THREADS, hashQueueDepth, holdHashWorkers } from '../../src/platform/argon2-pool.js';

const QUEUE_MAX = HASH_THREADS + 2;
const FLOOD = 20;

describe.skipIf(!backendAvailable())(`overload: the bounded hash queue (${backend})`, () => {
  let app: TestApp;
  let flood: TestUser[];
  let reader: { accessToken: string };

  beforeAll(async () => {
    app = await startTestApp({ env: { HASH_QUEUE_MAX: String(QUEUE_MAX), LOGIN_LIMIT: '1000', LOGIN_IP_LIMIT: '100000', LOCKOUT_THRESHOLD: '3', ENABLE_REGISTRATION: 'true', REGISTER_LIMIT: '1000' } });
    flood = [];
    // One at a time: the arrangement itself must stay under the small bound.
    for (let i = 0; i < FLOOD; i++) flood.push(await createUser(app));
    reader = await login(app, await createUser(app));
  }, 60_000);
  afterAll(async () => app?.close());

  it('refuses logins beyond the bound at once with 503 overloaded and Retry-After; reads answer meanwhile; the admitted ones finish', async () => {
    const hold = holdHashWorkers();
    let released = false;
    try {
      expect(hashQueueDepth()).toBe(HASH_THREADS);
      const pending = flood.map((u) => app.api('POST', '/auth/login', { body: { email: u.email, password: u.password } }));
      // The refused ones answer while every thread is still held: they were never queued.
      const refusedCount = FLOOD - (QUEUE_MAX - HASH_THREADS);
      const settled: { status: number; body: any; headers: Headers }[] = [];
      for (const p of pending) void p.then((r) => settled.push(r));
      await waitUntil(`the ${refusedCount} refused logins to answer while the threads are held`, () => settled.length, (n) => n >= refusedCount, { everyMs: 10 });
      expect(settled).toHaveLength(refusedCount);
      for (const r of settled) {
        expect(r.status).toBe(503);
        expect(r.body).toEqual({ error: expect.any(String), code: 'overloaded', retryAfter: 1 });
        expect(r.headers.get('retry-after')).toBe('1');
      }
      expect(hashQueueDepth()).toBe(QUEUE_MAX);

      // An authenticated read during the flood: no hash, no wait.
      const me = await app.api('GET', '/users/me', { token: reader.accessToken });
      expect(me.status).toBe(200);

      // A registration and a password change are refused the same way while the queue is full.
      const reg = await app.api('POST', '/auth/register', { body: { email: 'flood-reg@example.com', password: 'correct-horse-battery-staple-99', name: 'Flood' } });
      expect(reg.status).toBe(503);
      expect(reg.body.code).toBe('overloaded');

      await hold.release();
      released = true;
      const all = await Promise.all(pending);
      const statuses = all.map((r) => r.status).sort();
      expect(statuses.filter((s) => s === 200)).toHaveLength(QUEUE_MAX - HASH_THREADS);
      expect(statuses.filter((s) => s === 503)).toHaveLength(refusedCount);
      expect(hashQueueDepth()).toBe(0);
    } finally {
      if (!released) await hold.release();
    }

    // A refusal is not a wrong password: every refused account signs in now (3 refusals would have locked it).
    for (const u of flood.slice(0, 5)) expect((await app.api('POST', '/auth/login', { body: { email: u.email, password: u.password } })).status).toBe(200);
  }, 60_000);
});

describe.skipIf(!backendAvailable())(`overload: a refusal spends nothing (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { HASH_QUEUE_MAX: String(HASH_THREADS), LOGIN_LIMIT: '3', LOCKOUT_THRESHOLD: '2' } });
  }, 60_000);
  afterAll(async () => app?.close());

  it('a login refused for a full queue spends no rate-limit point and no lockout count', async () => {
    const user = await createUser(app);
    const hold = holdHashWorkers();
    try {
      for (let i = 0; i < 5; i++) {
        const r = await app.api('POST', '/auth/login', { body: { email: user.email, password: 'a wrong password, refused before it is checked' } });
        expect(r.status).toBe(503);
        expect(r.body.code).toBe('overloaded');
      }
    } finally {
      await hold.release();
    }
    // 5 refusals: over LOGIN_LIMIT (3) and LOCKOUT_THRESHOLD (2) had they counted.
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(200);
  }, 60_000);

  it.skipIf(backend !== 'postgres')('a login that finds the queue full only at its verify gives back its rate-limit point and lockout reservation', async () => {
    const user = await createUser(app);
    /** One login held at its lockout reservation (a row lock) while the queue fills; then let go. */
    async function refusedAtVerify(): Promise<void> {
      const admin = new pg.Client({ connectionString: app.server.keel.config.DATABASE_URL });
      await admin.connect();
      let hold: { release: () => Promise<void> } | undefined;
      try {
        await admin.query('begin');
        await admin.query('select id from users where id = $1 for update', [user.id]);
        const login = app.api('POST', '/auth/login', { body: { email: user.email, password: 'a wrong password, refused at the verify' } });
        const waiting = await waitUntil(
          "the login's connection waiting on the user row's lock",
          async () => {
            const { rows } = await admin.query<{ n: number }>(
              // The login's connection, waiting for the row lock (its reported query text can lag behind).
              "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database() and pid <> pg_backend_pid()",
            );
            return rows[0]?.n ?? 0;
          },
          (n) => n > 0,
          { everyMs: 25 },
        );
        expect(waiting).toBe(1);
        hold = holdHashWorkers();
        await admin.query('commit');
        const refused = await login;
        expect(refused.status).toBe(503);
        expect(refused.body.code).toBe('overloaded');
      } finally {
        await hold?.release();
        await admin.end();
      }
      const [row] = await app.server.keel.database.query<{ failed_login_count: number }>('select failed_login_count from users where id = $1', [user.id]);
      expect(Number(row?.failed_login_count)).toBe(0);
    }
    // Three: LOGIN_LIMIT, had they been spent; each also over LOCKOUT_THRESHOLD (2) had it counted.
    for (let i = 0; i < 3; i++) await refusedAtVerify();
    expect((await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(200);
  }, 60_000);
});
