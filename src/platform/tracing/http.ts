import type { MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { AppEnv } from '../../app-env.js';
import { activeTracer } from './index.js';

/** Reads the two W3C headers from a hono request (the propagator asks for no other). */
const headerGetter = {
  get: (carrier: { header(name: string): string | undefined }, key: string) => carrier.header(key),
  keys: () => ['traceparent', 'tracestate'],
};

/**
 * One server span per request (docs/deploy.md "Tracing"), named `METHOD /route/template` once the
 * route is known, with the method, the route template, the status and the caller's organisation and
 * partner when the request resolved them. An incoming `traceparent` is its parent. Nothing of the
 * path's values, the query string, the headers or the body is recorded.
 *
 * Installed by the app only while tracing is on (`activeTracer`): off, the request path has no
 * extra middleware at all.
 */
export function traceRequests(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const tracer = activeTracer;
    if (!tracer) return next();
    const method = c.req.method;
    const parent = propagation.extract(ROOT_CONTEXT, c.req, headerGetter);
    const span = tracer.startSpan(method, { kind: SpanKind.SERVER, attributes: { 'http.request.method': method } }, parent);
    try {
      await context.with(trace.setSpan(parent, span), next);
    } finally {
      const route = routePath(c);
      const status = c.res.status;
      span.updateName(`${method} ${route}`);
      span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', status);
      const access = c.get('access') as { orgId?: string | null; partnerId?: string | null } | undefined;
      if (access?.orgId) span.setAttribute('keel.org_id', access.orgId);
      if (access?.partnerId) span.setAttribute('keel.partner_id', access.partnerId);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    }
  };
}
