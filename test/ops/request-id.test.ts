/**
 * Request ids and tracing: the lines Keel writes about a request carry the request's id
 * (X-Request-Id), the access line and service lines alike (`requestLog`, given the request facts
 * every service receives), including work the request left to run after its answer (the email of a
 * password reset); a valid W3C `traceparent` is kept, logged on the access line and every other line
 * of the request, and echoed; an invalid one is ignored.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { waitUntil } from '../helpers/wait.js';
import { createLogger } from '../../src/platform/logger.js';

interface Line {
  level: number;
  msg: string;
  reqId?: string;
  traceparent?: string;
  path?: string;
}

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe.skipIf(!backendAvailable())(`request ids and traceparent on every log line (${backend})`, () => {
  let app: TestApp;
  const lines: Line[] = [];
  const log = createLogger(
    'info',
    {},
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Line);
        done();
      },
    }),
  );

  function lineWhere(match: (l: Line) => boolean): Promise<Line | undefined> {
    return waitUntil(`a log line where ${match.toString()}`, () => lines.find(match));
  }

  beforeAll(async () => {
    app = await startTestApp({ log });
  }, 60_000);
  afterAll(async () => app?.close());

  it('puts the request id and traceparent on a service line written for the request, even after the answer', async () => {
    const user = await createUser(app);
    const res = await app.api('POST', '/auth/forgot-password', { body: { email: user.email }, headers: { 'x-request-id': 'forgot-req-1', traceparent: TRACEPARENT } });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('forgot-req-1');
    expect(res.headers.get('traceparent')).toBe(TRACEPARENT);
    // The mailer's line (development sink) is written by work queued after the answer.
    const mail = await lineWhere((l) => /EMAIL/.test(l.msg) && l.reqId === 'forgot-req-1');
    expect(mail).toMatchObject({ reqId: 'forgot-req-1', traceparent: TRACEPARENT });
    const access = await lineWhere((l) => l.msg === 'request' && l.reqId === 'forgot-req-1');
    expect(access).toMatchObject({ path: '/api/v1/auth/forgot-password', traceparent: TRACEPARENT });
    // Every line carrying this id is one of this request's.
    const mine = lines.filter((l) => l.reqId === 'forgot-req-1');
    expect(mine.length).toBeGreaterThanOrEqual(2);
    expect(mine.every((l) => l.traceparent === TRACEPARENT)).toBe(true);
  });

  it('puts them on a line a service writes while answering (the development SMS sink)', async () => {
    const user = await createUser(app);
    const { accessToken } = await login(app, user);
    const res = await app.api('POST', '/auth/phone/verify', { token: accessToken, body: { phoneNumber: '+14155550177' }, headers: { 'x-request-id': 'sms-req-1', traceparent: TRACEPARENT } });
    expect(res.status).toBe(200);
    const sms = await lineWhere((l) => /DEVELOPMENT SMS/.test(l.msg) && l.reqId === 'sms-req-1');
    expect(sms).toMatchObject({ reqId: 'sms-req-1', traceparent: TRACEPARENT });
  });

  it('keeps two requests in flight together apart', async () => {
    const [a, b] = await Promise.all(
      ['par-a', 'par-b'].map(async (id) => {
        const user = await createUser(app);
        return app.api('POST', '/auth/forgot-password', { body: { email: user.email }, headers: { 'x-request-id': id } });
      }),
    );
    expect([a?.status, b?.status]).toEqual([200, 200]);
    for (const id of ['par-a', 'par-b']) {
      const mail = await lineWhere((l) => /EMAIL/.test(l.msg) && l.reqId === id);
      expect(mail?.reqId).toBe(id);
      expect(mail?.traceparent).toBeUndefined();
    }
  });

  it('ignores an invalid traceparent: not echoed, not logged', async () => {
    const invalid = [
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01', // trace id all zeros
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', // parent id all zeros
      '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01', // upper case
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', // version ff
      '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01', // short trace id
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01', // not hex
      `00-${'a'.repeat(32)}-${'b'.repeat(16)}-1`,
      '',
    ];
    expect(invalid).toHaveLength(9);
    for (const [i, value] of invalid.entries()) {
      const id = `bad-trace-${i}`;
      const res = await app.request('GET', '/health', { headers: { 'x-request-id': id, traceparent: value } });
      expect(res.status).toBe(200);
      expect(res.headers.get('traceparent'), value).toBeNull();
      const access = await lineWhere((l) => l.msg === 'request' && l.reqId === id);
      expect(access, value).toBeDefined();
      expect(access?.traceparent, value).toBeUndefined();
    }
  });
});
