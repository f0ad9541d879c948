/**
 * The access log (platform/http/middleware.ts requestContext): one line per request at info, carrying
 * the X-Request-Id the client saw, the method, path, status and time; a 5xx is logged at error even
 * when info is off; nothing else is written above info. Read from the app's own pino logger.
 * Below: the real `keel serve` at its default LOG_LEVEL writes stdout through a buffered asynchronous
 * destination (platform/logger.ts), and a clean stop loses no line.
 */
import { rmSync } from 'node:fs';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser } from '../helpers/fixtures.js';
import { waitUntil } from '../helpers/wait.js';
import { cliEnv, migratedDataDir, startServe } from '../helpers/cli.js';

interface Line {
  level: number;
  msg: string;
  reqId?: string;
  method?: string;
  path?: string;
  status?: number;
  ms?: number;
}

describe.skipIf(!backendAvailable())(`access log (${backend})`, () => {
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

  /** The access line for a request id; lines are written when Node's response closes. */
  function accessLine(reqId: string): Promise<Line | undefined> {
    return waitUntil(`the access line of request ${reqId}`, () => lines.find((l) => l.msg === 'request' && l.reqId === reqId));
  }

  beforeAll(async () => {
    app = await startTestApp({ log });
  });
  afterAll(async () => app?.close());

  it('writes one line per request at info with the id the client saw', async () => {
    const health = await app.request('GET', '/health');
    const id = health.headers.get('x-request-id') ?? '';
    expect(await accessLine(id)).toMatchObject({ level: 30, method: 'GET', path: '/health', status: 200, ms: expect.any(Number) });

    const missing = await app.api('GET', '/no/such/route', { headers: { 'x-request-id': 'client-chosen-id-1' } });
    expect(missing.headers.get('x-request-id')).toBe('client-chosen-id-1');
    expect(await accessLine('client-chosen-id-1')).toMatchObject({ level: 30, path: '/api/v1/no/such/route', status: 404 });
    expect(lines.filter((l) => l.reqId === 'client-chosen-id-1' && l.msg === 'request')).toHaveLength(1);
  });

  it('logs a request whose client left before the answer as 499, not 200', async () => {
    const { port } = new URL(app.url);
    const socket = connect(Number(port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    // A body that never completes: the route waits for it, then the client gives up.
    socket.write('POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nX-Request-Id: left-early-1\r\n\r\n{"email":');
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    expect(await accessLine('left-early-1')).toMatchObject({ method: 'POST', path: '/api/v1/auth/login', status: 499 });
  });

  it('logs a 5xx at error even with info off, and nothing for other answers', async () => {
    log.level = 'error';
    const user = await createUser(app);
    const off = app.server.keel.events.subscribe('user.login', () => Promise.reject(new Error('subscriber failed')));
    try {
      const ok = await app.request('GET', '/health', { headers: { 'x-request-id': 'quiet-health-1' } });
      expect(ok.status).toBe(200);
      const failed = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password }, headers: { 'x-request-id': 'failing-login-1' } });
      expect(failed.status).toBe(500);
      expect(await accessLine('failing-login-1')).toMatchObject({ level: 50, method: 'POST', path: '/api/v1/auth/login', status: 500 });
      expect(lines.some((l) => l.reqId === 'quiet-health-1')).toBe(false);
      expect(JSON.stringify(lines)).not.toContain(user.password);
    } finally {
      off();
      log.level = 'info';
    }
  });
});

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('access lines of keel serve at the default LOG_LEVEL', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = await migratedDataDir();
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  /** Sends `n` requests (8 at a time) with ids `<prefix>-<i>`, stops the server with `signal`, and returns the ids its stdout logged. */
  async function requestsThenStop(n: number, prefix: string, signal: NodeJS.Signals): Promise<{ ids: string[]; exitCode: number | null }> {
    const env = cliEnv(dataDir);
    delete env.LOG_LEVEL; // the default: info, one line per request
    const served = await startServe(env);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < n) {
        const i = next++;
        const res = await fetch(`${served.url}/health`, { headers: { 'x-request-id': `${prefix}-${i}` } });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    const exitCode = await served.stop(signal);
    const ids = served
      .stdout()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line)
      .filter((l) => l.msg === 'request' && l.reqId?.startsWith(`${prefix}-`))
      .map((l) => l.reqId ?? '');
    return { ids, exitCode };
  }

  it('writes the line of every request before a clean stop (SIGTERM and SIGINT)', async () => {
    for (const [signal, n] of [['SIGTERM', 400], ['SIGINT', 150]] as const) {
      const { ids, exitCode } = await requestsThenStop(n, `${signal.toLowerCase()}-run`, signal);
      expect(exitCode).toBe(0);
      expect(ids).toHaveLength(n);
      expect(new Set(ids).size).toBe(n);
    }
  }, 120_000);
});
