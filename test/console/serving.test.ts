/**
 * The built web console served by Keel beside the API (src/platform/http/console.ts): the page for
 * every console path (SPA fallback), hashed assets cached for a year, index.html revalidated, a CSP
 * without inline script, and the API's own JSON 404/405 untouched.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { consoleBuild } from './helpers.js';

describe.skipIf(!backendAvailable())('web console serving', () => {
  let app: TestApp;
  let bare: TestApp;
  let dir: string;
  let script: string;

  beforeAll(async () => {
    dir = await consoleBuild();
    script = readdirSync(join(dir, 'assets')).find((f) => f.endsWith('.js'))!;
    expect(script).toMatch(/^index-[\w-]+\.js$/);
    app = await startTestApp({ env: { CONSOLE_DIR: dir } });
    bare = await startTestApp();
  });
  afterAll(async () => {
    await app?.close();
    await bare?.close();
  });

  it.each(['/', '/login', '/accept-invite?token=abc', '/reset-password?token=abc', '/admin/users', '/account/security'])(
    'GET %s answers the console page, no-cache, with a CSP that allows no inline script',
    async (path) => {
      const res = await app.request('GET', path);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(res.headers.get('cache-control')).toBe('no-cache');
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).not.toContain('unsafe-eval');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      const html = String(res.body);
      expect(html).toContain(`src="/assets/${script}"`);
      // No inline script in the page itself: every <script> has a src.
      expect(html.match(/<script\b[^>]*>/g)?.every((tag) => /\bsrc=/.test(tag))).toBe(true);
    },
  );

  it('serves hashed assets as immutable for a year, and revalidates index.html by ETag', async () => {
    const asset = await app.request('GET', `/assets/${script}`);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');

    // Text files go gzipped to a client that accepts it (a third of the script's size).
    const raw = await fetch(`${app.url}/assets/${script}`, { headers: { 'accept-encoding': 'gzip' } });
    expect(raw.headers.get('content-encoding')).toBe('gzip');
    expect(raw.headers.get('vary')).toBe('Accept-Encoding');
    expect(await raw.text()).toBe(String(asset.body));

    const page = await app.request('GET', '/login');
    const etag = page.headers.get('etag')!;
    expect(etag).toMatch(/^"[\w-]+"$/);
    const again = await app.request('GET', '/users', { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    const head = await fetch(`${app.url}/reset-password`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(await head.text()).toBe('');
  });

  it('leaves the API, /health, missing assets and other methods to their JSON answers', async () => {
    const api = await app.request('GET', '/api/v1/no-such-route');
    expect(api.status).toBe(404);
    expect(api.body.code).toBe('not_found');
    const method = await app.request('PUT', '/api/v1/auth/login');
    expect(method.status).toBe(405);
    expect((await app.request('GET', '/health')).body.status).toBeDefined();
    for (const path of ['/assets/index-gone.js', '/favicon.ico', '/robots.txt']) {
      const res = await app.request('GET', path);
      expect(res.status, path).toBe(404);
      expect(res.body.code).toBe('not_found');
    }
    const post = await app.request('POST', '/login', { body: {} });
    expect(post.status).toBe(404);
    expect(post.body.code).toBe('not_found');
  });

  it('without CONSOLE_DIR, Keel serves no console (API-only processes)', async () => {
    const res = await bare.request('GET', '/login');
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('not_found');
  });
});
