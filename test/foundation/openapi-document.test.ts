import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { buildApp } from '../../src/app.js';

/**
 * Issue 14.3: the OpenAPI document drives the docs page. It is a valid OpenAPI 3.1 document; every
 * operation has a unique operationId and an "Access" paragraph; the security schemes exist; and an
 * operation declares security exactly when the route refuses a request without a token, which is
 * checked against the running app for every operation (so the document cannot drift from the routes).
 */
describe.skipIf(!backendAvailable())('the OpenAPI document', () => {
  let app: TestApp;
  let doc: any;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '100000', LOGIN_IP_LIMIT: '100000', FORGOT_PASSWORD_LIMIT: '100000', REGISTER_LIMIT: '100000' } });
    doc = (await app.request('GET', '/api/v1/openapi.json')).body;
  });
  afterAll(async () => {
    await app?.close();
  });

  const operations = (): { method: string; path: string; op: any }[] =>
    Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([m]) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
        .map(([method, op]) => ({ method, path, op })),
    );

  it('is a valid OpenAPI 3.1 document', async () => {
    const result = await new Validator().validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toBe('3.1.0');
  });

  it('describes every API route of the app, each with a unique operationId and its access rule', () => {
    const documented = new Set(operations().map((o) => `${o.method.toUpperCase()} ${o.path.replace(/\{([^}]+)\}/g, ':$1')}`));
    const routes = buildApp(app.server.keel).routes
      .filter((r) => r.path.startsWith('/api/v1/') && !r.path.startsWith('/api/v1/docs') && r.path !== '/api/v1/openapi.json' && r.method !== 'ALL')
      .map((r) => `${r.method} ${r.path}`);
    expect(routes.length).toBeGreaterThan(60);
    for (const r of routes) expect(documented, r).toContain(r);
    const ids = operations().map((o) => o.op.operationId as string);
    expect(ids.every((id) => /^[a-z][A-Za-z0-9]+$/.test(id))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { op } of operations()) expect(op.description).toMatch(/Access: /);
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(['apiKey', 'bearerAuth', 'deviceToken']);
  });

  it('declares security exactly on the operations that refuse a request without a token', async () => {
    const id = '00000000-0000-7000-8000-0000000000aa';
    let secured = 0;
    for (const { method, path, op } of operations()) {
      const url = path.replace(/\{[^}]+\}/g, id);
      const res = await app.request(method.toUpperCase(), url, method === 'get' || method === 'delete' ? {} : { body: {} });
      const refusedForNoToken = res.status === 401 && res.body.code === 'unauthorized';
      // `{}` among the alternatives: the token is optional (a temp token in the body does instead).
      if (op.security?.some((s: object) => Object.keys(s).length === 0)) {
        expect(op.security).toContainEqual({ bearerAuth: [] });
        continue;
      }
      const declares = Array.isArray(op.security) && op.security.length > 0;
      expect(declares, `${method} ${path} answered ${res.status} ${res.body?.code}`).toBe(refusedForNoToken);
      if (declares) {
        secured++;
        // Agent routes take a device token (agents module); every other secured route a user's bearer token.
        if (!(op.security as object[]).some((s) => 'deviceToken' in s)) expect(op.security).toContainEqual({ bearerAuth: [] });
      }
    }
    expect(secured).toBeGreaterThan(40);
  });

  it('names the permission a route checks, and refuses API keys on account routes in its security', () => {
    const find = (method: string, path: string) => operations().find((o) => o.method === method && o.path === path)?.op;
    expect(find('patch', '/api/v1/users/{id}').description).toContain('permission `users:write`');
    expect(find('patch', '/api/v1/users/{id}').security).toEqual([{ bearerAuth: [] }, { apiKey: [] }]);
    expect(find('post', '/api/v1/auth/mfa/setup').security).toEqual([{ bearerAuth: [] }]);
    expect(find('post', '/api/v1/auth/mfa/setup').description).toContain('API keys are refused');
    expect(find('post', '/api/v1/users/{id}/mfa/reset').description).toContain('a session established with a second factor');
  });

  it('lists the server the request reached (PUBLIC_URL follows the listen port)', () => {
    expect(doc.servers).toEqual([{ url: app.server.keel.config.publicUrl }]);
  });
});
