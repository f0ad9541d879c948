/**
 * The sampler `OTEL_TRACES_SAMPLER(_ARG)` names (docs/deploy.md "Tracing"): the SDK's 3.x line no
 * longer reads these variables itself, so Keel builds the sampler from its configuration.
 */
import { describe, expect, it } from 'vitest';
import { ROOT_CONTEXT, SpanKind, TraceFlags, trace } from '@opentelemetry/api';
import * as sdk from '@opentelemetry/sdk-trace';
import { samplerOf, type TracingSettings } from '../../src/platform/tracing/index.js';
import { loadConfig } from '../../src/config.js';

const TRACE_ID = 'aaf92f3577b34da6a3ce929d0e0e4736';

function decides(settings: TracingSettings, parentSampled?: boolean): sdk.SamplingDecision {
  const parent =
    parentSampled === undefined
      ? ROOT_CONTEXT
      : trace.setSpanContext(ROOT_CONTEXT, { traceId: TRACE_ID, spanId: '00f067aa0ba902b7', traceFlags: parentSampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true });
  return samplerOf(sdk, settings).shouldSample(parent, TRACE_ID, 'GET /x', SpanKind.SERVER, {}, []).decision;
}

describe('the traces sampler', () => {
  it('keeps every trace by default and follows a caller that sampled its trace out', () => {
    expect(decides({})).toBe(sdk.SamplingDecision.RECORD_AND_SAMPLED);
    expect(decides({}, false)).toBe(sdk.SamplingDecision.NOT_RECORD);
  });

  it('follows OTEL_TRACES_SAMPLER and its ratio, as the configuration reads them', () => {
    expect(decides(loadConfig({ OTEL_TRACES_SAMPLER: 'always_off' }))).toBe(sdk.SamplingDecision.NOT_RECORD);
    expect(decides(loadConfig({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }))).toBe(sdk.SamplingDecision.NOT_RECORD);
    expect(decides(loadConfig({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }))).toBe(sdk.SamplingDecision.NOT_RECORD);
    expect(decides(loadConfig({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' }), true)).toBe(sdk.SamplingDecision.RECORD_AND_SAMPLED);
    expect(decides(loadConfig({ OTEL_TRACES_SAMPLER: 'always_on' }), false)).toBe(sdk.SamplingDecision.RECORD_AND_SAMPLED);
  });
});
