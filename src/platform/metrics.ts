import type * as PromClient from 'prom-client';
import { hashQueueDepth, hashQueueMax, hashRefusals } from './argon2-pool.js';

/**
 * Keel's metrics port (docs/decisions.md "Production readiness"; README "Operating").
 *
 * Every module counts through `keel.metrics`, a part of the container: a module never imports another
 * module to be measured, and nothing here knows a module. With METRICS_ENABLED=false (the default)
 * `keel.metrics` is a set of no-ops and prom-client is never loaded; with it on, each Keel has its own
 * prom-client registry, which `GET /metrics` (platform/http/metrics.ts) renders.
 *
 * A module adds its metrics by name: `keel.metrics.counter(name, help, labels)` answers the same
 * counter for the same name, so a call site may ask for it each time, or keep it. A gauge that is
 * cheaper to read than to keep up to date takes a `collect` function, run on each scrape (one COUNT).
 * Label values must come from a small fixed set (an outcome, a status, a route template): never an
 * id, an email or a raw path.
 */

export type Labels = Record<string, string>;

export interface CounterHandle {
  inc(labels?: Labels, value?: number): void;
}

export interface GaugeHandle {
  set(labels: Labels, value: number): void;
}

export interface HistogramHandle {
  observe(labels: Labels, value: number): void;
  /** The series of one set of labels, resolved once: its `observe` is a bucket search and three additions (hot paths). */
  series(labels: Labels): { observe(value: number): void };
}

export interface Metrics {
  /** False unless METRICS_ENABLED: every handle is then a no-op. */
  readonly enabled: boolean;
  counter(name: string, help: string, labelNames?: readonly string[]): CounterHandle;
  /** A gauge; with `collect`, its values are set by that function on each scrape. */
  gauge(name: string, help: string, labelNames?: readonly string[], collect?: (gauge: GaugeHandle) => void | Promise<void>): GaugeHandle;
  histogram(name: string, help: string, labelNames: readonly string[], buckets: readonly number[]): HistogramHandle;
  /** For anything else prom-client offers (a summary, a metric with its own collect): called at once when enabled, never otherwise. */
  register(define: (prom: typeof PromClient, registry: PromClient.Registry) => void): void;
  /** The Prometheus text exposition of every metric. */
  render(): Promise<{ contentType: string; body: string }>;
}

const NOOP_SERIES = { observe: () => undefined };
const NOOP_HANDLE: CounterHandle & GaugeHandle & HistogramHandle = { inc: () => undefined, set: () => undefined, observe: () => undefined, series: () => NOOP_SERIES };

/** The port when metrics are off. */
export const noMetrics: Metrics = {
  enabled: false,
  counter: () => NOOP_HANDLE,
  gauge: () => NOOP_HANDLE,
  histogram: () => NOOP_HANDLE,
  register: () => undefined,
  render: () => Promise.resolve({ contentType: 'text/plain; version=0.0.4; charset=utf-8', body: '' }),
};

/** Seconds; from a cached read (~1 ms) to a queued login (seconds). */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

/** The metrics every Keel has, named once here so call sites and the README agree. */
export const METRIC = {
  httpDuration: 'keel_http_request_duration_seconds',
  authOutcomes: 'keel_auth_outcomes_total',
  hashQueueDepth: 'keel_hash_queue_depth',
  hashQueueCapacity: 'keel_hash_queue_capacity',
  hashRefused: 'keel_hash_refused_total',
  /** Agents (modules/agents/metrics.ts): heartbeats by outcome, update reports by state, devices by status (read on scrape). */
  agentHeartbeats: 'keel_agent_heartbeats_total',
  agentUpdateReports: 'keel_agent_update_reports_total',
  devices: 'keel_devices',
} as const;

export type AuthStep = 'login' | 'mfa';
/** `locked`: for a login, the failure that locked the account; for MFA, a code refused by the verify limit. */
export type AuthOutcome = 'success' | 'failure' | 'challenge' | 'locked';

/** Counts one sign-in decision (identity for passwords, mfa for second factors). */
export function countAuthOutcome(metrics: Metrics, step: AuthStep, outcome: AuthOutcome): void {
  if (!metrics.enabled) return;
  metrics.counter(METRIC.authOutcomes, 'Sign-in decisions by step (login: the password, mfa: the second factor) and outcome', ['step', 'outcome']).inc({ step, outcome });
}

/**
 * The process's own figures, all read on each scrape. Not prom-client's `collectDefaultMetrics`: its
 * GC observer runs on every garbage collection, and with it `GET /users/me` measured 25-50% fewer
 * requests a second beside the same Keel without metrics (three runs); the next run without it showed
 * no difference, a later one did (docs/decisions.md "Production readiness": not settled).
 */
function processMetrics(metrics: Metrics): void {
  const started = Date.now() / 1000 - process.uptime();
  metrics.gauge('keel_process_start_time_seconds', 'When this process started, in Unix seconds', [], (g) => g.set({}, Math.round(started)));
  metrics.gauge('keel_process_cpu_seconds', 'CPU time this process has used (user and system), in seconds', ['mode'], (g) => {
    const { user, system } = process.cpuUsage();
    g.set({ mode: 'user' }, user / 1e6);
    g.set({ mode: 'system' }, system / 1e6);
  });
  metrics.gauge('keel_process_memory_bytes', 'Memory of this process: resident set, V8 heap used and total, external', ['kind'], (g) => {
    const m = process.memoryUsage();
    g.set({ kind: 'rss' }, m.rss);
    g.set({ kind: 'heap_used' }, m.heapUsed);
    g.set({ kind: 'heap_total' }, m.heapTotal);
    g.set({ kind: 'external' }, m.external);
  });
  let last = performance.eventLoopUtilization();
  metrics.gauge('keel_process_event_loop_utilization', 'Share of time the event loop was busy since the previous scrape (0 to 1)', [], (g) => {
    const now = performance.eventLoopUtilization();
    g.set({}, performance.eventLoopUtilization(now, last).utilization);
    last = now;
  });
}

