import { OpenAPIHono, z } from '@hono/zod-openapi';
import type { Env, MiddlewareHandler } from 'hono';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { validationError, zodFields } from './errors.js';
import { declaresQuery, strictRequest, strictSchema, unstorableFields } from './validation.js';
import { CachedTrieRouter } from './router.js';
import { documentedRoute, SECURITY_SCHEMES, withMiddlewareQuery } from './route-docs.js';
import type { ErrorStatus } from './schemas.js';
import { recordAdmission } from './admission.js';

/**
 * A router whose zod validation failures become the 400 `validation_failed` envelope. Every module
 * builds its routes with this, so every request and response schema lands in the OpenAPI document.
 *
 * Every route registered here gets the platform's request rules (platform/http/validation.ts): its
 * JSON body validated strictly (unknown fields refused, deeply) and checked for text PostgreSQL cannot
 * store, and its query strict (a parameter neither the route nor its middleware declares is refused).
 * The document keeps the route as declared; only validation uses the strict copy. `gate` names
 * the statuses of the middleware every request of this router passes first (the API gate), so each
 * operation declares them.
 */
export function createRouter<E extends Env>(opts: { gate?: (method: string) => readonly ErrorStatus[] } = {}): OpenAPIHono<E> {
  const app = new OpenAPIHono<E>({
    router: new CachedTrieRouter(),
    defaultHook: (result) => {
      if (!result.success) {
        throw validationError(zodFields(result.error, result.target === 'json' ? undefined : result.target));
      }
      if (result.target === 'json') {
        const fields = unstorableFields(result.data);
        if (fields.length > 0) throw validationError(fields);
      }
    },
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', SECURITY_SCHEMES.bearerAuth);
  app.openAPIRegistry.registerComponent('securitySchemes', 'apiKey', SECURITY_SCHEMES.apiKey);
  app.openAPIRegistry.registerComponent('securitySchemes', 'deviceToken', SECURITY_SCHEMES.deviceToken);
  const register = app.openapi;
  const openapi: typeof register = (declared, handler, hook) => {
    // The query parameters the middleware reads (the scope guard's) count as declared (route-docs.ts).
    const config = withMiddlewareQuery(declared);
    // The document: the route as declared, plus what its middleware enforces (route-docs.ts).
    // 400: every route refuses a query parameter it does not declare (strictRequest), whatever else it answers.
    if (!config.hide) app.openAPIRegistry.registerPath(documentedRoute(config, [400, ...(opts.gate?.(config.method) ?? [])]));
    // An admission gate among the middleware is also asked before the request is read (admission.ts).
    recordAdmission(app, config.method, config.path, config.middleware);
    const middleware = declaresQuery(config.request) ? config.middleware : [...[config.middleware ?? []].flat(), refuseQuery];
    return register({ ...config, middleware, request: strictRequest(config.request) as typeof config.request, hide: true }, handler, hook);
  };
  app.openapi = openapi;
  return app;
}

const NO_QUERY = strictSchema(z.object({}), false);

/**
 * The query rule of a route that declares no query: any parameter is a 400 naming it, as the strict
 * empty object's validation answers, and a URL without one costs a character search (measured: a zod
 * validation of every request's empty query cost ~2 µs of a 37 µs cached read and 3-5 µs of a heartbeat,
 * bench/ab.ts). Runs where the query validator would: after the route's own middleware, before the body's.
 */
export const refuseQuery: MiddlewareHandler = async (c, next) => {
  const url = c.req.url;
  const at = url.indexOf('?');
  if (at !== -1 && at < url.length - 1) {
    const parsed = NO_QUERY.safeParse(c.req.query());
    if (!parsed.success) throw validationError(zodFields(parsed.error, 'query'));
  }
  c.req.addValidatedData('query', {});
  await next();
};

// Only the package's folder is needed: resolving package.json, rather than requiring the package,
// keeps its 1.5 MB bundle out of start-up (it is read from disk when the docs page asks for it).
const swaggerDir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
const ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'swagger-ui-standalone-preset.js': 'text/javascript; charset=utf-8',
};

/**
 * The docs page's policy: scripts and styles only from Keel itself (the page has no inline script:
 * its start-up is `assets/init.js`), images from itself or `data:` (swagger-ui's icons), requests
 * (the OpenAPI document, "Try it out") only to Keel, no plugins, no framing (with
 * `X-Frame-Options: DENY` for browsers without `frame-ancestors`).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');
const DOCS_HEADERS = { 'Content-Security-Policy': DOCS_CSP, 'X-Frame-Options': 'DENY', 'X-Content-Type-Options': 'nosniff' };

/** The docs page and its assets, served from the swagger-ui-dist package (no CDN), under `DOCS_CSP`. */
export function mountDocs(app: OpenAPIHono<never>, base: string, specPath: string): void {
  const html = `<!doctype html><html><head><meta charset="utf-8"><title>Keel API</title>
<link rel="stylesheet" href="${base}/assets/swagger-ui.css"></head><body><div id="ui"></div>
<script src="${base}/assets/swagger-ui-bundle.js"></script>
<script src="${base}/assets/init.js"></script></body></html>`;
  const init = `window.ui = SwaggerUIBundle({ url: ${JSON.stringify(specPath)}, dom_id: '#ui' });`;
  app.get(base, (c) => c.html(html, 200, DOCS_HEADERS));
  app.get(`${base}/assets/init.js`, (c) => c.body(init, 200, { ...DOCS_HEADERS, 'Content-Type': 'text/javascript; charset=utf-8' }));
  app.get(`${base}/assets/:file`, (c) => {
    const file = c.req.param('file');
    const type = ASSETS[file];
    if (!type) return c.json({ error: 'Not found', code: 'not_found' }, 404);
    return c.body(readFileSync(join(swaggerDir, file)), 200, { ...DOCS_HEADERS, 'Content-Type': type, 'Cache-Control': 'public, max-age=86400' });
  });
}

/**
 * Which paths take a request body other than JSON, read from what the routes declare (their
 * `request.body.content` types in the OpenAPI registry), so the API gate's 415 rule (docs/decisions.md "API conventions": 415
 * only for a body type the route does not declare) follows the route table rather than a list kept
 * by hand. `prefix` is where the router is mounted. The set is built on first use, after every
 * module has mounted its routes.
 */
export function declaredNonJsonBodies(router: OpenAPIHono<never>, prefix: string): (path: string) => boolean {
  let patterns: RegExp[] | null = null;
  const build = (): RegExp[] => {
    const out: RegExp[] = [];
    for (const d of router.openAPIRegistry.definitions) {
      if (d.type !== 'route') continue;
      const content = (d.route.request?.body as { content?: Record<string, unknown> } | undefined)?.content ?? {};
      if (!Object.keys(content).some((type) => !/json/i.test(type))) continue;
      const path = `${prefix}${d.route.path}`.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^/}]+\}/g, '[^/]+');
      out.push(new RegExp(`^${path}$`));
    }
    return out;
  };
  return (path) => (patterns ??= build()).some((re) => re.test(path));
}
