/**
 * The request-latency histogram is kept by Keel (platform/metrics.ts `SeriesHistogram`, so a request
 * does not pay prom-client's label hashing) and rendered by prom-client's registry: what a scraper
 * reads must be exactly what a prom-client Histogram with the same observations renders.
 */
import { describe, expect, it } from 'vitest';
import * as prom from 'prom-client';
import { LATENCY_BUCKETS, SeriesHistogram } from '../../src/platform/metrics.js';

const NAME = 'keel_http_request_duration_seconds';
const HELP = 'Time from the first middleware to the end of the answer';
const LABELS = ['method', 'route', 'status'] as const;

/** Values on, between and beyond the bounds (0.001 is a bound: it counts in its own bucket). */
const OBSERVED: [Record<string, string>, number][] = [
  [{ method: 'GET', route: '/api/v1/users/me', status: '2xx' }, 0.0004],
  [{ method: 'GET', route: '/api/v1/users/me', status: '2xx' }, 0.001],
  [{ method: 'GET', route: '/api/v1/users/me', status: '2xx' }, 0.0031],
  [{ method: 'GET', route: '/api/v1/users/me', status: '2xx' }, 42],
  [{ method: 'POST', route: '/api/v1/users/:id', status: '4xx' }, 0.2],
  [{ method: 'GET', route: '/api/v1/*', status: '4xx' }, 0],
];

async function rendered(make: (registry: prom.Registry) => { observe(labels: Record<string, string>, value: number): void }): Promise<string> {
  const registry = new prom.Registry();
  const histogram = make(registry);
  for (const [labels, value] of OBSERVED) histogram.observe(labels, value);
  return registry.metrics();
}

describe('the request-latency histogram', () => {
  it('renders exactly as a prom-client Histogram with the same observations', async () => {
    const theirs = await rendered((registry) => new prom.Histogram({ name: NAME, help: HELP, labelNames: [...LABELS], buckets: [...LATENCY_BUCKETS], registers: [registry] }));
    const ours = await rendered((registry) => {
      const h = new SeriesHistogram(NAME, HELP, LABELS, LATENCY_BUCKETS);
      registry.registerMetric(h as unknown as prom.Metric);
      return h;
    });
    expect(ours).toBe(theirs);
    expect(ours).toContain(`${NAME}_bucket{le="0.001",method="GET",route="/api/v1/users/me",status="2xx"} 2`);
    expect(ours).toContain(`${NAME}_count{method="GET",route="/api/v1/users/me",status="2xx"} 4`);
  });

  it('observes through a series resolved once, and refuses a label it does not have', () => {
    const h = new SeriesHistogram(NAME, HELP, LABELS, LATENCY_BUCKETS);
    const series = h.series({ method: 'GET', route: '/x', status: '2xx' });
    series.observe(0.002);
    series.observe(0.002);
    h.observe({ method: 'GET', route: '/x', status: '2xx' }, 1);
    const count = h.get().values.find((v) => v.metricName === `${NAME}_count`);
    expect(count?.value).toBe(3);
    expect(() => h.series({ method: 'GET', path: '/raw/path' })).toThrow(/path/);
  });
});
