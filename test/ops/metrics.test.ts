/**
 * GET /metrics (observability): off unless METRICS_ENABLED (a 404 like any unknown path,
 * absent from the OpenAPI document); with METRICS_TOKEN only a scraper sending that bearer token
 * reads it. The Prometheus text shows request latency by route template (never a raw path), sign-in
 * outcomes of identity and mfa, webhook attempts and queue depth, the hash queue, and metrics a module
 * registers through `keel.metrics` (agents: heartbeats, update reports and devices by status, in
 * test/agents/metrics.test.ts).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, enrollTotp, login, nextTotpStep, totpCode } from '../helpers/fixtures.js';
import { clock } from '../../src/platform/clock.js';
import { HASH_QUEUE_PER_THREAD, HASH_THREADS } from '../../src/platform/argon2-pool.js';
import { ok, startReceiver, status, type Receiver } from '../webhooks/receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, engineOf, publish } from '../webhooks/setup.js';
import { sample } from './prometheus.js';

const TOKEN = 'scrape-token-0123456789abcdef';

describe.skipIf(!backendAvailable())(`metrics (${backend})`, () => {
  let off: TestApp;
  let app: TestApp;
  let rx: Receiver;
  const scrape = async (): Promise<string> => {
    const res = await app.request<string>('GET', '/metrics', { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    return res.body;
  };

  beforeAll(async () => {
    [off, app, rx] = await Promise.all([
      startTestApp(),
      startTestApp({ env: { METRICS_ENABLED: 'true', METRICS_TOKEN: TOKEN, LOCKOUT_THRESHOLD: '2' } }),
      startReceiver(),
    ]);
  }, 60_000);
  afterAll(async () => Promise.all([off?.close(), app?.close(), rx?.close()]));
  afterEach(() => clock.reset());

  it('is off by default: 404 in the envelope, and never in the OpenAPI document', async () => {
    const res = await off.request('GET', '/metrics');
    expect(res.status).toBe(404);
    expect(res.body.code).toBe('not_found');
    const doc = await app.api('GET', '/openapi.json');
    expect(Object.keys(doc.body.paths as object).filter((p) => p.includes('metrics'))).toEqual([]);
  });

  it('asks for the bearer token when METRICS_TOKEN is set, compared whole', async () => {
    const cases: [string, Record<string, string>][] = [
      ['no header', {}],
      ['another token of the same length', { authorization: `Bearer ${TOKEN.slice(0, -1)}X` }],
      ['a prefix of the token', { authorization: `Bearer ${TOKEN.slice(0, 8)}` }],
      ['the token with more after it', { authorization: `Bearer ${TOKEN}0` }],
      ['the token without the scheme', { authorization: TOKEN }],
    ];
    for (const [what, headers] of cases) {
      const res = await app.request('GET', '/metrics', { headers });
      expect(res.status, what).toBe(401);
      expect(res.body, what).toEqual({ error: expect.any(String), code: 'unauthorized' });
      expect(res.headers.get('www-authenticate'), what).toContain('Bearer');
    }
    const ok = await app.request<string>('GET', '/metrics', { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(ok.body).toContain('# TYPE keel_http_request_duration_seconds histogram');
  });

  it('observes latency by route template and status class, never the raw path', async () => {
    const user = await createUser(app, { platformAdmin: false });
    const { accessToken } = await login(app, user);
    const before = await scrape();
    const labels = (route: string, status: string) => ({ method: 'GET', route, status });
    for (let i = 0; i < 3; i++) expect((await app.api('GET', '/users/me', { token: accessToken })).status).toBe(200);
    const id = randomUUID();
    const unknown = await app.api('GET', `/users/${id}`, { token: accessToken });
    expect(unknown.status).toBeGreaterThanOrEqual(400);
    expect((await app.api('GET', `/no/such/${id}`)).status).toBe(404);
    const after = await scrape();
    const count = 'keel_http_request_duration_seconds_count';
    expect(sample(after, count, labels('/api/v1/users/me', '2xx')) - sample(before, count, labels('/api/v1/users/me', '2xx'))).toBe(3);
    expect(sample(after, count, labels('/api/v1/users/:id', '4xx')) - sample(before, count, labels('/api/v1/users/:id', '4xx'))).toBe(1);
    expect(sample(after, count, labels('/api/v1/*', '4xx')) - sample(before, count, labels('/api/v1/*', '4xx'))).toBe(1);
    expect(after).not.toContain(id);
  });

  it('counts sign-in outcomes where identity and mfa decide: success, failure, locked, challenge', async () => {
    const outcome = (text: string, step: string, o: string) => sample(text, 'keel_auth_outcomes_total', { step, outcome: o });
    const plain = await createUser(app);
    const locking = await createUser(app);
    const withMfa = await createUser(app);
    const { secret } = await enrollTotp(app, (await login(app, withMfa)).accessToken);
    const before = await scrape();

    expect((await app.api('POST', '/auth/login', { body: { email: plain.email, password: 'not the password at all' } })).status).toBe(401);
    await login(app, plain);
    for (let i = 0; i < 2; i++) expect((await app.api('POST', '/auth/login', { body: { email: locking.email, password: 'still not the password' } })).status).toBe(401);
    const challenged = await app.api('POST', '/auth/login', { body: { email: withMfa.email, password: withMfa.password } });
    expect(challenged.body.mfaRequired).toBe(true);
    expect((await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenged.body.tempToken, code: '000000' } })).status).toBe(401);
    await nextTotpStep();
    const verified = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenged.body.tempToken, code: await totpCode(secret) } });
    expect(verified.status).toBe(200);

    const after = await scrape();
    // withMfa's enrolment signed in once before `before`; plain's success comes after.
    expect(outcome(after, 'login', 'success') - outcome(before, 'login', 'success')).toBe(1);
    expect(outcome(after, 'login', 'failure') - outcome(before, 'login', 'failure')).toBe(2); // plain's, locking's first
    expect(outcome(after, 'login', 'locked') - outcome(before, 'login', 'locked')).toBe(1); // locking's second set the lock
    expect(outcome(after, 'login', 'challenge') - outcome(before, 'login', 'challenge')).toBe(1);
    expect(outcome(after, 'mfa', 'failure') - outcome(before, 'mfa', 'failure')).toBe(1);
    expect(outcome(after, 'mfa', 'success') - outcome(before, 'mfa', 'success')).toBe(1);
    expect(after).not.toContain(plain.email);
  });

  it('shows webhook attempts by result and the deliveries waiting', async () => {
    const w = await createWebhookWorld(app);
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['alert.triggered'] });
    const attempts = (t: string, outcome: string) => sample(t, 'keel_webhook_delivery_attempts_total', { outcome });
    const depth = (t: string) => sample(t, 'keel_webhook_queue_depth');
    const before = await scrape();
    rx.behave(status(503, 'busy'));
    await publish(app, w.eventsKey, 'alert.triggered', { n: 1 });
    await publish(app, w.eventsKey, 'alert.triggered', { n: 2 });
    await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 2 && d.every((x: any) => x.status === 'retrying'));
    const waiting = await scrape();
    expect(depth(waiting) - depth(before)).toBe(2);
    expect(attempts(waiting, 'retrying') - attempts(before, 'retrying')).toBe(2);

    rx.behave(ok);
    clock.advance(10 * 60_000); // past the first retry delay (docs/specification.md "Limits"), within the access token's life
    await engineOf(app).pumpNow();
    await deliveriesUntil(app, w.admin, hook.id, (d) => d.length === 2 && d.every((x: any) => x.status === 'delivered'));
    const done = await scrape();
    expect(depth(done)).toBe(depth(before));
    expect(attempts(done, 'delivered') - attempts(before, 'delivered')).toBe(2);
  });

  it('shows the hash queue and its bound', async () => {
    const text = await scrape();
    expect(sample(text, 'keel_hash_queue_capacity')).toBe(HASH_THREADS * HASH_QUEUE_PER_THREAD);
    expect(text).toMatch(/^keel_hash_queue_depth \d+$/m);
    expect(text).toMatch(/^keel_hash_refused_total \d+$/m);
  });

  it('shows what a module registers through keel.metrics (how agents add heartbeats and devices by status)', async () => {
    const { metrics } = app.server.keel;
    const heartbeats = metrics.counter('keel_test_heartbeats_total', 'Heartbeats received (test)');
    heartbeats.inc();
    heartbeats.inc({}, 2);
    // The same name answers the same counter.
    metrics.counter('keel_test_heartbeats_total', 'Heartbeats received (test)').inc();
    let scrapes = 0;
    metrics.gauge('keel_test_devices', 'Devices by status (test)', ['status'], (g) => {
      scrapes++;
      g.set({ status: 'online' }, 7);
      g.set({ status: 'offline' }, 2);
    });
    const text = await scrape();
    expect(sample(text, 'keel_test_heartbeats_total')).toBe(4);
    expect(sample(text, 'keel_test_devices', { status: 'online' })).toBe(7);
    expect(sample(text, 'keel_test_devices', { status: 'offline' })).toBe(2);
    expect(scrapes).toBe(1);
    // With metrics off the same calls are no-ops.
    off.server.keel.metrics.counter('keel_test_heartbeats_total', 'x').inc();
    expect(off.server.keel.metrics.enabled).toBe(false);
  });
});

describe.skipIf(!backendAvailable())(`metrics without a token (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { METRICS_ENABLED: 'true' } });
  }, 60_000);
  afterAll(async () => app?.close());

  it('answers any scraper when METRICS_TOKEN is not set', async () => {
    const res = await app.request<string>('GET', '/metrics');
    expect(res.status).toBe(200);
    expect(res.body).toMatch(/^keel_process_memory_bytes\{kind="rss"\} \d+/m);
    expect(res.body).toMatch(/^keel_process_event_loop_utilization [\d.e-]+$/m);
  });
});
