/**
 * docs/security.md "Findings", 7: forgot-password answers before, and independently of, the account lookup, the reset
 * token and the email. The queued work runs after the answer; its failures are logged, never
 * answered. (No timing is asserted: an answer that waited for the mail server would not come back
 * while the mail server hangs.)
 */
import { createServer, type Server, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, freePort, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, uniqueEmail } from '../helpers/fixtures.js';
import { identityOf } from '../../src/modules/identity/context.js';

interface Line {
  level: number;
  msg: string;
  task?: string;
  err?: unknown;
}

function capturingLogger(lines: Line[]) {
  return pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Line);
        done();
      },
    }),
  );
}

describe.skipIf(!backendAvailable())(`forgot-password answers before its work (${backend})`, () => {
  /** A "mail server" that accepts connections and never says a word. */
  let silent: Server;
  const held: Socket[] = [];
  let app: TestApp;
  const lines: Line[] = [];
  beforeAll(async () => {
    silent = createServer((socket) => held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    app = await startTestApp({ env: { SMTP_URL: `smtp://127.0.0.1:${port}`, FORGOT_PASSWORD_LIMIT: '1000' }, log: capturingLogger(lines) });
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    await identityOf(app.server.keel).deferred.idle();
    await app?.close();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  it('answers 200 while the mail server hangs, and logs the failed delivery without the link', async () => {
    const user = await createUser(app);
    const res = await app.api('POST', '/auth/forgot-password', { body: { email: user.email } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ message: 'If that email belongs to an account, a reset link is on its way' });
    const unknown = await app.api('POST', '/auth/forgot-password', { body: { email: uniqueEmail('nobody') } });
    expect(unknown.status).toBe(200);
    expect(unknown.body).toEqual(res.body);
    // The known account's email is still waiting for the silent server: the answer did not wait for it.
    let settled = false;
    const done = identityOf(app.server.keel).deferred.idle().then(() => {
      settled = true;
    });
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    // The server goes away: the queued delivery fails, and that is logged, not answered.
    while (held.length === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    for (const s of held) s.destroy();
    await done;
    const failure = lines.find((l) => l.msg === 'queued work failed');
    expect(failure).toMatchObject({ task: 'password_reset_email', level: 50 });
    expect(JSON.stringify(failure)).not.toMatch(/reset-password\?token=/);
  });
});

describe.skipIf(!backendAvailable())(`forgot-password with no mail server at all (${backend})`, () => {
  it('answers 200 and logs the refused connection', async () => {
    const lines: Line[] = [];
    const port = await freePort();
    const app = await startTestApp({ env: { SMTP_URL: `smtp://127.0.0.1:${port}` }, log: capturingLogger(lines) });
    try {
      const user = await createUser(app);
      const res = await app.api('POST', '/auth/forgot-password', { body: { email: user.email } });
      expect(res.status).toBe(200);
      await identityOf(app.server.keel).deferred.idle();
      expect(lines.filter((l) => l.msg === 'queued work failed' && l.task === 'password_reset_email')).toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});
