/**
 * Graceful shutdown of `keel serve`: on SIGTERM the listener closes at once, a request in
 * flight still gets its whole answer, and one that never completes is cut after the grace period
 * (`drainMs`) so the stop is bounded. The request is shown to be in flight without any timing: the
 * client sends `Expect: 100-continue` and waits for Node's `100 Continue`, which is written only once
 * the server has parsed the request and handed it to Keel.
 */
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Everything the server writes until `done(text)` holds or the connection ends. */
function readUntil(socket: Socket, done: (text: string) => boolean): Promise<{ text: string; ended: boolean }> {
  return new Promise((resolve) => {
    let text = '';
    const finish = (ended: boolean) => {
      socket.off('data', onData);
      resolve({ text, ended });
    };
    const onData = (chunk: Buffer) => {
      text += chunk.toString('utf8');
      if (done(text)) finish(false);
    };
    socket.on('data', onData);
    socket.once('close', () => finish(true));
  });
}

/** Sends a login's head with `Expect: 100-continue` and resolves once the server answered 100 (the request is in flight). */
async function loginInFlight(port: number, body: string): Promise<Socket> {
  const socket = await open(port);
  const continued = readUntil(socket, (t) => t.includes('100 Continue\r\n\r\n'));
  socket.write(
    'POST /api/v1/auth/login HTTP/1.1\r\nHost: keel.test\r\nContent-Type: application/json\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\nX-Forwarded-For: 10.9.9.9\r\n\r\n`,
  );
  expect((await continued).text).toContain('HTTP/1.1 100 Continue');
  return socket;
}

const refused = (port: number) => open(port).then((s) => (s.destroy(), 'accepted'), (err: unknown) => (err as NodeJS.ErrnoException).code);

describe.skipIf(!backendAvailable())('graceful shutdown of the HTTP server', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('stops accepting at once, answers the request in flight in full, then ends', async () => {
    app = await startTestApp();
    const port = app.server.port;
    const body = JSON.stringify({ email: 'nobody@example.com', password: 'not the password at all' });
    const socket = await loginInFlight(port, body);

    const drained = app.server.drain();
    expect(await refused(port)).toBe('ECONNREFUSED');

    const answer = readUntil(socket, (t) => t.includes('\r\n\r\n') && t.trimEnd().endsWith('}'));
    socket.write(body);
    const { text: final, ended } = await answer;
    expect(ended).toBe(false);
    expect(final).toMatch(/^HTTP\/1\.1 401 /);
    expect(JSON.parse(final.slice(final.indexOf('\r\n\r\n') + 4))).toMatchObject({ code: 'invalid_credentials' });
    await drained;
    socket.destroy();
  });

  it('cuts a request that never completes once the grace period is over, so the stop is bounded', async () => {
    app = await startTestApp({ drainMs: 200 });
    const socket = await loginInFlight(app.server.port, JSON.stringify({ email: 'a@example.com', password: 'x' }));
    const ended = readUntil(socket, () => false);
    await app.server.drain(); // resolves although the body never arrives
    expect((await ended).ended).toBe(true);
  });
});
