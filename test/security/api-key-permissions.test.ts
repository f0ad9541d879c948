/**
 * An API key acts only within its permissions (its list intersected with its creator's) on every
 * route. The routes are taken from the app's own route table and the access paragraph each route's
 * middleware writes into the API document (platform/http/route-docs.ts), so a route added later is
 * covered without editing this file: a route an API key may call must check a permission, be
 * user-only (API keys refused), or be named below as static reference data.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { operationsOf } from '../helpers/openapi.js';
import { createWorld, type World } from '../access/helpers.js';
import { buildApp } from '../../src/app.js';

const API = '/api/v1';

/** Reachable by any authenticated caller by design: the same static answer for everyone, no tenant data. */
const STATIC = new Set(['GET /permissions/catalog', 'GET /sso/presets']);

describe.skipIf(!backendAvailable())(`API keys act only within their permissions on every route (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let doc: any;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    doc = (await app.api('GET', '/openapi.json')).body;
  });
  afterAll(async () => app?.close());

  const accessOf = (op: any): string => {
    const d: string = op.description ?? '';
    return d.slice(d.lastIndexOf('Access:'));
  };

  it('every route of the route table is in the API document (so its access paragraph is what it enforces)', () => {
    const documented = new Set(operationsOf(doc).map((o) => `${o.method.toUpperCase()} ${o.path.slice(API.length).replace(/\{([^}]+)\}/g, ':$1')}`));
    const missing: string[] = [];
    for (const r of buildApp(app.server.keel).routes) {
      if (r.method === 'ALL' || !r.path.startsWith(API) || r.path.startsWith(`${API}/docs`) || r.path === `${API}/openapi.json`) continue;
      const key = `${r.method} ${r.path.slice(API.length)}`;
      if (!documented.has(key)) missing.push(key);
    }
    expect(missing).toEqual([]);
  });

  it('no route an API key may call lacks a permission check (or the user-only rule)', () => {
    const open: string[] = [];
    for (const o of operationsOf(doc)) {
      const access = accessOf(o.op);
      if (!/an access token or an API key/.test(access)) continue; // public, user-only, device or release rule
      if (/permission `[^`]+`/.test(access)) continue;
      const name = `${o.method.toUpperCase()} ${o.path.slice(API.length)}`;
      if (!STATIC.has(name)) open.push(name);
    }
    expect(open).toEqual([]);
  });

  it('through HTTP: a key with one unrelated permission is refused on every such route', async () => {
    const created = await app.api('POST', '/api-keys', { token: w.tokens.orgAdmin, body: { name: 'devices only', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    for (const [method, path] of [['GET', '/api-keys'], ['POST', '/api-keys'], ['DELETE', `/api-keys/${randomUUID()}`], ['GET', '/sso/providers'], ['GET', `/sso/providers/${randomUUID()}`]] as const) {
      const res = await app.api(method, path, { token: key, body: method === 'POST' ? { name: 'child', permissions: [{ resource: 'devices', action: 'read' }] } : undefined });
      expect([res.status, res.body.code], `${method} ${path}`).toEqual([403, 'user_required']);
    }
    // The same routes still answer the key's creator.
    expect((await app.api('GET', '/sso/providers', { token: w.tokens.orgAdmin })).status).toBe(200);
    expect((await app.api('GET', '/api-keys', { token: w.tokens.orgAdmin })).status).toBe(200);
  });
});
