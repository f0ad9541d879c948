/**
 * Tracing off (docs/deploy.md "Tracing"): with no OTLP endpoint (or OTEL_SDK_DISABLED) no provider is
 * registered, nothing is exported, and the request path, the database driver, hashing and webhook
 * deliveries never call the OpenTelemetry API at all: no span, context or propagation object is made.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { context, INVALID_TRACEID, propagation, trace } from '@opentelemetry/api';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp.js';
import { activeTracer, startTracing, tracesUrl } from '../../src/platform/tracing/index.js';
import { describeStatement } from '../../src/platform/tracing/db.js';
import { loadConfig } from '../../src/config.js';
import { createHook, createWebhookWorld, publish } from '../webhooks/setup.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';

describe('tracing settings', () => {
  it('is off unless an endpoint is set, and off with OTEL_SDK_DISABLED', () => {
    expect(tracesUrl({})).toBeNull();
    expect(tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toBe('http://collector:4318/v1/traces');
    expect(tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/traces' })).toBe('http://other:4318/traces');
    expect(tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: true })).toBeNull();
  });

  it('refuses a malformed endpoint or sampler at start', () => {
    expect(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT/);
    expect(() => loadConfig({ OTEL_TRACES_SAMPLER: 'sometimes' })).toThrow(/OTEL_TRACES_SAMPLER/);
    expect(() => loadConfig({ OTEL_TRACES_SAMPLER_ARG: '1.5' })).toThrow(/OTEL_TRACES_SAMPLER_ARG/);
  });

  it('names a statement by its operation and table, never its values', () => {
    expect(describeStatement(`select "id" from "users" where "email" = $1`)).toEqual({ name: 'SELECT users', attributes: { 'db.system.name': 'postgresql', 'db.operation.name': 'SELECT', 'db.collection.name': 'users' } });
    expect(describeStatement(`insert into "public"."audit_logs" ("a") values ($1)`).name).toBe('INSERT audit_logs');
    expect(describeStatement('update webhook_deliveries d set claim_id = null from unnest($1::uuid[]) as r(id)').name).toBe('UPDATE webhook_deliveries');
    expect(describeStatement('with r as (select * from unnest($1::uuid[]) as u(id)) delete from sessions using r').name).toBe('WITH sessions');
    expect(describeStatement("select 'alice@example.com'").name).toBe('SELECT');
  });
});

describe.skipIf(!backendAvailable())(`tracing off (${backend})`, () => {
  let otlp: OtlpReceiver;
  let app: TestApp;
  let hooks: Receiver;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    // The test process's own environment names no endpoint: the app starts as `keel serve` would.
    expect(await startTracing(loadConfig({}))).toBe(false);
    app = await startTestApp();
    hooks = await startReceiver();
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    await hooks?.close();
    await otlp?.close();
  });

  it('registers no provider and makes no span, context or propagation call on a login, a read and a webhook delivery', async () => {
    expect(activeTracer).toBeNull();
    // The global provider is the API's no-op one: its spans record nothing and carry no trace id.
    const probe = trace.getTracerProvider().getTracer('probe').startSpan('probe');
    expect(probe.isRecording()).toBe(false);
    expect(probe.spanContext().traceId).toBe(INVALID_TRACEID);
    const world = await createWebhookWorld(app);
    const hook = await createHook(app, world.admin, { url: hooks.url, events: ['alert.triggered'] });
    const user = await createUser(app);
    const calls = [vi.spyOn(trace, 'getTracer'), vi.spyOn(trace, 'getSpan'), vi.spyOn(context, 'active'), vi.spyOn(context, 'with'), vi.spyOn(propagation, 'extract'), vi.spyOn(propagation, 'inject')];
    try {
      const { accessToken } = await login(app, user);
      expect((await app.api('GET', '/users/me', { token: accessToken })).status).toBe(200);
      expect((await app.api('GET', `/webhooks/${hook.id}`, { token: world.admin })).status).toBe(200);
      await publish(app, world.eventsKey, 'alert.triggered', { n: 1 });
      await hooks.waitFor(1);
      expect(calls.map((spy) => spy.mock.calls.length)).toEqual(calls.map(() => 0));
    } finally {
      for (const spy of calls) spy.mockRestore();
    }
    // Nothing was sent to the receiver (there is no exporter to send it).
    expect(otlp.requests).toBe(0);
    // And no trace is stored on the delivery row (the column is written only while tracing is on).
    const rows = await app.server.keel.database.query<{ traceparent: string | null }>(`select traceparent from webhook_deliveries where webhook_id = $1`, [hook.id]);
    expect(rows.map((r) => r.traceparent)).toEqual([null]);
  });
});
