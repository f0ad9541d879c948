/**
 * A webhook delivery continues the trace of the request that published its event even when another
 * process sends it (docs/deploy.md "Tracing"): on PostgreSQL + Redis, `keel serve` (WORKER=off)
 * accepts `POST /events` and a separate `keel worker` delivers; the publishing request's `traceparent`
 * travels on the delivery row. Both export to one OTLP receiver, each under its own service name.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable } from '../helpers/app.js';
import { createPgDatabase, redisUrl, type PgTestDatabase } from '../helpers/backends.js';
import { cliEnv, startServe, type ServeProcess } from '../helpers/cli.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp.js';
import { call, startWorkerProcess, type WorkerProcess } from '../helpers/topology.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';

const ADMIN = { email: 'trace-admin@example.com', password: 'harbour-velvet-compass-93-lilac' };

describe.runIf(backend === 'postgres' && backendAvailable())('tracing across processes (postgres + redis)', () => {
  let otlp: OtlpReceiver | null = null;
  let rx: Receiver | null = null;
  let pg: PgTestDatabase | null = null;
  let serve: ServeProcess | null = null;
  let worker: WorkerProcess | null = null;
  const dir = mkdtempSync(join(tmpdir(), 'keel-trace-'));

  afterAll(async () => {
    await worker?.stop('SIGKILL');
    await serve?.stop('SIGKILL');
    await rx?.close();
    await otlp?.close();
    await pg?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a delivery sent by a keel worker is a child of the POST /events request served by keel serve', async () => {
    otlp = await startOtlpReceiver();
    rx = await startReceiver();
    pg = await createPgDatabase();
    const env = cliEnv(dir, {
      DATABASE_URL: pg.url,
      REDIS_URL: redisUrl(),
      WORKER: 'off',
      ALLOW_INSECURE_TARGETS: 'true',
      ADMIN_EMAIL: ADMIN.email,
      ADMIN_PASSWORD: ADMIN.password,
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
    });
    serve = await startServe({ ...env, OTEL_SERVICE_NAME: 'keel-api' });
    const url = serve.url;
    const token = (await call(url, 'POST', '/auth/login', { body: ADMIN })).body.accessToken as string;
    const partnerId = (await call(url, 'POST', '/partners', { token, body: { name: 'Trace Partner' } })).body.id as string;
    const orgId = (await call(url, 'POST', '/orgs', { token, body: { name: 'Trace Inc', partnerId } })).body.id as string;
    const hook = await call(url, 'POST', '/webhooks', { token, body: { orgId, name: 'psa', url: rx.url, events: ['alert.triggered'] } });
    expect(hook.status).toBe(201);
    const key = await call(url, 'POST', '/api-keys', { token, body: { name: 'events', permissions: [{ resource: 'events', action: 'publish' }] } });
    expect(key.status).toBe(201);

    // Published with no worker running: nothing in the serve process can send it.
    const published = await call(url, 'POST', '/events', { token: key.body.key as string, body: { type: 'alert.triggered', orgId, data: { n: 1 } } });
    expect(published.status).toBe(202);
    worker = await startWorkerProcess({ ...env, OTEL_SERVICE_NAME: 'keel-worker' });
    await rx.waitFor(1);
    // Each process's orderly stop exports the spans it still holds.
    expect(await worker.stop('SIGTERM')).toBe(0);
    expect(await serve.stop('SIGTERM')).toBe(0);

    const request = otlp.spans.find((s) => s.name === 'POST /api/v1/events');
    expect(request?.resource['service.name']).toBe('keel-api');
    const delivery = otlp.spans.find((s) => s.name === 'webhook delivery' && s.attributes['keel.webhook_id'] === hook.body.id);
    expect(delivery).toMatchObject({ traceId: request?.traceId, resource: { 'service.name': 'keel-worker' }, attributes: { 'keel.delivery.status': 'delivered' } });
    // Its parent is a span of the publishing request's trace, made in the serve process.
    const parent = otlp.spans.find((s) => s.spanId === delivery?.parentSpanId);
    expect(parent).toMatchObject({ traceId: request?.traceId, resource: { 'service.name': 'keel-api' } });
  }, 120_000);
});
