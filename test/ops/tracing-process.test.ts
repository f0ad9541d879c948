/**
 * Tracing in `keel serve` as an operator runs it (the bundle, `bin/keel.js`): an OTLP endpoint in the
 * environment turns it on before the database opens, and a clean stop (SIGTERM) exports the spans
 * still buffered before the process exits (docs/deploy.md "Tracing", "Stopping").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend } from '../helpers/app.js';
import { cliEnv, migratedDataDir, startServe } from '../helpers/cli.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp.js';

describe.runIf(backend === 'pglite')('tracing in keel serve', () => {
  let otlp: OtlpReceiver;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
  });
  afterAll(async () => otlp?.close());

  it('exports the spans still buffered on SIGTERM, with the service name and the statements of the request', async () => {
    const serve = await startServe(cliEnv(await migratedDataDir(), { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_SERVICE_NAME: 'keel-under-test' }));
    const traceId = 'aaf92f3577b34da6a3ce929d0e0e4736';
    const res = await fetch(`${serve.url}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
      body: JSON.stringify({ email: 'nobody@example.com', password: 'not-a-real-password-1' }),
    });
    expect(res.status).toBe(401);
    // The batch exports every 5 s; the stop does not wait for that, it flushes.
    expect(await serve.stop('SIGTERM')).toBe(0);
    const mine = otlp.spans.filter((s) => s.traceId === traceId);
    expect(mine.find((s) => s.name === 'POST /api/v1/auth/login')).toMatchObject({ parentSpanId: '00f067aa0ba902b7', attributes: { 'http.response.status_code': 401 }, resource: { 'service.name': 'keel-under-test' } });
    expect(mine.some((s) => s.attributes['db.system.name'] === 'postgresql')).toBe(true);
    expect(mine.map((s) => Object.values(s.attributes).join(' ')).join(' ')).not.toContain('nobody@example.com');
  });
});
