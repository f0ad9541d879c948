/**
 * Security headers and the request id are prepared before the handler runs (so the Node adapter can
 * keep its lightweight response); a handler that answers with its own Response object still gets them.
 */
import { Hono } from 'hono';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { apiGate, requestContext } from '../../src/platform/http/middleware.js';

const app = new Hono();
app.use('*', requestContext(pino({ level: 'silent' }), new Set()));
app.use('*', apiGate({ maxBodyBytes: 1024, onTooLarge: (c) => c.json({ code: 'payload_too_large' }, 413) }));
app.get('/json', (c) => c.json({ ok: true }));
app.get('/raw', () => new Response('plain', { headers: { 'content-type': 'text/plain' } }));
app.get('/own-cache', (c) => c.json({ ok: true }, 200, { 'Cache-Control': 'private, max-age=60' }));

describe('API headers', () => {
  for (const path of ['/json', '/raw']) {
    it(`are on an answer made by ${path === '/json' ? 'c.json()' : 'a handler-made Response'}`, async () => {
      const res = await app.request(path);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    });
  }

  it('echo a well-formed incoming request id and replace a malformed one', async () => {
    expect((await app.request('/json', { headers: { 'x-request-id': 'trace-42.a' } })).headers.get('x-request-id')).toBe('trace-42.a');
    expect((await app.request('/json', { headers: { 'x-request-id': 'bad id\u0007' } })).headers.get('x-request-id')).not.toBe('bad id\u0007');
  });

  it('leave a header the handler set itself', async () => {
    const res = await app.request('/own-cache');
    expect(res.headers.get('cache-control')).toBe('private, max-age=60');
  });
});
