/**
 * The process logger (platform/logger.ts): secrets are redacted at any depth without copying a line
 * that has none, and stdout is written by a buffered asynchronous writer that writes
 * nothing while a request is served, everything on flush, in order, and, when its reader stalls,
 * drops lines beyond its bound and says how many once the output moves again.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accessLogger, BatchedWriter, createLogger, redactSecrets } from '../../src/platform/logger.js';

describe('log redaction', () => {
  function capture(): { lines: Record<string, unknown>[]; stream: Writable } {
    const lines: Record<string, unknown>[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(text) as Record<string, unknown>);
        done();
      },
    });
    return { lines, stream };
  }

  it('writes the hand-formatted access line exactly as pino writes the same fields: same keys in the same order, escaped path, level and bindings', async () => {
    const { lines, stream } = capture();
    const log = createLogger('info', { role: 'serve' }, stream);
    const access = accessLogger(log);
    const reqId = 'f4dc0dd4-9e2f-4db0-8083-0badf26c4019';
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const path = '/api/v1/odd"path\\with\u0001control\u2028and unicode é';
    access(reqId, traceparent, 'GET', path, 200, 1.26);
    log.info({ reqId, traceparent, method: 'GET', path, status: 200, ms: 1.3 }, 'request');
    access(reqId, undefined, 'POST', '/x', 404, 0.04);
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toHaveLength(3);
    const [hand, viaPino, plain] = lines as [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>];
    expect(Object.keys(hand)).toEqual(Object.keys(viaPino));
    expect({ ...hand, time: 't' }).toEqual({ ...viaPino, time: 't' });
    expect(hand).toMatchObject({ level: 30, service: 'keel', role: 'serve', path, ms: 1.3, msg: 'request' });
    expect(plain).toEqual(expect.objectContaining({ reqId, method: 'POST', path: '/x', status: 404, ms: 0, msg: 'request' }));
    expect(plain).not.toHaveProperty('traceparent');
  });

  it('writes an access line only at info or below, and a 5xx at error whatever the level', async () => {
    const { lines, stream } = capture();
    const access = accessLogger(createLogger('warn', {}, stream));
    access('id-1', undefined, 'GET', '/a', 200, 1);
    access('id-2', undefined, 'GET', '/b', 503, 2);
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toEqual([expect.objectContaining({ level: 50, reqId: 'id-2', status: 503, msg: 'request' })]);
  });

  it('censors secret keys at any depth, in arrays and in logged errors, and leaves the logged object alone', async () => {
    const { lines, stream } = capture();
    const log = createLogger('info', {}, stream);
    const input = {
      email: 'a@example.com',
      password: 'hunter2-secret',
      nested: { token: 'tok-123', deeper: { headers: { authorization: 'Bearer abc', cookie: 'sid=1' } } },
      list: [{ refreshToken: 'r-1' }, 'plain'],
    };
    log.info(input, 'something happened');
    const err = Object.assign(new Error('boom'), { clientSecret: 'cs-9' });
    // @ts-expect-error a library's `err` (Keel's own calls cannot write one: the Logger type refuses the key)
    log.error({ err }, 'failed');
    await new Promise((resolve) => setImmediate(resolve));
    const text = JSON.stringify(lines);
    for (const secret of ['hunter2-secret', 'tok-123', 'Bearer abc', 'sid=1', 'r-1', 'cs-9']) expect(text).not.toContain(secret);
    expect(lines[0]).toMatchObject({
      email: 'a@example.com',
      password: '[redacted]',
      nested: { token: '[redacted]', deeper: { headers: { authorization: '[redacted]', cookie: '[redacted]' } } },
      list: [{ refreshToken: '[redacted]' }, 'plain'],
      msg: 'something happened',
      service: 'keel',
    });
    expect(lines[0]?.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    // An `err` (a library's; Keel logs `error: loggableError(err)`) keeps only the allow-list of platform/safe-error.ts.
    expect(lines[1]).toMatchObject({ err: { name: 'Error', message: 'boom' } });
    expect(lines[1]?.err).not.toHaveProperty('clientSecret');
    expect(input.password).toBe('hunter2-secret');
    expect(input.nested.token).toBe('tok-123');
  });

  it('logs an error given as a string as one message, never one key per character', async () => {
    const { lines, stream } = capture();
    const log = createLogger('info', {}, stream);
    // @ts-expect-error as above: what the serializer does with an `err` that still arrives
    log.warn({ err: 'connection terminated' }, 'agents: sweep failed');
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines[0]?.err).toEqual({ name: 'string', message: 'connection terminated' });
  });

  it('passes a line without secrets through as it is (no copy)', () => {
    const line = { reqId: 'r-1', method: 'GET', path: '/api/v1/users/me', status: 200, ms: 0.4 };
    expect(redactSecrets(line)).toBe(line);
    const withSecret = { reqId: 'r-1', token: '123456' };
    expect(redactSecrets(withSecret)).toEqual({ reqId: 'r-1', token: '[redacted]' });
  });

  it('redacts a code by where it sits (request query, body, form, params; URL query strings and fragments) and keeps error codes', () => {
    const line = {
      code: 'sso_error',
      err: { code: '23505' },
      query: { code: 'oauth-authorization-code', state: 's' },
      body: { code: 'exchange-code' },
      req: { params: { code: 'p-code' }, form: { code: 'f-code', SAMLResponse: 'PHNhbWw+' } },
      url: 'http://127.0.0.1:3000/api/v1/sso/callback?code=oauth-authorization-code&state=s',
      location: 'https://keel.example/devices#ssoCode=exchange-code',
      path: '/api/v1/sso/callback?code=oauth-authorization-code',
      list: ['/x?token=t-1', 'plain words with a ? mark'],
      reason: 'oidc: OperationProcessingError unexpected response',
    };
    const out = redactSecrets(line);
    expect(out).toEqual({
      code: 'sso_error',
      err: { code: '23505' },
      query: { code: '[redacted]', state: 's' },
      body: { code: '[redacted]' },
      req: { params: { code: '[redacted]' }, form: { code: '[redacted]', SAMLResponse: '[redacted]' } },
      url: 'http://127.0.0.1:3000/api/v1/sso/callback?[redacted]',
      location: 'https://keel.example/devices#[redacted]',
      path: '/api/v1/sso/callback?[redacted]',
      list: ['/x?[redacted]', 'plain words with a ? mark'],
      reason: 'oidc: OperationProcessingError unexpected response',
    });
    expect(JSON.stringify(out)).not.toMatch(/authorization-code|exchange-code|p-code|f-code|t-1|PHNhbWw/);
  });
});

describe('buffered stdout writer', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'keel-logwriter-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const flushed = (writer: BatchedWriter): Promise<void> => new Promise((resolve) => writer.flush(resolve));

  it('writes nothing while lines are logged, then every line in order on flush; flushSync writes the rest at once', async () => {
    const file = join(dir, 'out.log');
    const fd = openSync(file, 'w');
    try {
      const writer = new BatchedWriter(fd);
      for (let i = 0; i < 100; i++) writer.write(`{"n":${i},"text":"ünïcødé ✓"}\n`);
      expect(readFileSync(file, 'utf8')).toBe(''); // buffered: no write(2) on the logging call
      await flushed(writer);
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      expect(lines).toHaveLength(100);
      expect(lines.map((l) => (JSON.parse(l) as { n: number }).n)).toEqual(Array.from({ length: 100 }, (_, i) => i));
      expect(lines[99]).toContain('ünïcødé ✓');

      writer.write('{"n":"last"}\n');
      writer.flushSync();
      expect(readFileSync(file, 'utf8').trimEnd().split('\n').pop()).toBe('{"n":"last"}');

      // Large volumes go out in batches as they build up, without a flush.
      const big = `{"pad":"${'x'.repeat(200)}"}\n`;
      for (let i = 0; i < 2000; i++) writer.write(big);
      await new Promise((resolve) => setTimeout(resolve, 0));
      await flushed(writer);
      expect(readFileSync(file, 'utf8').split('\n').filter((l) => l.startsWith('{"pad"'))).toHaveLength(2000);
    } finally {
      closeSync(fd);
    }
  });

  it('fills written chunks again without mixing lines: thousands of distinct lines over many batches arrive whole and in order', async () => {
    const file = join(dir, 'reuse.log');
    const fd = openSync(file, 'w');
    try {
      const writer = new BatchedWriter(fd);
      let n = 0;
      // Bursts of about 3 chunks each, the next one logged while the last is still being written:
      // a chunk is filled again only once its write is done.
      for (let burst = 0; burst < 20; burst++) {
        for (let i = 0; i < 900; i++, n++) writer.write(`{"n":${n},"pad":"${String(n).repeat(30).slice(0, 200)}"}\n`);
        await new Promise((resolve) => setImmediate(resolve));
      }
      await flushed(writer);
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      expect(lines).toHaveLength(n);
      lines.forEach((line, i) => expect(JSON.parse(line)).toEqual({ n: i, pad: String(i).repeat(30).slice(0, 200) }));
    } finally {
      closeSync(fd);
    }
  });

  it('drops lines beyond its bound while the reader is stalled, and reports how many once it reads again', async () => {
    const file = join(dir, 'stalled.log');
    const out = openSync(file, 'w');
    const reader = spawn('cat', [], { stdio: ['pipe', out, 'ignore'] });
    closeSync(out);
    const exited = new Promise((resolve) => reader.on('exit', resolve));
    const input = reader.stdin;
    if (!input) throw new Error('cat has no stdin pipe');
    try {
      reader.kill('SIGSTOP');
      const fd = (input as unknown as { _handle: { fd: number } })._handle.fd;
      const writer = new BatchedWriter(fd);
      const line = `{"pad":"${'y'.repeat(1000)}"}\n`; // ~1 KB: 20,000 lines are ~20 MB, beyond the 16 MiB bound
      let accepted = 0;
      for (let i = 0; i < 20_000; i++) if (writer.write(line)) accepted++;
      expect(accepted).toBeLessThan(20_000);
      expect(accepted).toBeGreaterThan(10_000);
      reader.kill('SIGCONT');
      await flushed(writer);
      input.end();
      await exited;
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      expect(lines.filter((l) => l === line.trimEnd())).toHaveLength(accepted);
      expect(JSON.parse(lines.at(-1) ?? '{}')).toMatchObject({ level: 40, dropped: 20_000 - accepted, msg: 'log lines dropped: the output was not being read' });
    } finally {
      reader.kill('SIGKILL');
    }
  }, 60_000);
});
