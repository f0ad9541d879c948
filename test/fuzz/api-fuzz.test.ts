import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { ZodType } from 'zod';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { operationsOf, requestsFor, type FuzzRequest, type Operation } from '../helpers/fuzz.js';
import { ErrorSchema } from '../../src/platform/http/schemas.js';

/**
 * Fuzzing (docs/testing.md "Fuzzing"): requests generated from Keel's own OpenAPI document (valid, near-valid and
 * hostile) against every operation, without a token, as a platform administrator (with a second
 * factor), as an organisation administrator and with an API key. Every answer: no 5xx (but a 503 the
 * operation documents, such as a dependency this test does not configure); an error in
 * the documented envelope with a status the operation declares (the statuses middleware can answer are
 * derived into the document; the test lists every undeclared operation and status it met); a success
 * with a status the operation declares and a body its declared zod schema accepts. `FUZZ_RUNS` sets the cases per operation and caller (`npm run fuzz` runs many).
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 5);
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;
// Limits out of the way, so the fuzz reaches the routes behind them (429s are checked elsewhere).
const LIMITS = {
  ...Object.fromEntries(
    ['LOGIN_LIMIT', 'LOGIN_IP_LIMIT', 'MFA_VERIFY_LIMIT', 'FORGOT_PASSWORD_LIMIT', 'REGISTER_LIMIT', 'REGISTER_PARTNER_LIMIT', 'PASSWORD_REENTRY_LIMIT',
      'SMS_PER_PHONE_HOURLY_LIMIT', 'PHONE_VERIFY_HOURLY_LIMIT', 'PHONE_VERIFY_PER_PHONE_HOURLY_LIMIT', 'SSO_EXCHANGE_LIMIT', 'SSO_LOGIN_LIMIT', 'SAML_ACS_LIMIT', 'SSO_LOGIN_OUTSTANDING_LIMIT',
      'INVITE_EMAILS_PER_INVITEE_LIMIT', 'INVITE_RESENDS_PER_INVITER_LIMIT', 'LOCKOUT_THRESHOLD', 'ENROLL_IP_LIMIT', 'ENROLL_KEY_LIMIT'].map((k) => [k, '100000']),
  ),
  SMS_PER_TEMP_TOKEN_LIMIT: '1000',
};
/** Operations that would end the callers' own sessions: fuzzed without a token only. */
const SELF_ENDING = new Set(['POST /api/v1/auth/logout']);

type Caller = 'anonymous' | 'platformAdmin' | 'orgAdmin' | 'apiKey';

