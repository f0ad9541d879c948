import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { handleError } from '../../platform/http/errors.js';
import { ScimError } from './errors.js';
import { authenticateScimToken } from './tokens.js';
import { createUser, deleteUser, getUser, listUsers, patchUser, replaceUser, LIST_RESPONSE, type ScimContext } from './users.js';
import { listOf, resourceTypes, schemas, serviceProviderConfig } from './discovery.js';
import { project } from './attributes.js';
import { createGroup, deleteGroup, getGroup, listGroups, membersExcluded, patchGroup, replaceGroup } from './groups.js';

export const SCIM_BASE = '/scim/v2';
const MEDIA = 'application/scim+json; charset=utf-8';

function scimJson(c: Context<AppEnv>, body: unknown, status: 200 | 201 = 200, headers: Record<string, string> = {}): Response {
  return c.body(JSON.stringify(body), status, { 'content-type': MEDIA, ...headers });
}

function scimError(c: Context<AppEnv>, err: ScimError): Response {
  return c.body(JSON.stringify(err.body()), err.status, { 'content-type': MEDIA, ...(err.headers ?? {}) });
}

/** Anything else thrown: Keel's handler decides status and logging; the answer is put in the SCIM error schema. */
async function asScim(c: Context<AppEnv>, keel: Keel, err: unknown): Promise<Response> {
  if (err instanceof ScimError) return scimError(c, err);
  const res = handleError(err, c, keel.log);
  const body = (await res.json().catch(() => ({}))) as { error?: string };
  const retry = res.headers.get('Retry-After');
  return scimError(c, new ScimError(res.status as ScimError['status'], body.error ?? 'The request failed', undefined, retry ? { 'Retry-After': retry } : undefined));
}

