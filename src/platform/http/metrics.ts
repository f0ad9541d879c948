import { Hono, type Context, type Env } from 'hono';
import { serve } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { routePath } from 'hono/route';
import { constantTimeEqual } from '../crypto.js';
import type { Metrics } from '../metrics.js';
import { LATENCY_BUCKETS, METRIC } from '../metrics.js';
import type { OnAnswered } from './middleware.js';
import { errorResponse, platformError } from './errors.js';

/**
 * `GET /metrics`: the Prometheus text exposition (README "Operating"). Outside /api/v1 and outside
 * the OpenAPI document: it is for the operator's scraper, not for API clients. Mounted only when
 * METRICS_ENABLED (otherwise the path is a 404 like any unknown one). With METRICS_TOKEN set, the
 * scraper must send `Authorization: Bearer <token>` (compared in constant time); otherwise 401.
 */
export function mountMetrics<E extends Env>(app: Hono<E>, metrics: Metrics, token: string | undefined): void {
  if (!metrics.enabled) return;
  const expected = token === undefined ? undefined : `Bearer ${token}`;
  app.get('/metrics', async (c) => {
    if (expected !== undefined && !constantTimeEqual(c.req.header('authorization') ?? '', expected)) {
      return errorResponse(c, platformError('unauthorized', { message: 'The metrics token is missing or wrong', headers: { 'WWW-Authenticate': 'Bearer realm="metrics"' } }));
    }
    const { contentType, body } = await metrics.render();
    c.header('Cache-Control', 'no-store');
    return c.body(body, 200, { 'Content-Type': contentType });
  });
}

/**
 * Observes each answer in the latency histogram, labelled by the route template hono matched
 * (hono's `routePath`, e.g. `/api/v1/users/:id`; a path no route matched carries the pattern of the
 * last middleware it passed, `/api/v1/*` or `*`), never the raw path: label values stay bounded.
 * Undefined when metrics are off, so the request path pays nothing.
 */
export function latencyObserver(metrics: Metrics): OnAnswered | undefined {
  if (!metrics.enabled) return undefined;
  const histogram = metrics.histogram(METRIC.httpDuration, 'Time from the first middleware to the end of the answer, by method, route template and status class', ['method', 'route', 'status'], LATENCY_BUCKETS);
  const classes = ['1xx', '2xx', '3xx', '4xx', '5xx'];
  // One series per method, route template and status class (a bounded set), resolved once.
  const series = new Map<string, { observe(value: number): void }>();
  return (c: Context, status: number, ms: number) => {
    const method = c.req.method;
    const route = routePath(c);
    const cls = classes[Math.floor(status / 100) - 1] ?? 'other';
    const key = `${method} ${cls} ${route}`;
    let s = series.get(key);
    if (!s) {
      s = histogram.series({ method, route, status: cls });
      series.set(key, s);
    }
    s.observe(ms / 1000);
  };
}

/**
 * `GET /metrics` on a listener of its own, for `keel worker` (which serves no API): its delivery
 * outcomes and process figures are scraped from HOST:WORKER_METRICS_PORT, with the same token rule.
 * Anything else is a 404 in the error envelope. Resolves once listening, with the port taken.
 */
export async function serveMetrics(metrics: Metrics, token: string | undefined, host: string, port: number): Promise<{ port: number; close(): Promise<void> }> {
  const app = new Hono();
  mountMetrics(app, metrics, token);
  app.notFound((c) => errorResponse(c, platformError('not_found', { message: `No route for ${c.req.method} ${c.req.path}` })));
  const server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s));
    s.once('error', reject);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
