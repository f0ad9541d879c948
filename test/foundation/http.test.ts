import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';

describe.skipIf(!backendAvailable())('HTTP foundation', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { SERVICE_VERSION: '9.9.9-rc.1' } });
  });
  afterAll(async () => app?.close());

  it('reports health with the version and database reachability', async () => {
    const res = await app.request('GET', '/health');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'ok', version: '9.9.9-rc.1', database: { status: 'ok' } });
    expect(res.headers.get('x-request-id')).toBeTruthy();
  });

  it('puts the security headers and the request id on every API answer over HTTP, errors included', async () => {
    for (const [method, path, status] of [['GET', '/openapi.json', 200], ['GET', '/no/such/route', 404], ['POST', '/auth/login', 400]] as const) {
      const res = await app.api(method, path, method === 'POST' ? { body: {} } : {});
      expect(res.status).toBe(status);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      expect(res.headers.get('x-request-id')).toBeTruthy();
    }
  });

  it('answers unknown routes with the 404 envelope', async () => {
    const res = await app.api('GET', '/no/such/route');
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ code: 'not_found' });
    expect(typeof res.body.error).toBe('string');
  });

  it('refuses a non-JSON body with 415', async () => {
    const res = await app.api('POST', '/auth/login', { raw: 'email=a', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(res.status).toBe(415);
    expect(res.body).toMatchObject({ code: 'unsupported_media_type' });
  });

  it('refuses an oversize body with 413', async () => {
    const res = await app.api('POST', '/auth/login', { raw: JSON.stringify({ email: 'x'.repeat(1024 * 1024 + 10) }), headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ code: 'payload_too_large' });
  });

  it('counts a chunked body as it streams: 413 over the limit, and a small one still parses', async () => {
    const { request } = await import('node:http');
    const send = (chunks: string[]) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const req = request(`${app.url}/api/v1/auth/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-forwarded-for': app.ip },
        });
        req.on('response', (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        });
        req.on('error', reject);
        for (const chunk of chunks) req.write(chunk); // no Content-Length: Node sends it chunked
        req.end();
      });
    const big = await send(['{"email":"', 'x'.repeat(600 * 1024), 'y'.repeat(600 * 1024), '"}']);
    expect(big.status).toBe(413);
    expect(big.body).toMatchObject({ code: 'payload_too_large' });
    const small = await send(['{"email":', '"nobody@example.com","password":"not-the-password"}']);
    expect(small.status).toBe(401);
    expect(small.body).toMatchObject({ code: 'invalid_credentials' });
  });

  it('publishes the OpenAPI 3.1 document and a docs page served without a CDN', async () => {
    const spec = await app.api('GET', '/openapi.json');
    expect(spec.status).toBe(200);
    expect(spec.body.openapi).toBe('3.1.0');
    expect(Object.keys(spec.body.paths)).toContain('/health');
    const docs = await app.api('GET', '/docs');
    expect(docs.status).toBe(200);
    expect(docs.body).toContain('/api/v1/docs/assets/swagger-ui-bundle.js');
    expect(docs.body).not.toMatch(/https?:\/\/(cdn|unpkg)/);
    const bundle = await app.api('GET', '/docs/assets/swagger-ui-bundle.js');
    expect(bundle.status).toBe(200);
    expect((bundle.body as string).length).toBeGreaterThan(100_000);
  });

  it('the docs page carries a strict CSP and X-Frame-Options: DENY, and loads only its own assets under it', async () => {
    const docs = await app.request('GET', '/api/v1/docs');
    expect(docs.status).toBe(200);
    const csp = docs.headers.get('content-security-policy') ?? '';
    const directives = Object.fromEntries(csp.split(/;\s*/).map((d) => [d.split(' ')[0], d.split(' ').slice(1).join(' ')]));
    expect(directives).toMatchObject({ 'default-src': "'none'", 'script-src': "'self'", 'style-src': "'self'", 'connect-src': "'self'", 'frame-ancestors': "'none'", 'object-src': "'none'", 'base-uri': "'none'" });
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|\*/);
    expect(docs.headers.get('x-frame-options')).toBe('DENY');
    const html = docs.body as string;
    // Nothing inline for the policy to refuse: every script has a src, no <style> element, no style attribute.
    const scripts = [...html.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBe(2);
    for (const [, attrs, body] of scripts) {
      expect(attrs).toMatch(/src="/);
      expect(body).toBe('');
    }
    expect(html).not.toMatch(/<style|style=|on\w+=/i);
    // Every asset the page names is Keel's own ('self') and is served, with its type.
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets).toEqual(['/api/v1/docs/assets/swagger-ui.css', '/api/v1/docs/assets/swagger-ui-bundle.js', '/api/v1/docs/assets/init.js']);
    for (const asset of assets) {
      const res = await app.request('GET', asset);
      expect(res.status, asset).toBe(200);
      expect(res.headers.get('content-type'), asset).toMatch(asset.endsWith('.css') ? /^text\/css/ : /^text\/javascript/);
    }
    expect((await app.request('GET', '/api/v1/docs/assets/init.js')).body).toContain('"/api/v1/openapi.json"');
  });

  it('is reachable on the embedded or the real backend this project runs', async () => {
    const res = await app.request('GET', '/health');
    expect(res.body.database.kind).toBe(process.env.KEEL_TEST_DB === 'postgres' ? 'postgres' : 'pglite');
  });
});