/** A JSON body (`application/scim+json` or `application/json`); 415 for another type, 400 `invalidSyntax` for bad JSON. */
async function bodyOf(c: Context<AppEnv>): Promise<unknown> {
  const type = (c.req.header('content-type') ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/scim+json' && type !== 'application/json') throw new ScimError(415, 'The body must be application/scim+json (or application/json)');
  try {
    return JSON.parse(await c.req.text());
  } catch {
    throw new ScimError(400, 'The body is not valid JSON', 'invalidSyntax');
  }
}

const idOf = (c: Context<AppEnv>): string => c.req.param('id') ?? '';

function intParam(c: Context<AppEnv>, name: string): number | undefined {
  const v = c.req.query(name);
  if (v === undefined || v === '') return undefined;
  if (!/^-?\d{1,9}$/.test(v)) throw new ScimError(400, `${name} must be an integer`, 'invalidValue');
  return Number(v);
}

/**
 * The SCIM 2.0 service of every organisation (RFC 7644), at `/scim/v2` outside `/api/v1`: a
 * directory's `kscim_` token names the organisation and reaches nothing else. Every answer, errors
 * included, is `application/scim+json` in SCIM's own shapes (docs/decisions.md "SCIM provisioning");
 * bodies are capped at BODY_LIMIT_BYTES.
 */
export function mountScimProtocol(app: Hono<AppEnv>, keel: Keel): void {
  const scim = new Hono<AppEnv>();
  // Read per request: a server without PUBLIC_URL learns its own from the port it listens on.
  const baseUrl = () => `${keel.config.publicUrl}${SCIM_BASE}`;
  scim.use(
    '*',
    bodyLimit({
      maxSize: keel.config.BODY_LIMIT_BYTES,
      onError: (c) => {
        c.header('Connection', 'close');
        return scimError(c as Context<AppEnv>, new ScimError(413, 'The request body is too large'));
      },
    }),
  );

  type Handler = (c: Context<AppEnv>, ctx: ScimContext) => Response | Promise<Response>;
  const handle =
    (fn: Handler) =>
    async (c: Context<AppEnv>): Promise<Response> => {
      try {
        const caller = await authenticateScimToken(keel, c.req.header('authorization'));
        const info = {
          actor: { type: 'scim_token' as const, id: caller.tokenId },
          ip: c.get('ip') || null,
          userAgent: c.req.header('user-agent') ?? null,
          requestId: c.get('requestId'),
          traceparent: c.get('traceparent'),
        };
        return await fn(c, { keel, caller, baseUrl: baseUrl(), info });
      } catch (err) {
        return asScim(c, keel, err);
      }
    };
  const shaped = (c: Context<AppEnv>, r: Record<string, unknown>) => project(r, c.req.query('attributes'), c.req.query('excludedAttributes'));

  scim.get('/ServiceProviderConfig', handle((c) => scimJson(c, serviceProviderConfig(baseUrl(), keel.config.BODY_LIMIT_BYTES))));
  scim.get('/ResourceTypes', handle((c) => scimJson(c, listOf(resourceTypes(baseUrl())))));
  scim.get('/ResourceTypes/:id', handle((c) => {
    const found = resourceTypes(baseUrl()).find((r) => r.id === idOf(c));
    if (!found) throw new ScimError(404, 'ResourceType not found');
    return scimJson(c, found);
  }));
  scim.get('/Schemas', handle((c) => scimJson(c, listOf(schemas(baseUrl())))));
  scim.get('/Schemas/:id', handle((c) => {
    const found = schemas(baseUrl()).find((s) => s.id === idOf(c));
    if (!found) throw new ScimError(404, 'Schema not found');
    return scimJson(c, found);
  }));

  scim.get('/Users', handle(async (c, ctx) => {
    const page = await listUsers(ctx, { filter: c.req.query('filter'), startIndex: intParam(c, 'startIndex'), count: intParam(c, 'count') });
    return scimJson(c, {
      schemas: [LIST_RESPONSE],
      totalResults: page.totalResults,
      startIndex: page.startIndex,
      itemsPerPage: page.resources.length,
      Resources: page.resources.map((r) => shaped(c, r)),
    });
  }));
  scim.post('/Users', handle(async (c, ctx) => {
    const created = await createUser(ctx, await bodyOf(c));
    return scimJson(c, shaped(c, created), 201, { Location: `${ctx.baseUrl}/Users/${String(created.id)}` });
  }));
  scim.get('/Users/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await getUser(ctx, idOf(c))))));
  scim.put('/Users/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await replaceUser(ctx, idOf(c), await bodyOf(c))))));
  scim.patch('/Users/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await patchUser(ctx, idOf(c), await bodyOf(c))))));
  scim.delete('/Users/:id', handle(async (c, ctx) => {
    await deleteUser(ctx, idOf(c));
    return c.body(null, 204);
  }));

  const withMembers = (c: Context<AppEnv>) => !membersExcluded(c.req.query('excludedAttributes'), c.req.query('attributes'));
  scim.get('/Groups', handle(async (c, ctx) => {
    const page = await listGroups(ctx, { filter: c.req.query('filter'), startIndex: intParam(c, 'startIndex'), count: intParam(c, 'count'), withMembers: withMembers(c) });
    return scimJson(c, {
      schemas: [LIST_RESPONSE],
      totalResults: page.totalResults,
      startIndex: page.startIndex,
      itemsPerPage: page.resources.length,
      Resources: page.resources.map((r) => shaped(c, r)),
    });
  }));
  scim.post('/Groups', handle(async (c, ctx) => {
    const created = await createGroup(ctx, await bodyOf(c));
    return scimJson(c, shaped(c, created), 201, { Location: `${ctx.baseUrl}/Groups/${String(created.id)}` });
  }));
  scim.get('/Groups/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await getGroup(ctx, idOf(c), withMembers(c))))));
  scim.put('/Groups/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await replaceGroup(ctx, idOf(c), await bodyOf(c))))));
  scim.patch('/Groups/:id', handle(async (c, ctx) => scimJson(c, shaped(c, await patchGroup(ctx, idOf(c), await bodyOf(c))))));
  scim.delete('/Groups/:id', handle(async (c, ctx) => {
    await deleteGroup(ctx, idOf(c));
    return c.body(null, 204);
  }));

  scim.all('*', handle((c) => {
    throw new ScimError(404, `No SCIM endpoint ${c.req.method} ${c.req.path}`);
  }));
  app.route(SCIM_BASE, scim);
}
