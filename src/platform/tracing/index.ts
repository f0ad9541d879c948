import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';

/*
 * OpenTelemetry tracing (docs/deploy.md "Tracing", docs/decisions.md "Tracing").
 *
 * Off unless an OTLP endpoint is configured. Off means no provider is registered and nothing here
 * runs on a request: every instrumented place tests `activeTracer` (one module variable) and takes its
 * plain path when it is null, so no span object, closure or context is made. On, the SDK (loaded only
 * then, the 3.x line) registers a provider with Node's AsyncLocalStorage context manager and the W3C propagator;
 * spans are made through `@opentelemetry/api` only.
 *
 * Child spans (database statements, Redis commands, hashing, outbound calls) are made only inside a
 * trace (an active span): background polling with no request behind it makes none.
 */

/** The OTEL_* settings Keel reads (src/config.ts); the exporter also reads OTEL_EXPORTER_OTLP(_TRACES)_HEADERS and the resource detector OTEL_RESOURCE_ATTRIBUTES itself. */
export interface TracingSettings {
  OTEL_EXPORTER_OTLP_ENDPOINT?: string | undefined;
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?: string | undefined;
  OTEL_SERVICE_NAME?: string | undefined;
  OTEL_SDK_DISABLED?: boolean | undefined;
  OTEL_TRACES_SAMPLER?: TracesSampler | undefined;
  OTEL_TRACES_SAMPLER_ARG?: string | undefined;
  serviceVersion?: string | undefined;
}

export type TracesSampler = 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio';

/** The tracer while tracing is on; null when off (the one test every instrumented place makes). */
export let activeTracer: Tracer | null = null;
let shutdown: (() => Promise<void>) | null = null;
let flush: (() => Promise<void>) | null = null;

/** Where spans are exported: the traces endpoint as given, or `<endpoint>/v1/traces` (the OTLP/HTTP rule); null: tracing is off. */
export function tracesUrl(settings: TracingSettings): string | null {
  if (settings.OTEL_SDK_DISABLED) return null;
  if (settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (settings.OTEL_EXPORTER_OTLP_ENDPOINT) return `${settings.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`;
  return null;
}

type SdkTrace = typeof import('@opentelemetry/sdk-trace');
type Sampler = import('@opentelemetry/sdk-trace').Sampler;

/**
 * The sampler `OTEL_TRACES_SAMPLER(_ARG)` name (the specification's values; default
 * `parentbased_always_on`). The SDK's 3.x line leaves reading these variables to its callers.
 */
export function samplerOf(sdk: Pick<SdkTrace, 'AlwaysOnSampler' | 'AlwaysOffSampler' | 'TraceIdRatioBasedSampler' | 'ParentBasedSampler'>, settings: TracingSettings): Sampler {
  const name = settings.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on';
  const ratio = settings.OTEL_TRACES_SAMPLER_ARG === undefined ? 1 : Number(settings.OTEL_TRACES_SAMPLER_ARG);
  const root = name.endsWith('always_off') ? new sdk.AlwaysOffSampler() : name.endsWith('traceidratio') ? new sdk.TraceIdRatioBasedSampler(ratio) : new sdk.AlwaysOnSampler();
  return name.startsWith('parentbased_') ? new sdk.ParentBasedSampler({ root }) : root;
}

/**
 * Starts tracing when an endpoint is configured (once per process; a second call is a no-op) and
 * answers whether it is on. Call it before the database opens: the driver is instrumented at open.
 */
export async function startTracing(settings: TracingSettings, opts: { batchDelayMs?: number } = {}): Promise<boolean> {
  if (activeTracer) return true;
  const url = tracesUrl(settings);
  if (!url) return false;
  const [sdk, { AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, { OTLPTraceExporter }, { detectResources, envDetector, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
    import('@opentelemetry/exporter-trace-otlp-proto'),
    import('@opentelemetry/resources'),
  ]);
  // Keel's name and version, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
  const resource = resourceFromAttributes({ 'service.name': settings.OTEL_SERVICE_NAME ?? 'keel', ...(settings.serviceVersion ? { 'service.version': settings.serviceVersion } : {}) }).merge(
    detectResources({ detectors: [envDetector] }),
  );
  const processor = new sdk.BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url }), ...(opts.batchDelayMs !== undefined ? { scheduledDelayMillis: opts.batchDelayMs } : {}) });
  const provider = new sdk.TracerProvider({ resource, sampler: samplerOf(sdk, settings), spanProcessors: [processor] });
  // The SDK's 3.x line registers nothing itself: Node's AsyncLocalStorage context manager, the W3C
  // trace-context propagator and the provider are set here (what NodeTracerProvider.register did).
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  activeTracer = trace.getTracer('keel', settings.serviceVersion);
  shutdown = () => provider.shutdown();
  flush = () => provider.forceFlush();
  return true;
}

/** Exports the spans ended so far now (tests read them without waiting for the batch's timer). */
export async function flushTracing(): Promise<void> {
  await flush?.();
}

/** Exports the spans still buffered and stops (the process's orderly stop). No-op when off. */
export async function shutdownTracing(): Promise<void> {
  const stop = shutdown;
  shutdown = null;
  flush = null;
  activeTracer = null;
  if (!stop) return;
  await stop().catch(() => undefined);
  trace.disable();
  context.disable();
  propagation.disable();
}

/** A child of the active span, or null outside a trace (and whenever tracing is off). */
export function childSpan(name: string, attributes: Attributes, kind: SpanKind = SpanKind.INTERNAL): Span | null {
  const tracer = activeTracer;
  if (!tracer) return null;
  const parent = context.active();
  if (!trace.getSpan(parent)) return null;
  return tracer.startSpan(name, { kind, attributes }, parent);
}

/** Ends a span, marking it failed when `err` is set (the error's class only: a message may carry data). */
export function endSpan(span: Span, err?: unknown): void {
  if (err !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.name : 'error' });
  span.end();
}

/** Ends `span` when `work` settles (failed when it rejects) and answers `work`. */
export function endWhenSettled<T>(span: Span, work: Promise<T>): Promise<T> {
  return work.then(
    (out) => {
      span.end();
      return out;
    },
    (err: unknown) => {
      endSpan(span, err);
      throw err;
    },
  );
}

/** The W3C `traceparent` of the active span (to continue its trace later), or undefined outside a trace. */
export function currentTraceparent(): string | undefined {
  if (!activeTracer) return undefined;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent;
}

/** A context whose parent is the span a `traceparent` names (ROOT when it names none). */
export function contextOf(traceparent: string | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, { traceparent });
}

export { SpanKind };
