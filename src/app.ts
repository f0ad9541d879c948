import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Keel } from './keel.js';
import type { AppEnv } from './app-env.js';
import { createRouter, declaredNonJsonBodies, mountDocs } from './platform/http/openapi.js';
import { apiGate, apiGateStatuses, requestContext, uploadLimitsOf } from './platform/http/middleware.js';
import { AppError, errorResponse, handleError } from './platform/http/errors.js';
import { mountHealth, mountReady } from './platform/http/health.js';
import { latencyObserver, mountMetrics } from './platform/http/metrics.js';
import { methodIndex } from './platform/http/router.js';
import { moduleRoutes } from './modules/index.js';
import { consoleHandler } from './platform/http/console.js';

export const API_BASE = '/api/v1';

/** The HTTP application: platform middleware, /health, and each module's routes under /api/v1. */
export function buildApp(keel: Keel): OpenAPIHono<AppEnv> {
  const app = createRouter<AppEnv>();
  const trusted = new Set((keel.config.TRUST_PROXY ?? '').split(',').map((s) => s.trim()).filter(Boolean));

  app.use('*', requestContext(keel.log, trusted, latencyObserver(keel.metrics)));
  app.onError((err, c) => handleError(err, c, keel.log));
  // A path that exists with other methods is 405 with Allow; anything else 404.
  const allowedOn = methodIndex(() => app.routes);
  // The web console (CONSOLE_DIR, set by `keel serve`) answers the GET paths no route claims.
  const consolePage = keel.config.CONSOLE_DIR ? consoleHandler(keel.config.CONSOLE_DIR) : null;
  app.notFound((c) => {
    const page = consolePage?.(c);
    if (page) return page;
    const allowed = allowedOn(c.req.path);
    if (allowed.length > 0) {
      return errorResponse(c, new AppError(405, 'method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}`, undefined, { Allow: allowed.join(', ') }));
    }
    return errorResponse(c, new AppError(404, 'not_found', `No route for ${c.req.method} ${c.req.path}`));
  });

  mountHealth(app, keel.config.serviceVersion, keel.database);
  mountReady(app, { database: keel.database, redis: keel.redis });
  mountMetrics(app, keel.metrics, keel.config.METRICS_TOKEN);

  const api = createRouter<AppEnv>({ gate: apiGateStatuses });
  app.use(
    `${API_BASE}/*`,
    apiGate({
      // Routes that declare a form or file body (the SAML ACS) are exempt from the JSON-only 415.
      allowNonJson: declaredNonJsonBodies(api as unknown as OpenAPIHono<never>, API_BASE),
      maxBodyBytes: keel.config.BODY_LIMIT_BYTES,
      uploads: uploadLimitsOf(keel),
      onTooLarge: (c) => {
        // The rest of the body is never read: tell the client not to reuse this connection.
        c.header('Connection', 'close');
        return errorResponse(c, new AppError(413, 'payload_too_large', 'The request body is too large'));
      },
    }),
  );

  for (const mount of moduleRoutes) mount(api, keel);
  app.route(API_BASE, api);

  app.doc31(`${API_BASE}/openapi.json`, {
    openapi: '3.1.0',
    info: { title: 'Keel API', version: keel.config.serviceVersion, description: 'Identity, SSO, webhooks and agent updates' },
    servers: [{ url: keel.config.publicUrl }],
  });
  mountDocs(app as unknown as OpenAPIHono<never>, `${API_BASE}/docs`, `${API_BASE}/openapi.json`);
  return app;
}
