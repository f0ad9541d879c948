/**
 * A graceful stop loses no revocation: a process that is stopping waits for its handlers (not only
 * for their sockets) before it closes Redis and the pool, so a logout whose client left and whose
 * statement commits during the stop is still announced to the other processes. Two Keel processes on
 * one PostgreSQL and Redis; the logouts are held inside their statement by a table lock, their
 * clients leave, the first process is told to stop, and only then is the lock released.
 */
import { connect } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { closeSecond, startSecondProcess } from '../agents/helpers.js';
import { waitUntil } from '../helpers/wait.js';
import type { RunningServer } from '../../src/server.js';

describe.skipIf(!backendAvailable() || backend !== 'postgres')(`graceful stop (${backend})`, () => {
  let app: TestApp;
  let stopping: RunningServer | undefined;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    stopping = await startSecondProcess(app);
  });
  afterAll(async () => {
    await closeSecond(stopping);
    await app?.close();
  });

  it('logouts whose clients left and which commit while their process stops are refused at once on the other process', async () => {
    // As many as the stopping process has pool connections (4), so each logout waits inside its statement.
    const users = await Promise.all(Array.from({ length: 4 }, () => createUser(app)));
    const tokens = await Promise.all(users.map(async (u) => (await login(app, u)).accessToken));
    // Each session is cached by the process that stays.
    for (const token of tokens) expect((await app.api('GET', '/users/me', { token })).status).toBe(200);

    const lock = new pg.Client({ connectionString: app.server.keel.config.DATABASE_URL });
    await lock.connect();
    try {
      await lock.query('begin');
      await lock.query('lock table sessions in share row exclusive mode');
      const server = stopping!;
      // The logouts reach the process that will stop, and wait on the lock inside their statement.
      const sockets = tokens.map((token) => {
        const socket = connect(server.port, '127.0.0.1');
        socket.on('error', () => undefined);
        socket.write(`POST /api/v1/auth/logout HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nX-Forwarded-For: ${app.ip}\r\nContent-Length: 0\r\n\r\n`);
        return socket;
      });
      const waiting = async () => Number((await lock.query("select count(*)::int as n from pg_locks where relation = 'sessions'::regclass and not granted")).rows[0].n);
      await waitUntil(`${tokens.length} logouts waiting on the sessions lock`, waiting, (n) => n >= tokens.length);
      expect(await waiting()).toBe(tokens.length);
      // The clients leave but one, and the process is told to stop.
      const [stays, ...leave] = sockets;
      for (const socket of leave) socket.destroy();
      let answer = '';
      stays!.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
      const answered = new Promise((resolve) => stays!.once('end', resolve));
      // As `keel serve` stops: drain, then close Redis and the pool.
      let drained = false;
      const stopped = server.drain().then(() => {
        drained = true;
        return closeSecond(server);
      });
      // Its sockets are gone, but its handlers still wait on the lock: the stop waits for them (it used
      // to go on at once and close Redis and the pool under them). A bound, since nothing happens here.
      for (let i = 0; i < 25 && !drained; i++) await new Promise((r) => setTimeout(r, 20));
      expect(await waiting()).toBe(tokens.length);
      expect(drained).toBe(false);
      await lock.query('commit');
      await stopped;
      // The answer sent while draining tells the keep-alive client not to send another request on it.
      await answered;
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
      expect(answer.toLowerCase()).toContain('\r\nconnection: close\r\n');
    } finally {
      await lock.end();
    }
    stopping = undefined;
    // Every revoked session is refused by the process that stays, at once.
    for (const token of tokens) expect((await app.api('GET', '/users/me', { token })).status).toBe(401);
  });

  it('right-password sign-ins in flight when their process stops finish there: none is left counted towards the lockout', async () => {
    const second = await startSecondProcess(app);
    const users = await Promise.all(Array.from({ length: 4 }, () => createUser(app)));
    const counts = async () =>
      (await app.server.keel.database.query<{ n: unknown }>('select failed_login_count as n from users where id = any($1) order by id', [users.map((u) => u.id)])).map((r) => Number(r.n));
    const lock = new pg.Client({ connectionString: app.server.keel.config.DATABASE_URL });
    await lock.connect();
    try {
      // The sign-in policy reads verified domains after the password check and before the session:
      // with that table locked, each sign-in waits there holding its lockout reservation.
      await lock.query('begin');
      await lock.query('lock table verified_domains in access exclusive mode');
      const sockets = users.map((u) => {
        const body = JSON.stringify({ email: u.email, password: u.password });
        const socket = connect(second.port, '127.0.0.1');
        socket.on('error', () => undefined);
        socket.write(`POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Forwarded-For: ${app.ip}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
        return socket;
      });
      const waiting = async () => Number((await lock.query("select count(*)::int as n from pg_locks where relation = 'verified_domains'::regclass and not granted")).rows[0].n);
      // The users share an email domain, so their sign-ins share one load of the domain lookup
      // (platform/cache.ts: misses in flight share a load): one statement waits on the lock, and every
      // sign-in waits on it, each holding a reservation (a failure counted until the sign-in completes
      // or gives it back).
      const held = async () => ({ waiting: await waiting(), counts: await counts() });
      await waitUntil(`${users.length} sign-ins holding a reservation, their domain lookup waiting on the verified_domains lock`, held, (h) => h.waiting >= 1 && h.counts.every((n) => n === 1));
      // The clients leave and the process is told to stop; then the lock goes.
      for (const socket of sockets) socket.destroy();
      const stopped = second.drain().then(() => closeSecond(second));
      for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 20));
      await lock.query('commit');
      await stopped;
    } finally {
      await lock.end().catch(() => undefined);
    }
    // The stop waited for the sign-ins, which completed (clearing the count) before the pool closed.
    expect(await counts()).toEqual(users.map(() => 0));
  });

  it('a revocation committed but never announced (its process died first) is honoured within CACHE_MAX_STALENESS_SECONDS', async () => {
    // Two processes that cached the session: one whose bound is a second, one whose bound is an hour
    // (so what it answers after the revocation does not depend on when its timer last ran).
    const bounded = await startSecondProcess(app, { CACHE_MAX_STALENESS_SECONDS: '1' });
    const unbounded = await startSecondProcess(app, { CACHE_MAX_STALENESS_SECONDS: '3600' });
    try {
      const user = await createUser(app);
      const { accessToken } = await login(app, user);
      const via = (p: RunningServer) => async () =>
        (await fetch(`${p.url}/api/v1/users/me`, { headers: { authorization: `Bearer ${accessToken}`, 'x-forwarded-for': app.ip } })).status;
      expect(await via(bounded)()).toBe(200);
      expect(await via(unbounded)()).toBe(200);
      // Revoked in the database by "a process" that never told anyone.
      const db = new pg.Client({ connectionString: app.server.keel.config.DATABASE_URL });
      await db.connect();
      try {
        await db.query('update sessions set revoked_at = now() where user_id = $1', [user.id]);
      } finally {
        await db.end();
      }
      expect(await via(unbounded)()).toBe(200); // its cache still holds the session: no message came
      const status = await waitUntil('the bounded cache to let the revoked session go (401)', via(bounded), (s) => s !== 200, { everyMs: 50 });
      expect(status).toBe(401);
    } finally {
      await closeSecond(unbounded);
      await closeSecond(bounded);
    }
  });
});
