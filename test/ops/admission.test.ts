/**
 * Refusing a flood cheaply (platform/http/admission.ts, platform/http/refusal-log.ts): while the hash
 * queue is full, a login is refused from its method and path before anything reads its body (a body
 * over the size limit, of another type or not JSON at all still gets 503 `overloaded`, never 413, 415
 * or 400), and the refusals of one source in one second make ONE log line with their count, not an
 * access line each. Deterministic: every hashing thread is held (`holdHashWorkers`) with
 * HASH_QUEUE_MAX equal to the threads, so every hashing request is refused; the second of the log
 * line is the controllable clock's.
 */
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { waitUntil } from '../helpers/wait.js';
import { HASH_THREADS, holdHashWorkers } from '../../src/platform/argon2-pool.js';
import { clock } from '../../src/platform/clock.js';

const BODY_LIMIT = 4096;

interface Line {
  level: number;
  msg: string;
  source?: string;
  second?: string;
  refused?: number;
  status?: number;
  code?: string;
  routes?: Record<string, number>;
  path?: string;
}

/** Sends `head` (request line and headers) and `body` on a raw connection; resolves with the status line and the whole answer. */
function rawRequest(port: number, head: string, body = ''): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      text += d;
      // One answer is enough: its headers and its Content-Length of body.
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && text.length >= end + 4 + Number(length)) {
        socket.destroy();
        resolve({ status: Number(text.slice(9, 12)), text });
      }
    });
    socket.on('error', reject);
    socket.write(head + body);
  });
}