interface Series {
  labels: Labels;
  /** Observations per bucket (not cumulative); the last slot is beyond the largest bound (+Inf). */
  counts: Float64Array;
  sum: number;
  count: number;
}

/**
 * A histogram kept by Keel and rendered by prom-client's registry, which takes any object with a
 * metric's name, help, type, aggregator, `get()` and `reset()` (the shape its own metrics have).
 * prom-client's `histogram.labels(...).observe(v)` validates and hashes its labels on every call
 * (0.37 µs alone, ~2.4 % of a cached read's main thread under `perf`; metrics on cost a read 2-5 µs
 * in all: docs/decisions.md "Production readiness"). Here a series is resolved (and its labels checked) once;
 * `observe` is a bucket search and three additions. The exposition is the same as prom-client's
 * Histogram (`_bucket` with cumulative counts and `le`, `+Inf`, `_sum`, `_count`).
 */
export class SeriesHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #bounds: readonly number[];
  readonly #labelNames: readonly string[];
  readonly #series = new Map<string, Series>();

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly string[],
    bounds: readonly number[],
  ) {
    this.#labelNames = [...labelNames];
    this.#bounds = [...bounds].sort((a, b) => a - b);
  }

  series(labels: Labels): { observe(value: number): void } {
    const key = this.#labelNames.map((n) => labels[n] ?? '').join('\u0000');
    let s = this.#series.get(key);
    if (!s) {
      for (const name of Object.keys(labels)) {
        if (!this.#labelNames.includes(name)) throw new Error(`Label ${name} is not a label of ${this.name}`);
      }
      s = { labels: { ...labels }, counts: new Float64Array(this.#bounds.length + 1), sum: 0, count: 0 };
      this.#series.set(key, s);
    }
    const series = s;
    const bounds = this.#bounds;
    return {
      observe(value: number): void {
        if (!Number.isFinite(value)) return;
        let i = 0;
        while (i < bounds.length && value > (bounds[i] as number)) i++;
        series.counts[i] = (series.counts[i] ?? 0) + 1;
        series.sum += value;
        series.count++;
      },
    };
  }

  observe(labels: Labels, value: number): void {
    this.series(labels).observe(value);
  }

  /** The values as prom-client's registry renders them. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { labels: Record<string, string | number>; value: number; metricName: string }[] } {
    const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
    for (const s of this.#series.values()) {
      let cumulative = 0;
      this.#bounds.forEach((le, i) => {
        cumulative += s.counts[i] ?? 0;
        values.push({ labels: { le, ...s.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${this.name}_bucket` });
      values.push({ labels: s.labels, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: s.labels, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    this.#series.clear();
  }
}

/** A prom-client backed port with its own registry (one per Keel: tests run several in one process). */
export async function createMetrics(enabled: boolean): Promise<Metrics> {
  if (!enabled) return noMetrics;
  // A CommonJS package: bundled or not, its exports may arrive on `default`.
  const loaded = (await import('prom-client')) as typeof PromClient & { default?: typeof PromClient };
  const prom = loaded.default ?? loaded;
  const registry = new prom.Registry();
  const byName = new Map<string, unknown>();
  function once<T>(name: string, make: () => T): T {
    let metric = byName.get(name) as T | undefined;
    if (!metric) {
      metric = make();
      byName.set(name, metric);
    }
    return metric;
  }
  const metrics: Metrics = {
    enabled: true,
    counter(name, help, labelNames = []) {
      return once(name, (): CounterHandle => {
        const counter = new prom.Counter({ name, help, labelNames: [...labelNames], registers: [registry] });
        return { inc: (labels = {}, value = 1) => counter.inc(labels, value) };
      });
    },
    gauge(name, help, labelNames = [], collect) {
      return once(name, () => {
        const gauge: PromClient.Gauge = new prom.Gauge({
          name,
          help,
          labelNames: [...labelNames],
          registers: [registry],
          ...(collect ? { collect: () => collect({ set: (labels, value) => gauge.set(labels, value) }) } : {}),
        });
        return gauge;
      });
    },
    histogram(name, help, labelNames, buckets) {
      return once(name, (): HistogramHandle => {
        const histogram = new SeriesHistogram(name, help, labelNames, buckets);
        registry.registerMetric(histogram as unknown as PromClient.Metric);
        return histogram;
      });
    },
    register(define) {
      define(prom, registry);
    },
    async render() {
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
  processMetrics(metrics);
  // The password-hashing queue (platform/argon2-pool.ts): read on each scrape.
  metrics.gauge(METRIC.hashQueueDepth, 'Password hashes queued or running in this process', [], (g) => g.set({}, hashQueueDepth()));
  metrics.gauge(METRIC.hashQueueCapacity, 'The most password hashes this process holds before refusing with 503 overloaded (HASH_QUEUE_MAX)', [], (g) => g.set({}, hashQueueMax()));
  let refusalsSeen = hashRefusals();
  metrics.register((p, r) => {
    new p.Counter({
      name: METRIC.hashRefused,
      help: 'Requests refused with 503 overloaded because the password-hashing queue was full',
      registers: [r],
      collect() {
        const now = hashRefusals();
        this.inc(now - refusalsSeen);
        refusalsSeen = now;
      },
    });
  });
  return metrics;
}
