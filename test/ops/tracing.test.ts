/**
 * Tracing on (docs/deploy.md "Tracing"): spans exported over OTLP/HTTP to a loopback receiver that
 * decodes them with the official OpenTelemetry protobuf definitions (test/helpers/otlp.ts). A login
 * is one trace (the request, its database statements, the password hash) with no email or password
 * in any attribute; a webhook delivery continues the trace of the request that caused it; an
 * incoming `traceparent` is the request span's parent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, uniqueEmail } from '../helpers/fixtures.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp.js';
import { waitUntil } from '../helpers/wait.js';
import { flushTracing, shutdownTracing, startTracing } from '../../src/platform/tracing/index.js';
import { trace } from '@opentelemetry/api';
import { createHook, createWebhookWorld, engineOf, publish, type WebhookWorld } from '../webhooks/setup.js';
import { ok, startReceiver, status, type Receiver } from '../webhooks/receiver.js';
import { clock } from '../../src/platform/clock.js';

const SERVER = 2;
const CLIENT = 3;

describe.skipIf(!backendAvailable())(`tracing over OTLP/HTTP (${backend})`, () => {
  let otlp: OtlpReceiver;
  let app: TestApp;
  let hooks: Receiver;
  let world: WebhookWorld;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    // Before the app: the database driver is instrumented when it opens.
    expect(await startTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, serviceVersion: 'test' }, { batchDelayMs: 50 })).toBe(true);
    app = await startTestApp();
    hooks = await startReceiver();
    world = await createWebhookWorld(app);
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    await hooks?.close();
    await shutdownTracing();
    await otlp?.close();
  });

  /** The exported span `match` finds (flushing first: spans are batched). */
  async function spanWhere(what: string, match: (s: ReceivedSpan) => boolean): Promise<ReceivedSpan> {
    const found = await waitUntil(what, async () => {
      await flushTracing();
      return otlp.spans.find(match);
    });
    return found as ReceivedSpan;
  }

  /** True when `span` descends from `ancestor` in the spans received. */
  function descendsFrom(span: ReceivedSpan, ancestor: ReceivedSpan): boolean {
    const byId = new Map(otlp.spans.map((s) => [s.spanId, s]));
    let at: ReceivedSpan | undefined = span;
    while (at && at.traceId === ancestor.traceId) {
      if (at.parentSpanId === ancestor.spanId) return true;
      at = byId.get(at.parentSpanId);
    }
    return false;
  }

  it('registers a provider while an endpoint is set', () => {
    expect(trace.getTracerProvider().getTracer('probe').startSpan('probe').isRecording()).toBe(true);
  });

  it("exports a login's trace: the request span, database child spans and the argon2 span; no email or password in any attribute", async () => {
    const email = uniqueEmail('traced');
    const password = 'tracing-secret-Pa55word!';
    await createUser(app, { email, password });
    // The logins of the set-up made login spans too: this one's is the one not seen before it.
    await flushTracing();
    const earlier = new Set(otlp.spans.map((s) => s.spanId));
    const res = await app.api('POST', '/auth/login', { body: { email, password } });
    expect(res.status).toBe(200);
    const request = await spanWhere('the login request span', (s) => s.name === 'POST /api/v1/auth/login' && !earlier.has(s.spanId));
    expect(request.attributes['http.response.status_code']).toBe(200);
    expect(request).toMatchObject({ kind: SERVER, parentSpanId: '', attributes: { 'http.request.method': 'POST', 'http.route': '/api/v1/auth/login' } });
    expect(request.resource['service.name']).toBe('keel');
    const inTrace = () => otlp.spans.filter((s) => s.traceId === request.traceId && s !== request);
    const argon = await spanWhere('the argon2 verify span', (s) => s.traceId === request.traceId && s.name === 'argon2 verify');
    expect(descendsFrom(argon, request)).toBe(true);
    const statements = inTrace().filter((s) => s.attributes['db.system.name'] === 'postgresql');
    expect(statements.length).toBeGreaterThan(0);
    expect(statements.every((s) => s.kind === CLIENT && descendsFrom(s, request))).toBe(true);
    // The statements name an operation and a table: the user's row is written (last sign-in), sessions made.
    expect(statements.map((s) => s.name)).toEqual(expect.arrayContaining(['UPDATE users', 'WITH sessions']));
    expect(statements.every((s) => Object.keys(s.attributes).sort().join() === (s.attributes['db.collection.name'] ? 'db.collection.name,db.operation.name,db.system.name' : 'db.operation.name,db.system.name'))).toBe(true);

    if (backend === 'postgres') {
      // The sign-in's rate limits are Redis commands: each a span with the command's name alone.
      const commands = inTrace().filter((s) => s.attributes['db.system.name'] === 'redis');
      expect(commands.length).toBeGreaterThan(0);
      expect(commands.every((s) => s.kind === CLIENT && descendsFrom(s, request) && Object.keys(s.attributes).sort().join() === 'db.operation.name,db.system.name')).toBe(true);
    }

    // Scan every attribute value (and span name) of everything exported so far.
    const leaks = otlp.spans.flatMap((s) =>
      [s.name, ...Object.values(s.attributes), ...Object.values(s.resource)]
        .map(String)
        .filter((v) => v.toLowerCase().includes(email.toLowerCase()) || v.includes(password) || v.includes(res.body.accessToken as string))
        .map((v) => `${s.name}: ${v}`),
    );
    expect(leaks).toEqual([]);
  });

  it('continues the trace of the POST /events request in the webhook delivery it caused', async () => {
    const hook = await createHook(app, world.admin, { url: hooks.url, events: ['alert.triggered'] });
    await publish(app, world.eventsKey, 'alert.triggered', { n: 1 });
    const request = await spanWhere('the POST /events span', (s) => s.name === 'POST /api/v1/events');
    expect(request.attributes['keel.org_id']).toBe(world.orgId);
    const delivery = await spanWhere('the delivery span', (s) => s.name === 'webhook delivery' && s.attributes['keel.webhook_id'] === hook.id);
    expect(delivery.traceId).toBe(request.traceId);
    expect(descendsFrom(delivery, request)).toBe(true);
    expect(delivery.attributes).toMatchObject({ 'keel.org_id': world.orgId, 'keel.event_type': 'alert.triggered', 'keel.delivery.status': 'delivered' });
    // The outbound request is the delivery's child: host and status, never the URL's path or query.
    const outbound = await spanWhere('the outbound span', (s) => s.parentSpanId === delivery.spanId && s.kind === CLIENT);
    expect(outbound.attributes).toMatchObject({ 'http.request.method': 'POST', 'server.address': '127.0.0.1', 'http.response.status_code': 200 });
    expect(Object.values(outbound.attributes).map(String).filter((v) => v.includes(hooks.url))).toEqual([]);
    // No traceparent goes to the receiver.
    const [received] = await hooks.waitFor(1);
    expect(received?.headers.traceparent).toBeUndefined();
  });

  it('continues the trace of a test delivery request', async () => {
    const hook = await createHook(app, world.admin, { url: hooks.url, events: ['alert.triggered'] });
    const res = await app.api('POST', `/webhooks/${hook.id}/test`, { token: world.admin, body: {} });
    expect(res.status).toBe(202);
    const request = await spanWhere('the test request span', (s) => s.name === 'POST /api/v1/webhooks/:id/test');
    const delivery = await spanWhere('the test delivery span', (s) => s.name === 'webhook delivery' && s.attributes['keel.webhook_id'] === hook.id);
    expect(delivery.traceId).toBe(request.traceId);
  });

  it('continues the trace in the retries of a delivery, made by the process that queued it', async () => {
    const hook = await createHook(app, world.admin, { url: hooks.url, events: ['patch.failed'] });
    hooks.behave(status(503, 'busy'));
    clock.freeze();
    try {
      await flushTracing();
      const earlier = new Set(otlp.spans.map((s) => s.spanId));
      await publish(app, world.eventsKey, 'patch.failed', { kb: 'KB1' });
      const request = await spanWhere('the POST /events span', (s) => s.name === 'POST /api/v1/events' && !earlier.has(s.spanId));
      const attempt = (n: number) => (s: ReceivedSpan) => s.name === 'webhook delivery' && s.attributes['keel.webhook_id'] === hook.id && s.attributes['keel.delivery.attempt'] === n;
      const first = await spanWhere('the first attempt', attempt(1));
      expect(first).toMatchObject({ traceId: request.traceId, attributes: { 'keel.delivery.status': 'retrying' } });
      hooks.behave(ok);
      clock.advance(1000);
      await engineOf(app).pumpNow();
      const second = await spanWhere('the retry', attempt(2));
      expect(second).toMatchObject({ traceId: request.traceId, attributes: { 'keel.delivery.status': 'delivered' } });
    } finally {
      hooks.behave(ok);
      clock.reset();
    }
  });

  it('joins the trace an incoming traceparent names', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent = '00f067aa0ba902b7';
    const res = await app.request('GET', '/health', { headers: { traceparent: `00-${traceId}-${parent}-01` } });
    expect(res.status).toBe(200);
    const span = await spanWhere('the joined request span', (s) => s.traceId === traceId && s.kind === SERVER);
    expect(span).toMatchObject({ name: 'GET /health', parentSpanId: parent });
  });
});