describe.skipIf(!backendAvailable())(`admission before the request is read (${backend})`, () => {
  let app: TestApp;
  const lines: Line[] = [];
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Line);
        done();
      },
    }),
  );
  let reader: { accessToken: string };
  let hold: { release: () => Promise<void> } | null = null;

  beforeAll(async () => {
    // Every refusal answered at once (REFUSAL_HOLD_AFTER=0): these tests count refusals; their pacing has a test of its own below.
    app = await startTestApp({ log, env: { HASH_QUEUE_MAX: String(HASH_THREADS), BODY_LIMIT_BYTES: String(BODY_LIMIT), LOGIN_IP_LIMIT: '100000', LOGIN_LIMIT: '1000', REFUSAL_HOLD_AFTER: '0' } });
    reader = await login(app, await createUser(app));
  }, 60_000);
  afterEach(async () => {
    clock.reset();
    await hold?.release();
    hold = null;
  });
  afterAll(async () => app?.close());

  it('refuses a login with a body over the limit, of another type or not JSON with 503 overloaded, never 413, 415 or 400', async () => {
    hold = holdHashWorkers();
    const port = app.server.port;
    // Declared far over BODY_LIMIT_BYTES and never sent: the answer comes without waiting for it.
    const huge = await rawRequest(port, `POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${BODY_LIMIT * 100}\r\n\r\n`, '{"email":');
    expect(huge.status).toBe(503);
    expect(huge.text).toContain('"code":"overloaded"');
    expect(huge.text.toLowerCase()).toContain('retry-after: 1');
    const form = await rawRequest(port, 'POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n', 'hello');
    expect(form.status).toBe(503);
    const notJson = await app.api('POST', '/auth/login', { raw: '{not json', headers: { 'content-type': 'application/json' } });
    expect(notJson.status).toBe(503);
    expect(notJson.body).toEqual({ error: expect.any(String), code: 'overloaded', retryAfter: 1 });
    // Registration hashes too; a read does not and answers.
    expect((await app.api('POST', '/auth/register', { raw: '[]', headers: { 'content-type': 'application/json' } })).status).toBe(503);
    expect((await app.api('GET', '/users/me', { token: reader.accessToken })).status).toBe(200);
    await hold.release();
    hold = null;
    // Once the queue has room the same malformed body is read and refused for what it is.
    expect((await app.api('POST', '/auth/login', { raw: '{not json', headers: { 'content-type': 'application/json' } })).status).toBe(400);
  });

  it('refuses every route that takes a password (an Argon2 hash or verify) before reading its body, as the login', async () => {
    // The routes are found in the served API document: any operation whose JSON body has a password field.
    const doc = (await app.api('GET', '/openapi.json')).body as { paths: Record<string, Record<string, { requestBody?: { content?: Record<string, { schema?: unknown }> } }>>; components: { schemas: Record<string, unknown> } };
    type Schema = { $ref?: string; properties?: Record<string, unknown>; allOf?: Schema[]; anyOf?: Schema[]; oneOf?: Schema[] };
    const fields = (s: Schema | undefined): string[] => {
      const r = s?.$ref ? (doc.components.schemas[s.$ref.split('/').pop()!] as Schema) : s;
      return r ? [...Object.keys(r.properties ?? {}), ...[...(r.allOf ?? []), ...(r.anyOf ?? []), ...(r.oneOf ?? [])].flatMap(fields)] : [];
    };
    const hashing = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([, op]) => fields(op.requestBody?.content?.['application/json']?.schema as Schema | undefined).some((f) => /password/i.test(f)))
        .map(([method]) => `${method.toUpperCase()} ${path.replace(/^\/api\/v1/, '')}`),
    );
    // The password re-entries and the invitation as well as login, registration and password changes.
    expect(hashing).toEqual(expect.arrayContaining(['POST /auth/login', 'POST /auth/accept-invite', 'POST /auth/passkeys/register/options', 'DELETE /auth/passkeys/{id}', 'DELETE /auth/password']));
    hold = holdHashWorkers();
    const answers: Record<string, number> = {};
    for (const route of hashing) {
      const [method, path] = route.split(' ') as [string, string];
      // Not JSON: a route that read its body would answer 400. The id is never looked up: refused first.
      const res = await app.api(method, path.replace('{id}', randomUUID()), { token: reader.accessToken, raw: '{not json', headers: { 'content-type': 'application/json' } });
      answers[route] = res.status;
      if (res.status === 503) expect(res.body.code).toBe('overloaded');
    }
    expect(answers).toEqual(Object.fromEntries(hashing.map((r) => [r, 503])));
  });

  it('writes one line per source and second for a flood of refusals, and no access line for them', async () => {
    hold = holdHashWorkers();
    // A second of its own, an hour ahead: no refusal of the test before shares it.
    const start = (Math.floor(Date.now() / 1000) + 3600) * 1000;
    clock.freeze(start);
    const second = new Date(start).toISOString();
    const before = lines.length;
    const ofSecond = (at: number) => lines.slice(before).filter((l) => l.msg === 'requests refused' && l.second === new Date(at).toISOString());
    const FLOOD = 40;
    const answers = await Promise.all(Array.from({ length: FLOOD }, (_, i) => app.api('POST', '/auth/login', { body: { email: `nobody-${i}@example.com`, password: 'correct horse battery staple' } })));
    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: FLOOD }, () => 503));
    // Still the same second: nothing written yet, and never an access line per refusal.
    expect(ofSecond(start)).toHaveLength(0);
    expect(lines.slice(before).filter((l) => l.msg === 'request' && l.path === '/api/v1/auth/login')).toHaveLength(0);
    // The next second: its first refusal (or the timer) writes the line of the one before.
    clock.advance(1000);
    expect((await app.api('POST', '/auth/login', { body: { email: 'late@example.com', password: 'correct horse battery staple' } })).status).toBe(503);
    const refusedLines = await waitUntil('the aggregated refusal line', () => ofSecond(start), (l) => l.length > 0);
    expect(refusedLines).toHaveLength(1);
    expect(refusedLines[0]).toMatchObject({ level: 40, source: app.ip, second, refused: FLOOD, status: 503, code: 'overloaded', routes: { 'POST /api/v1/auth/login': FLOOD } });
    // The late refusal is written with its own second once that one is over (by the timer).
    clock.advance(1000);
    const late = await waitUntil('the line of the next second', () => ofSecond(start + 1000), (l) => l.length > 0, { timeoutMs: 5000 });
    expect(late).toEqual([expect.objectContaining({ refused: 1, routes: { 'POST /api/v1/auth/login': 1 } })]);
    expect(ofSecond(start)).toHaveLength(1);
  });
});