describe.skipIf(!backendAvailable())('fuzzing every operation of the OpenAPI document', () => {
  let app: TestApp;
  let doc: any;
  let tenant: Tenant;
  const tokens: Partial<Record<Caller, string>> = {};
  let known: string[] = [];
  /** Declared response schemas by `METHOD path` and status, from the served app's registry. */
  const declared = new Map<string, Map<number, ZodType | null>>();
  let sent = 0;
  /** Answered statuses the operation does not declare: `METHOD path → status code`, with one example request. */
  const undeclared = new Map<string, string>();

  beforeAll(async () => {
    app = await startTestApp({ env: LIMITS });
    // Generated URLs (webhooks, SSO issuers) name hosts like psa.example.com: no name is resolved through
    // the system resolver (no query leaves loopback), every name is unknown.
    app.server.keel.outbound.resolve = (host) => Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
    doc = (await app.request('GET', '/api/v1/openapi.json')).body;
    for (const def of app.server.app.openAPIRegistry.definitions) {
      if (def.type !== 'route') continue;
      const byStatus = new Map<number, ZodType | null>();
      for (const [status, response] of Object.entries(def.route.responses)) {
        const schema = (response as { content?: Record<string, { schema?: unknown }> }).content?.['application/json']?.schema;
        byStatus.set(Number(status), (schema as ZodType | undefined) ?? null);
      }
      declared.set(`${def.route.method.toUpperCase()} ${def.route.path}`, byStatus);
    }
    tenant = await createTenant(app);
    const admin = await createUser(app, { platformAdmin: true });
    tokens.platformAdmin = (await enrollTotp(app, (await login(app, admin)).accessToken)).accessToken;
    tokens.orgAdmin = (await login(app, tenant.orgAdmin)).accessToken;
    const key = await app.api('POST', '/api-keys', { token: tokens.platformAdmin, body: { name: 'fuzz', permissions: [{ resource: '*', action: '*' }] } });
    expect(key.status).toBe(201);
    tokens.apiKey = key.body.key as string;
    known = [tenant.partnerId, tenant.orgId, tenant.otherOrgId, tenant.orgTechnician.id, tenant.orgReadOnly.id, tenant.partnerTechnician.id];
  }, 120_000);

  afterAll(async () => {
    console.log(`fuzz: ${sent} requests, ${RUNS} per operation and caller${SEED === undefined ? '' : `, seed ${SEED}`}`);
    await app?.close();
  });

  async function send(operation: Operation, caller: Caller, req: FuzzRequest): Promise<void> {
    const query = new URLSearchParams(req.query).toString();
    const headers: Record<string, string> = {};
    const token = caller === 'anonymous' ? undefined : tokens[caller];
    if (token) headers.authorization = `Bearer ${token}`;
    let body: string | undefined;
    if (operation.method !== 'GET' && req.body.kind !== 'none') {
      if (req.body.kind === 'json') {
        try {
          body = JSON.stringify(req.body.value) ?? 'null';
        } catch {
          body = '{}'; // a value JSON cannot write (fast-check's anything may hold a BigInt)
        }
        headers['content-type'] = 'application/json';
      } else {
        body = req.body.text;
        headers['content-type'] = req.body.contentType;
      }
    }
    const res = await fetch(`${app.url}${req.path}${query ? `?${query}` : ''}`, { method: operation.method, headers, redirect: 'manual', ...(body === undefined ? {} : { body }) });
    sent++;
    const text = await res.text();
    const where = `${operation.method} ${req.path.slice(0, 200)}?${query.slice(0, 300)} as ${caller} (${req.body.kind}${req.body.kind === 'raw' ? ` ${req.body.contentType}` : ''}) → ${res.status} ${text.slice(0, 300)}`;
    // A 502 or 503 is an answer only where the operation documents it (a dependency not configured
    // here or answering wrongly, a full queue): never caused by the request itself.
    const byStatus = declared.get(`${operation.method} ${operation.path}`);
    if (!((res.status === 503 || res.status === 502) && byStatus?.has(res.status))) expect(res.status, where).toBeLessThan(500);
    const isJson = /^application\/json/.test(res.headers.get('content-type') ?? '');
    if (res.status >= 400) {
      expect(isJson, where).toBe(true);
      const parsed = ErrorSchema.strict().safeParse(JSON.parse(text));
      expect(parsed.success, where).toBe(true);
      const { code, error } = JSON.parse(text) as { code: string; error: string };
      expect(code, where).toMatch(/^[a-z][a-z0-9_]*$/);
      // Every answered status is one the operation declares (those middleware answers derived from it).
      const key = `${operation.method} ${operation.path} → ${res.status} ${code}`;
      // (A generated path that left the operation, such as an empty path parameter, met no route at all.)
      const noRoute = code === 'not_found' && error.startsWith('No route for');
      if (!noRoute && !byStatus?.has(res.status) && !undeclared.has(key)) undeclared.set(key, where);
      return;
    }
    if (res.status >= 300) return; // redirects (SSO) carry no JSON body
    expect(byStatus?.has(res.status), `${where}: status not declared`).toBe(true);
    const schema = byStatus?.get(res.status);
    if (schema && isJson) {
      const parsed = schema.safeParse(JSON.parse(text));
      expect(parsed.success, `${where}: ${parsed.success ? '' : JSON.stringify(parsed.error.issues.slice(0, 3))}`).toBe(true);
    }
  }

  it('answers every generated request without a 5xx, in the envelope, and as declared', async () => {
    const operations = operationsOf(doc);
    expect(operations.length).toBeGreaterThan(60);
    for (const operation of operations) {
      const callers: Caller[] = SELF_ENDING.has(`${operation.method} ${operation.path}`) ? ['anonymous'] : ['anonymous', 'platformAdmin', 'orgAdmin', 'apiKey'];
      for (const caller of callers) {
        const out = await fc.check(
          fc.asyncProperty(requestsFor(doc, operation, known), (req) => send(operation, caller, req)),
          { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }), endOnFailure: true },
        );
        // fast-check's own report prints the whole counterexample (a 200 kB string); this one is short.
        if (out.failed) {
          const cause = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance);
          throw new Error(`${cause.slice(0, 2_000)}\n(replay: FUZZ_SEED=${out.seed}; path ${out.counterexamplePath ?? ''})`);
        }
      }
    }
    expect(sent).toBeGreaterThanOrEqual(operations.length * RUNS);
    if (undeclared.size > 0) console.log(`answered statuses not declared:\n${[...undeclared.values()].join('\n')}`);
    expect([...undeclared.keys()], 'answered statuses the operation does not declare').toEqual([]);
  }, 900_000);
});
