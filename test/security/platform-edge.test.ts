/**
 * The request edge (platform/http): what every route gets whatever it declares.
 *
 * - Every JSON body is strict, on every route (derived from the route table): the minimal
 *   body plus an unknown field is a 400 `validation_failed` naming it; nested objects too.
 * - A missing field reads "is required" on every route; a wrong method on an existing path
 *   is 405 with `Allow` (derived from the route table).
 * - docs/security.md "Findings", 6: NUL (and unpaired surrogates) in any body field, query parameter or path is a 400
 *   naming the field, never a 500; and no database error's parameters reach the log.
 *
 * Validation runs after authentication (a 401 comes first), so the route-table checks sign in as a
 * platform administrator whose session has a second factor: every route's body is then reached.
 */
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, STRONG_PASSWORD, uniqueEmail, type Tenant } from '../helpers/fixtures.js';

type Schema = Record<string, any>;
interface Operation {
  method: string;
  path: string;
  body?: Schema;
  /** The route takes a device token (agents), not a user's. */
  device?: boolean;
}

const UNKNOWN = 'zzNotAField';
const HTTP_METHODS = ['get', 'post', 'put', 'patch', 'delete'];

describe.skipIf(!backendAvailable())(`request edge (${backend})`, () => {
  let app: TestApp;
  let tenant: Tenant;
  let token: string;
  let deviceToken: string;
  let doc: Schema;
  const lines: Record<string, any>[] = [];
  const raw: string[] = [];
  const log = pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean)) {
          raw.push(text);
          lines.push(JSON.parse(text) as Record<string, any>);
        }
        done();
      },
    }),
  );

  beforeAll(async () => {
    app = await startTestApp({ env: { ENABLE_REGISTRATION: 'true' }, publicUrlFromPort: true, log });
    tenant = await createTenant(app);
    const admin = await createUser(app, { platformAdmin: true });
    token = (await enrollTotp(app, (await login(app, admin)).accessToken)).accessToken;
    doc = (await app.api('GET', '/openapi.json')).body as Schema;
    // Agent routes authenticate a device: an enrolled one reaches their bodies.
    const key = (await app.api('POST', `/orgs/${tenant.orgId}/enrollment-keys`, { token, body: {} })).body.key as string;
    deviceToken = (await app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: 'edge', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } })).body.deviceToken as string;
  });
  const tokenOf = (op: Operation) => (op.device ? deviceToken : token);
  afterAll(async () => app?.close());

  const deref = (s: Schema): Schema => {
    if (typeof s.$ref !== 'string') return s;
    return deref(doc.components.schemas[s.$ref.split('/').pop() as string] as Schema);
  };

  /** Every documented operation, with its JSON body schema when it has one. */
  function operations(): Operation[] {
    const ops: Operation[] = [];
    for (const [path, item] of Object.entries<Schema>(doc.paths)) {
      for (const [method, op] of Object.entries<Schema>(item)) {
        if (!HTTP_METHODS.includes(method)) continue;
        const body = op.requestBody?.content?.['application/json']?.schema as Schema | undefined;
        const device = Array.isArray(op.security) && (op.security as Schema[]).some((x) => 'deviceToken' in x);
        ops.push({ method: method.toUpperCase(), path, ...(body ? { body: deref(body) } : {}), ...(device ? { device } : {}) });
      }
    }
    return ops;
  }

  /** A concrete URL for a documented path: `{orgId}` and `{partnerId}` are the tenant's, other ids are fresh. */
  const concrete = (path: string) => path.replace('/api/v1', '').replace('{orgId}', tenant.orgId).replace('{partnerId}', tenant.partnerId).replace(/\{\w+\}/g, () => randomUUID());

  /** The smallest value a schema accepts, as far as the document says (required fields only). */
  function minimal(schema: Schema, field = ''): unknown {
    const s = deref(schema);
    if (s.example !== undefined) return s.example;
    if (s.const !== undefined) return s.const;
    if (Array.isArray(s.enum)) return s.enum[0];
    const options = (s.anyOf ?? s.oneOf) as Schema[] | undefined;
    if (options) return minimal(options.find((o) => deref(o).type !== 'null') ?? {}, field);
    const type = Array.isArray(s.type) ? (s.type as string[]).find((t) => t !== 'null') : s.type;
    switch (type) {
      case 'object':
        return Object.fromEntries(((s.required ?? []) as string[]).map((k) => [k, minimal(s.properties[k] as Schema, k)]));
      case 'array':
        return Array.from({ length: (s.minItems as number | undefined) ?? 0 }, () => minimal(s.items as Schema));
      case 'integer':
      case 'number':
        return (s.minimum as number | undefined) ?? 1;
      case 'boolean':
        return false;
      case 'string':
        if (s.format === 'uuid') return field === 'orgId' ? tenant.orgId : field === 'partnerId' ? tenant.partnerId : randomUUID();
        if (s.format === 'email') return uniqueEmail('edge');
        if (s.format === 'uri') return 'https://example.com/';
        return 'x'.repeat(Math.max(1, (s.minLength as number | undefined) ?? 1));
      default:
        return null;
    }
  }

  const fieldsOf = (body: any): { path: string; message: string }[] => (body?.details?.fields ?? []) as { path: string; message: string }[];

  describe('strict bodies on every route', () => {
    it('refuses an unknown field beside the minimal body, naming it, on every route with a JSON body', async () => {
      const withBody = operations().filter((o) => o.body);
      expect(withBody.length).toBeGreaterThanOrEqual(35);
      const wrong: string[] = [];
      for (const op of withBody) {
        const body = { ...(minimal(op.body as Schema) as object), [UNKNOWN]: 'x' };
        const res = await app.api(op.method, concrete(op.path), { token: tokenOf(op), body });
        const named = fieldsOf(res.body).some((f) => f.path === UNKNOWN && f.message === 'is not a known field');
        if (res.status !== 400 || res.body?.code !== 'validation_failed' || !named) {
          wrong.push(`${op.method} ${op.path}: ${res.status} ${JSON.stringify(res.body)}`);
        }
      }
      expect(wrong).toEqual([]);
    });

    it('refuses unknown fields in nested objects with their full path', async () => {
      const orgPatch = await app.api('PATCH', `/orgs/${tenant.orgId}`, {
        token,
        body: { settings: { security: { requireMfa: true, [UNKNOWN]: true } } },
      });
      expect(orgPatch.status).toBe(400);
      expect(fieldsOf(orgPatch.body)).toContainEqual({ path: `settings.security.${UNKNOWN}`, message: 'is not a known field' });

      const role = await app.api('POST', `/roles?orgId=${tenant.orgId}`, {
        token,
        body: { name: 'Nested', permissions: [{ resource: 'users', action: 'read', [UNKNOWN]: 1 }] },
      });
      expect(role.status).toBe(400);
      expect(fieldsOf(role.body)).toEqual([{ path: `permissions.0.${UNKNOWN}`, message: 'is not a known field' }]);
    });

    it('keeps a nested document the route declares open (a WebAuthn credential) open', async () => {
      const res = await app.api('POST', '/auth/passkeys/register/verify', {
        token,
        body: {
          credential: {
            id: 'AAAA',
            rawId: 'AAAA',
            type: 'public-key',
            authenticatorAttachment: 'platform',
            response: { clientDataJSON: 'AAAA', attestationObject: 'AAAA', publicKeyAlgorithm: -7 },
          },
        },
      });
      // Refused for what it is (no registration under way), not for the browser's extra members.
      expect(res.status).toBe(400);
      expect(res.body.code).not.toBe('validation_failed');
    });
  });

  describe('strict queries on every route', () => {
    /** The identity provider's redirect keeps its own parameters (platform/http/validation.ts). */
    const OPEN_QUERY = new Set(['GET /api/v1/sso/callback']);

    it('refuses a misspelled query parameter (?partnerid=), naming it, on every route; the IdP callback alone takes extra ones', async () => {
      const ops = operations();
      expect(ops.length).toBeGreaterThanOrEqual(100);
      const wrong: string[] = [];
      for (const op of ops) {
        const open = OPEN_QUERY.has(`${op.method} ${op.path}`);
        const body = op.body ? (minimal(op.body) as object) : undefined;
        const call = (extra = '') => {
          const url = `${concrete(op.path)}?partnerid=${tenant.partnerId}${extra}`;
          const opts = { token: tokenOf(op), ...(body ? { body } : {}) };
          return op.path.startsWith('/api/v1/') ? app.api(op.method, url, opts) : app.request(op.method, url, opts);
        };
        let res = await call();
        // A route that must act in one organisation asks for it first (the guard runs before validation).
        if (res.body?.code === 'org_required') res = await call(`&orgId=${tenant.orgId}`);
        const named = fieldsOf(res.body).some((f) => f.path === 'query.partnerid' && f.message === 'is not a known field');
        if (open ? named || res.status === 400 : res.status !== 400 || res.body?.code !== 'validation_failed' || !named) {
          wrong.push(`${op.method} ${op.path}: ${res.status} ${JSON.stringify(res.body)}`);
        }
      }
      expect(wrong).toEqual([]);
    });

    it('accepts the scope parameters the guard reads on routes that declare no query of their own, and documents them', async () => {
      const created = await app.api('POST', `/orgs?partnerId=${tenant.partnerId}`, { token, body: { name: 'By query' } });
      expect(created.status).toBe(201);
      expect(created.body.partnerId).toBe(tenant.partnerId);
      const params = (doc.paths['/api/v1/orgs'].post.parameters as Schema[]).map((p) => `${p.in}:${p.name}`);
      expect(params).toEqual(expect.arrayContaining(['query:partnerId', 'query:orgId']));
      // Named by the path, the organisation is not a query parameter too.
      const sites = (doc.paths['/api/v1/orgs/{orgId}/sites'].get.parameters as Schema[]).map((p) => `${p.in}:${p.name}`);
      expect(sites).not.toContain('query:orgId');
    });
  });

  describe('missing fields and wrong methods', () => {
    it('names every missing required field "is required", the same on every route', async () => {
      const wrong: string[] = [];
      let checked = 0;
      for (const op of operations()) {
        const required = (op.body?.required ?? []) as string[];
        if (required.length === 0) continue;
        checked++;
        const res = await app.api(op.method, concrete(op.path), { token: tokenOf(op), body: {} });
        const missing = fieldsOf(res.body).filter((f) => f.message === 'is required').map((f) => f.path);
        if (res.status !== 400 || res.body?.code !== 'validation_failed' || JSON.stringify(missing.sort()) !== JSON.stringify([...required].sort())) {
          wrong.push(`${op.method} ${op.path}: ${res.status} ${JSON.stringify(res.body)} (required: ${required.join(', ')})`);
        }
      }
      expect(checked).toBeGreaterThanOrEqual(25);
      expect(wrong).toEqual([]);
    });

    it('answers a method a path does not have with 405 and the methods it has in Allow, on every path', async () => {
      const byPath = new Map<string, Set<string>>();
      for (const op of operations()) byPath.set(op.path, (byPath.get(op.path) ?? new Set()).add(op.method));
      expect(byPath.size).toBeGreaterThanOrEqual(40);
      // A concrete path is answered by every documented pattern it matches (`/users/me` also by `/users/{id}`).
      const patterns = [...byPath].map(([path, methods]) => ({ re: new RegExp(`^${path.replace(/\{\w+\}/g, '[^/]+')}$`), methods }));
      const wrong: string[] = [];
      for (const [path, methods] of byPath) {
        const absent = ['PUT', 'DELETE', 'PATCH', 'POST', 'GET'].find((m) => !methods.has(m));
        if (!absent) continue;
        const url = path.startsWith('/api/v1') ? `/api/v1${concrete(path)}` : concrete(path);
        const served = new Set(patterns.filter((p) => p.re.test(url)).flatMap((p) => [...p.methods]));
        if (served.has(absent)) continue;
        const res = await app.request(absent, url, { token });
        const expected = [...served].flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])).sort();
        const allow = (res.headers.get('allow') ?? '').split(',').map((m) => m.trim()).filter(Boolean).sort();
        if (res.status !== 405 || res.body?.code !== 'method_not_allowed' || typeof res.body?.error !== 'string' || JSON.stringify(allow) !== JSON.stringify(expected)) {
          wrong.push(`${absent} ${path}: ${res.status} allow=${allow.join(',')} expected=${expected.join(',')} ${JSON.stringify(res.body)}`);
        }
      }
      expect(wrong).toEqual([]);
    });

    it('still answers 404 for a path no route has', async () => {
      const res = await app.api('DELETE', '/no/such/thing', { token });
      expect(res.status).toBe(404);
      expect(res.body).toMatchObject({ code: 'not_found' });
      expect(res.headers.get('allow')).toBeNull();
    });
  });

  describe('text PostgreSQL cannot store', () => {
    const unstorable = (path: string) => ({ path, message: expect.stringMatching(/cannot be stored/) as unknown });

    it('refuses NUL in the forgot-password email, unauthenticated, as a 400 naming the field', async () => {
      const res = await app.api('POST', '/auth/forgot-password', { body: { email: 'a\u0000b@example.com' } });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: 'validation_failed' });
      expect(fieldsOf(res.body)).toEqual([unstorable('email')]);
    });

    it('refuses NUL in a registration name', async () => {
      const res = await app.api('POST', '/auth/register', { body: { email: uniqueEmail('nul'), password: STRONG_PASSWORD, name: 'Ada\u0000Lovelace' } });
      expect(res.status).toBe(400);
      expect(fieldsOf(res.body)).toEqual([unstorable('name')]);
    });

    it('refuses an unpaired surrogate (a JSON \\uD800 escape) and NUL in nested fields and keys', async () => {
      const surrogate = await app.api('POST', '/auth/forgot-password', { raw: '{"email":"\\ud800@example.com"}', headers: { 'content-type': 'application/json' } });
      expect(surrogate.status).toBe(400);
      expect(fieldsOf(surrogate.body)).toEqual([unstorable('email')]);

      const nested = await app.api('POST', `/roles?orgId=${tenant.orgId}`, { token, body: { name: 'Ok', permissions: [{ resource: 'users\u0000', action: 'read' }] } });
      expect(nested.status).toBe(400);
      expect(fieldsOf(nested.body)).toEqual([unstorable('permissions.0.resource')]);

      // A pair is fine: an emoji in a name is stored as it is.
      const pair = await app.api('PATCH', '/users/me', { token, body: { name: 'Ada 🚀' } });
      expect(pair.status).toBe(200);
      expect(pair.body.name).toBe('Ada 🚀');
    });

    it('refuses NUL in query parameters and in the path, before anything reaches the database', async () => {
      for (const [url, field] of [
        ['/users?search=a%00b', 'query.search'],
        ['/audit-logs?action=%00', 'query.action'],
        ['/audit-logs?targetId=%00', 'query.targetId'],
        ['/audit-logs?page=1&targetType=x%00y', 'query.targetType'],
        ['/users/%00', 'path'],
        ['/roles/a%00b/users', 'path'],
      ] as const) {
        const res = await app.api('GET', url, { token });
        expect(res.status, url).toBe(400);
        expect(res.body, url).toMatchObject({ code: 'validation_failed' });
        expect(fieldsOf(res.body), url).toEqual([unstorable(field)]);
      }
    });

    it('sends a body field with NUL on every route to a 400 naming it, never a 500', async () => {
      const wrong: string[] = [];
      let checked = 0;
      for (const op of operations()) {
        if (!op.body) continue;
        const body = minimal(op.body) as Record<string, unknown> | null;
        const field = body && Object.entries(body).find(([, v]) => typeof v === 'string')?.[0];
        if (!body || !field) continue;
        checked++;
        body[field] = `${String(body[field])}\u0000`;
        const res = await app.api(op.method, concrete(op.path), { token: tokenOf(op), body });
        if (res.status !== 400 || !fieldsOf(res.body).some((f) => f.path === field)) wrong.push(`${op.method} ${op.path} ${field}: ${res.status} ${JSON.stringify(res.body)}`);
      }
      expect(checked).toBeGreaterThanOrEqual(25);
      expect(wrong).toEqual([]);
    });
  });

  describe('database errors in the log', () => {
    it('logs a failed insert with its code and constraint, never its parameters or the failing row', async () => {
      // A constraint the application does not expect: registration's insert fails inside the database.
      await app.server.keel.database.query("alter table users add constraint keel_test_no_boom check (name <> 'Boom Lovelace')");
      try {
        const email = uniqueEmail('boom');
        const res = await app.api('POST', '/auth/register', { body: { email, password: STRONG_PASSWORD, name: 'Boom Lovelace' } });
        expect(res.status).toBe(500);
        expect(res.body).toEqual({ error: 'Internal server error', code: 'internal_error' });
        const line = lines.find((l) => l.msg === 'unhandled error');
        // drizzle wraps the driver's error: the wrapper (or, unwrapped, the error itself) names the failure.
        const error = line?.error as Record<string, any> | undefined;
        expect(error?.cause ?? error).toMatchObject({ code: '23514', constraint: 'keel_test_no_boom', table: 'users' });
        const text = raw.join('\n');
        expect(text).not.toContain(email);
        expect(text).not.toContain('Boom Lovelace');
        expect(text).not.toContain('$argon2');
        expect(text).not.toMatch(/Failing row|params/);
      } finally {
        await app.server.keel.database.query('alter table users drop constraint keel_test_no_boom');
      }
    });
  });
});