describe.skipIf(!backendAvailable())(`a source's refusals past its allowance wait for the second to end (${backend})`, () => {
  const ALLOWANCE = 5;
  let app: TestApp;
  let reader: { accessToken: string };
  let hold: { release: () => Promise<void> } | null = null;
  beforeAll(async () => {
    app = await startTestApp({ env: { HASH_QUEUE_MAX: String(HASH_THREADS), LOGIN_IP_LIMIT: '100000', LOGIN_LIMIT: '1000', REFUSAL_HOLD_AFTER: String(ALLOWANCE) } });
    reader = await login(app, await createUser(app));
  }, 60_000);
  afterEach(async () => {
    clock.reset();
    await hold?.release();
    hold = null;
  });
  afterAll(async () => app?.close());

  it('answers the first REFUSAL_HOLD_AFTER refusals of a second at once and the rest, still 503 overloaded with Retry-After, when the second is over', async () => {
    hold = holdHashWorkers();
    // The clock stopped: only the test moves the second on.
    clock.freeze();
    const FLOOD = ALLOWANCE + 4;
    const settled: { status: number; body: any; headers: Headers }[] = [];
    const pending = Array.from({ length: FLOOD }, (_, i) =>
      app.api('POST', '/auth/login', { body: { email: `held-${i}@example.com`, password: 'correct horse battery staple' } }).then((r) => {
        settled.push(r);
        return r;
      }),
    );
    await waitUntil('the refusals within the allowance', () => settled.length, (n) => n >= ALLOWANCE, { everyMs: 10 });
    // The others wait while the second lasts (the hold's timer ticks every 100 ms: several ticks pass).
    await new Promise((r) => setTimeout(r, 500));
    expect(settled).toHaveLength(ALLOWANCE);
    // Held refusals hold nothing else: a read of the same source answers meanwhile.
    expect((await app.api('GET', '/users/me', { token: reader.accessToken })).status).toBe(200);
    clock.advance(1000);
    const all = await Promise.all(pending);
    expect(all).toHaveLength(FLOOD);
    for (const r of all) {
      expect(r.status).toBe(503);
      expect(r.body).toEqual({ error: expect.any(String), code: 'overloaded', retryAfter: 1 });
      expect(r.headers.get('retry-after')).toBe('1');
    }
    // A new second: its first refusals are answered at once again.
    expect((await app.api('POST', '/auth/login', { body: { email: 'next-second@example.com', password: 'correct horse battery staple' } })).status).toBe(503);
  });
});

/** Opens a connection and sends GET /health; resolves with the status, or null when the server closed it without an answer. */
function healthOn(port: number, keep: boolean): Promise<{ status: number | null; socket: ReturnType<typeof connect> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      text += d;
      if (text.includes('\r\n\r\n')) {
        if (!keep) socket.destroy();
        resolve({ status: Number(text.slice(9, 12)), socket });
      }
    });
    socket.on('close', () => resolve({ status: text ? Number(text.slice(9, 12)) : null, socket }));
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve({ status: null, socket }) : reject(err)));
    socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  });
}

describe.skipIf(!backendAvailable())(`the per-source connection budget (${backend})`, () => {
  let app: TestApp;
  const lines: Line[] = [];
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Line);
        done();
      },
    }),
  );
  beforeAll(async () => {
    // Loopback is not a trusted proxy here, so the test's connections count against 127.0.0.1's budget.
    app = await startTestApp({ log, env: { TRUST_PROXY: '10.255.255.254', MAX_CONNECTIONS_PER_SOURCE: '2' } });
  }, 60_000);
  afterAll(async () => app?.close());

  it('closes a connection past the budget of its address unread, counts it in the refusal line, and takes one again once a connection closed', async () => {
    const port = app.server.port;
    const first = await healthOn(port, true);
    const second = await healthOn(port, true);
    expect([first.status, second.status]).toEqual([200, 200]);
    const third = await healthOn(port, false);
    expect(third.status).toBeNull();
    await waitUntil('the refusal line of the connection', () => lines.filter((l) => l.msg === 'requests refused' && l.code === 'connection_budget'), (l) => l.length > 0, { timeoutMs: 5000 });
    const [line] = lines.filter((l) => l.msg === 'requests refused' && l.code === 'connection_budget');
    expect(line).toMatchObject({ source: '127.0.0.1', refused: 1, routes: { connection: 1 } });
    expect(line?.status).toBeUndefined();
    // One closes: a new connection is taken again.
    await new Promise<void>((resolve) => {
      first.socket.once('close', () => resolve());
      first.socket.destroy();
    });
    await waitUntil('a connection taken again', async () => (await healthOn(port, false)).status, (s) => s === 200, { timeoutMs: 5000 });
    second.socket.destroy();
  });
});
