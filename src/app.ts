import { openApiWebhooks } from './event-catalogue.js';
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { Keel } from './keel.js';
import type { AppEnv } from './app-env.js';
import { createRouter, declaredNonJsonBodies, mountDocs } from './platform/http/openapi.js';
import { activeTracer } from './platform/tracing/index.js';
import { traceRequests } from './platform/tracing/http.js';
import { apiGate, apiGateStatuses, requestContext, uploadLimitsOf } from './platform/http/middleware.js';
import { errorResponse, handleError, platformError } from './platform/http/errors.js';
import { mountHealth, mountReady } from './platform/http/health.js';
import { latencyObserver, mountMetrics } from './platform/http/metrics.js';
import { methodIndex } from './platform/http/router.js';
import { moduleRoutes } from './modules/index.js';
import { consoleHandler } from './platform/http/console.js';
import { mountScimProtocol } from './modules/scim/protocol-routes.js';
import { earlyAdmission } from './platform/http/admission.js';
import { refusalLogOf } from './platform/http/refusal-log.js';
import { RefusalHold } from './platform/http/refusal-hold.js';

export const API_BASE = '/api/v1';

/** Every tag an operation uses, declared once with its description (the docs page groups operations by them). */
export const API_TAGS = [
  { name: 'health', description: 'Liveness and readiness of this process and its dependencies' },
  { name: 'auth', description: 'Registration, sign-in, tokens, sessions and password changes of the signed-in user' },
  { name: 'mfa', description: 'Second factors: authenticator apps (TOTP), SMS, passkeys and recovery codes' },
  { name: 'users', description: 'Users of a partner or organisation, their invitations, roles, sessions and MFA resets' },
  { name: 'roles', description: 'Roles, their permissions and the permissions a caller holds' },
  { name: 'api-keys', description: 'API keys: bearer tokens for programs, with permissions narrowed from their creator' },
  { name: 'partners', description: 'Partners (managed-service providers) and their email domains' },
  { name: 'organizations', description: 'Organisations of a partner and their email domains' },
  { name: 'sites', description: 'Sites (locations) of an organisation' },
  { name: 'device-groups', description: 'Groups of devices within an organisation' },
  { name: 'devices', description: 'Enrolled devices, their enrolment keys and settings' },
  { name: 'agents', description: 'The agent: enrolment, heartbeat, update decisions and the release channel' },
  { name: 'events', description: 'Events published into the webhook pipeline' },
  { name: 'webhooks', description: 'Webhook subscriptions, their deliveries and signing secrets' },
  { name: 'audit', description: 'The audit log: who did what, when, from where' },
  { name: 'sso', description: 'Organisation single sign-on: OIDC and SAML providers, sign-in flows and the code exchange' },
  { name: 'scim', description: 'SCIM provisioning: the tokens and settings of an organisation\'s directory (the SCIM service itself is at /scim/v2)' },
];

/** The HTTP application: platform middleware, /health, and each module's routes under /api/v1. */
export function buildApp(keel: Keel): OpenAPIHono<AppEnv> {
  const app = createRouter<AppEnv>();
  const trusted = new Set((keel.config.TRUST_PROXY ?? '').split(',').map((s) => s.trim()).filter(Boolean));

  // While tracing is on (docs/deploy.md "Tracing"), a server span around everything else.
  if (activeTracer) app.use('*', traceRequests());
  // The API router is filled below; its admission gates are read on the first request (admission.ts).
  const api = createRouter<AppEnv>({ gate: apiGateStatuses });
  const hold = new RefusalHold(keel.config.REFUSAL_HOLD_AFTER);
  keel.onClose(() => Promise.resolve(hold.close()));
  app.use('*', requestContext(keel.log, trusted, latencyObserver(keel.metrics), { admit: earlyAdmission(api, API_BASE), refusals: refusalLogOf(keel), hold }, keel.requests));
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
      return errorResponse(c, platformError('method_not_allowed', { message: `${c.req.method} is not allowed on ${c.req.path}`, headers: { Allow: allowed.join(', ') } }));
    }
    return errorResponse(c, platformError('not_found', { message: `No route for ${c.req.method} ${c.req.path}` }));
  });

  mountHealth(app, keel.config.serviceVersion, keel.database);
  mountReady(app, { database: keel.database, redis: keel.redis });
  mountMetrics(app, keel.metrics, keel.config.METRICS_TOKEN);

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
        return errorResponse(c, platformError('payload_too_large'));
      },
    }),
  );

  for (const mount of moduleRoutes) mount(api, keel);
  app.route(API_BASE, api);
  // SCIM 2.0 (RFC 7644) outside /api/v1: its own media type, error schema and discovery documents.
  mountScimProtocol(app, keel);

  const documentConfig: Parameters<typeof app.getOpenAPI31Document>[0] = {
    openapi: '3.1.0',
    info: {
      title: 'Keel API',
      version: keel.config.serviceVersion,
      description: 'Identity, SSO, webhooks and agent updates',
      contact: { name: 'The operators of this Keel server', url: keel.config.publicUrl },
    },
    servers: [{ url: keel.config.publicUrl }],
    tags: API_TAGS,
  };
  // The document, with what a receiver gets per event type in its `webhooks` section (built from the
  // event catalogue's JSON Schemas: docs/decisions.md "Event catalogue").
  const webhooks = openApiWebhooks();
  app.get(`${API_BASE}/openapi.json`, (c) => c.json({ ...app.getOpenAPI31Document(documentConfig), webhooks }));
  mountDocs(app as unknown as OpenAPIHono<never>, `${API_BASE}/docs`, `${API_BASE}/openapi.json`);
  return app;
}
