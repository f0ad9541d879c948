import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { buildApp } from '../../src/app.js';
import { strictSchema } from '../../src/platform/http/validation.js';
import { catalogued } from '../../src/platform/http/errors.js';
import { bodyExamples, lookup, operationsOf, undescribedProperties, validatorOf } from '../helpers/openapi.js';

/**
 * docs/decisions.md "API descriptions": the OpenAPI document drives the docs page. It is a valid OpenAPI 3.1 document; every
 * operation has a unique operationId and an "Access" paragraph; the security schemes exist; and an
 * operation declares security exactly when the route refuses a request without a token, which is
 * checked against the running app for every operation (so the document cannot drift from the routes).
 *
 * And it describes the API to a client (docs/decisions.md, "API descriptions"): every operation has a
 * summary, every parameter and every property of every request and response schema a description,
 * every request body an example that the route itself accepts. These checks walk the document, so a
 * route added later is held to them without being named here.
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
        // The statuses its middleware can answer are derived from it (route-docs.ts middlewareStatuses).
        expect(Object.keys(op.responses), `${method} ${path}`).toEqual(expect.arrayContaining(['400', '401', '503']));
        // Agent routes take a device token (agents module); every other secured route a user's bearer token.
        if (!(op.security as object[]).some((s) => 'deviceToken' in s)) expect(op.security).toContainEqual({ bearerAuth: [] });
      }
    }
    expect(secured).toBeGreaterThan(40);
  });

  it('declares 428 wherever the Force MFA gate runs, and lists every catalogued error code', () => {
    // Every operation behind authenticate's Force MFA gate (all but the enrolment routes) declares its 428.
    const gated = operations().filter(({ op }) => op.responses['428']);
    expect(gated.length).toBeGreaterThan(70);
    expect(doc.components.schemas.Error.properties.code.enum).toEqual([...catalogued().keys()].sort());
  });

  it('names the permission a route checks, and refuses API keys on account routes in its security', () => {
    const find = (method: string, path: string) => operations().find((o) => o.method === method && o.path === path)?.op;
    expect(find('patch', '/api/v1/users/{id}').description).toContain('permission `users:write`');
    expect(find('patch', '/api/v1/users/{id}').security).toEqual([{ bearerAuth: [] }, { apiKey: [] }]);
    expect(find('post', '/api/v1/auth/mfa/setup').security).toEqual([{ bearerAuth: [] }]);
    expect(find('post', '/api/v1/auth/mfa/setup').description).toContain('API keys are refused');
    expect(find('post', '/api/v1/users/{id}/mfa/reset').description).toContain('a session established with a second factor');
  });

  it('describes every operation, parameter and schema property, walking the whole document', () => {
    const missing: string[] = [];
    const visited = new Set<string>();
    const ops = operationsOf(doc);
    expect(ops.length).toBeGreaterThan(60);
    let properties = 0;
    let parameters = 0;
    for (const { op, name } of ops) {
      if (!(typeof op.summary === 'string' && op.summary.trim())) missing.push(`${name}: summary`);
      for (const p of op.parameters) {
        const param = typeof p.$ref === 'string' ? lookup(doc, p.$ref) : p;
        parameters++;
        if (!(typeof param.description === 'string' && param.description.trim())) missing.push(`${name}: ${param.in} parameter ${param.name}`);
      }
      const media: [string, any][] = [
        ...Object.values(op.requestBody?.content ?? {}).map((m) => [`${name} request body`, m] as [string, any]),
        ...Object.entries(op.responses ?? {}).flatMap(([status, r]: [string, any]) =>
          Object.values((typeof r.$ref === 'string' ? lookup(doc, r.$ref) : r).content ?? {}).map((m) => [`${name} response ${status}`, m] as [string, any]),
        ),
      ];
      for (const [at, m] of media) missing.push(...undescribedProperties(doc, m.schema, at, visited));
    }
    // Count what was walked, so a walker that reaches nothing cannot pass.
    for (const ref of visited) properties += Object.keys(lookup(doc, ref).properties ?? {}).length;
    expect(parameters).toBeGreaterThan(50);
    expect(properties).toBeGreaterThan(200);
    expect([...new Set(missing)]).toEqual([]);
  });

  it('gives every request body an example that the route accepts and the document schema admits', () => {
    const routes = new Map<string, any>();
    for (const def of buildApp(app.server.keel).openAPIRegistry.definitions) {
      if (def.type === 'route') routes.set(`${def.route.method} ${def.route.path}`, def.route);
    }
    const problems: string[] = [];
    let bodies = 0;
    for (const { method, path, op, name } of operationsOf(doc)) {
      for (const [type, media] of Object.entries((op.requestBody?.content ?? {}) as Record<string, any>)) {
        bodies++;
        const examples = bodyExamples(doc, media);
        if (examples.length === 0) {
          problems.push(`${name} (${type}): no example`);
          continue;
        }
        const declared = routes.get(`${method} ${path}`)?.request?.body?.content?.[type]?.schema;
        for (const example of examples) {
          // A JSON body: the route's own zod schema, made strict exactly as the route validates it. Other
          // media types (a multipart upload, whose file a JSON example cannot hold) only the document's.
          if (type === 'application/json') {
            if (!declared) problems.push(`${name} (${type}): no zod schema for the body in the route table`);
            else {
              const own = strictSchema(declared).safeParse(example);
              if (!own.success) problems.push(`${name} (${type}): the route refuses its example: ${JSON.stringify(own.error.issues)}`);
            }
          }
          let documented;
          try {
            documented = validatorOf(doc, media.schema).safeParse(example);
          } catch (err) {
            problems.push(`${name} (${type}): the document schema cannot be read as JSON Schema: ${String(err)}`);
            continue;
          }
          if (!documented.success) problems.push(`${name} (${type}): the document schema refuses its example: ${JSON.stringify(documented.error.issues)}`);
        }
      }
    }
    expect(bodies).toBeGreaterThan(30);
    expect(problems).toEqual([]);
  });

  it('lists the server the request reached (PUBLIC_URL follows the listen port)', () => {
    expect(doc.servers).toEqual([{ url: app.server.keel.config.publicUrl }]);
  });
});
