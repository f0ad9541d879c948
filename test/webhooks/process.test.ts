/**
 * The worker roles as an operator runs them (docs/deploy.md "Process roles"): real `keel serve` / `keel worker`
 * processes. A process killed with SIGKILL in the middle of a delivery leaves nothing lost: after a
 * restart every delivery arrives. SIGTERM stops claiming, finishes the attempt in flight (recorded as
 * delivered) and exits 0. On the embedded database the worker runs inside `serve` (a `keel worker`
 * beside it is refused by the data-directory lock); on PostgreSQL `serve` runs with WORKER=off and
 * separate `keel worker` processes deliver.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { backend, backendAvailable, freePort } from '../helpers/app.js';
import { createPgDatabase, redisUrl, type PgTestDatabase } from '../helpers/backends.js';
import { cliEnv, runCli, startServe, type ServeProcess } from '../helpers/cli.js';
import { call, startWorkerProcess, type WorkerProcess } from '../helpers/topology.js';
import { startReceiver, status, type Receiver } from './receiver.js';

const ADMIN = { email: 'hooks-admin@example.com', password: 'harbour-velvet-compass-93-lilac' };

/** Signs in the administrator, makes an organisation and a webhook on `target`; answers what later steps need. */
async function arrange(url: string, target: string): Promise<{ token: string; orgId: string; hookId: string }> {
  const login = await call(url, 'POST', '/auth/login', { body: ADMIN });
  expect(login.status).toBe(200);
  const token = login.body.accessToken as string;
  const partnerId = (await call(url, 'POST', '/partners', { token, body: { name: 'Hooks Partner' } })).body.id as string;
  const org = await call(url, 'POST', '/orgs', { token, body: { name: 'Hooks Inc', partnerId } });
  expect(org.status).toBe(201);
  const hook = await call(url, 'POST', '/webhooks', { token, body: { orgId: org.body.id, name: 'psa', url: target, events: ['alert.triggered'] } });
  expect(hook.status).toBe(201);
  return { token, orgId: org.body.id, hookId: hook.body.id };
}

async function deliveries(url: string, token: string, orgId: string, hookId: string): Promise<any[]> {
  const res = await call(url, 'GET', `/webhooks/${hookId}/deliveries?orgId=${orgId}&limit=100`, { token });
  expect(res.status).toBe(200);
  return res.body.data;
}

async function until<T>(fn: () => Promise<T>, check: (v: T) => boolean, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (check(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what}: ${JSON.stringify(v).slice(0, 1500)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!backendAvailable())('worker processes', () => {
  const dirs: string[] = [];
  const serves: ServeProcess[] = [];
  const workers: WorkerProcess[] = [];
  let rx: Receiver | null = null;
  let pg: PgTestDatabase | null = null;
  const hung = new Set<ServerResponse>();

  afterEach(async () => {
    while (workers.length) await workers.pop()!.stop('SIGKILL');
    while (serves.length) await serves.pop()!.stop('SIGKILL');
    for (const r of hung) r.destroy();
    hung.clear();
    await rx?.close();
    rx = null;
    await pg?.drop();
    pg = null;
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  function env(extra: Record<string, string> = {}): Record<string, string> {
    const dir = mkdtempSync(join(tmpdir(), 'keel-hooks-'));
    dirs.push(dir);
    return cliEnv(dir, { LOG_LEVEL: 'info', ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, ALLOW_INSECURE_TARGETS: 'true', ...extra });
  }

  it.skipIf(backend !== 'pglite')('embedded: serve SIGKILLed mid-delivery delivers everything after a restart; a keel worker beside serve is refused', async () => {
    rx = await startReceiver();
    const receiver = rx;
    receiver.behave((_r, res) => {
      hung.add(res); // the first process never gets an answer
    });
    const e = env();
    const first = await startServe(e);
    serves.push(first);
    const { token, orgId, hookId } = await arrange(first.url, receiver.url);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await call(first.url, 'POST', `/webhooks/${hookId}/test?orgId=${orgId}`, { token })).body.delivery.id);
    await receiver.waitFor(3);

    const beside = await runCli(['worker'], e);
    expect(beside.code).toBe(1);
    expect(beside.stderr).toMatch(/^keel: cannot open DATA_DIR: .*on the embedded database the worker runs inside keel serve \(WORKER=inline\); separate workers need PostgreSQL \(DATABASE_URL\)\n$/);

    await first.stop('SIGKILL');
    serves.pop();
    receiver.behave(status(200));
    const second = await startServe(e);
    serves.push(second);
    const login = await call(second.url, 'POST', '/auth/login', { body: ADMIN });
    const done = await until(
      () => deliveries(second.url, login.body.accessToken, orgId, hookId),
      (l) => l.length === 3 && l.every((d) => d.status === 'delivered'),
      30_000,
      'deliveries after restart',
    );
    expect(done.map((d) => d.id).sort()).toEqual([...ids].sort());
    for (const id of ids) {
      const arrivals = receiver.received.filter((r) => r.headers['x-service-delivery-id'] === id);
      // At least once: the attempt cut by the kill, then the one after the restart.
      expect(arrivals.length).toBeGreaterThanOrEqual(2);
    }
    expect(done.every((d) => d.attempt === 1)).toBe(true);
  }, 120_000);

  it.skipIf(backend !== 'postgres')('PostgreSQL: a keel worker SIGKILLed mid-delivery loses nothing; SIGTERM finishes the attempt in flight and exits 0', async () => {
    rx = await startReceiver();
    const receiver = rx;
    pg = await createPgDatabase();
    // A short deadline keeps the dead worker's leases short (2 × deadline + 10 s).
    const e = env({ DATABASE_URL: pg.url, REDIS_URL: redisUrl(), WORKER: 'off', WEBHOOK_TIMEOUT_MS: '1000' });
    const server = await startServe(e);
    serves.push(server);
    const { token, orgId, hookId } = await arrange(server.url, receiver.url);

    receiver.behave((_r, res) => {
      hung.add(res);
    });
    const worker1 = await startWorkerProcess(e);
    workers.push(worker1);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await call(server.url, 'POST', `/webhooks/${hookId}/test?orgId=${orgId}`, { token })).body.delivery.id);
    await receiver.waitFor(1);
    worker1.child.kill('SIGKILL');
    await worker1.exited;
    receiver.behave(status(200));
    const worker2 = await startWorkerProcess(e);
    workers.push(worker2);
    const done = await until(
      () => deliveries(server.url, token, orgId, hookId),
      (l) => l.length === 3 && l.every((d) => d.status === 'delivered'),
      40_000,
      'deliveries after the worker was replaced',
    );
    expect(done.map((d) => d.id).sort()).toEqual([...ids].sort());

    // SIGTERM while an attempt is in flight: the receiver answers after the signal, the worker records it, exits 0.
    let answer: (() => void) | null = null;
    receiver.behave((_r, res) => {
      answer = () => res.end('late but fine');
    });
    const slow = (await call(server.url, 'POST', `/webhooks/${hookId}/test?orgId=${orgId}`, { token })).body.delivery.id as string;
    await receiver.waitFor(1, (r) => r.headers['x-service-delivery-id'] === slow);
    worker2.child.kill('SIGTERM');
    await until(() => Promise.resolve(worker2.output()), (o) => o.includes('worker shutting down'), 10_000, 'shutdown line');
    (answer as (() => void) | null)?.();
    expect(await worker2.exited).toBe(0);
    const after = await deliveries(server.url, token, orgId, hookId);
    expect(after.find((d) => d.id === slow)).toMatchObject({ status: 'delivered', responseBody: 'late but fine', attempt: 1 });
  }, 120_000);

  it.skipIf(backend !== 'postgres')('PostgreSQL: a keel worker with METRICS_ENABLED serves its own /metrics (token asked) with the delivery outcomes it made', async () => {
    rx = await startReceiver();
    rx.behave(status(200));
    pg = await createPgDatabase();
    const metricsToken = 'worker-metrics-token-0123456789';
    const port = await freePort();
    const e = env({ DATABASE_URL: pg.url, REDIS_URL: redisUrl(), WORKER: 'off' });
    const server = await startServe(e);
    serves.push(server);
    const { token, orgId, hookId } = await arrange(server.url, rx.url);
    const worker = await startWorkerProcess({ ...e, METRICS_ENABLED: 'true', METRICS_TOKEN: metricsToken, WORKER_METRICS_PORT: String(port) });
    workers.push(worker);
    const id = (await call(server.url, 'POST', `/webhooks/${hookId}/test?orgId=${orgId}`, { token })).body.delivery.id as string;
    await until(() => deliveries(server.url, token, orgId, hookId), (l) => l.some((d) => d.id === id && d.status === 'delivered'), 30_000, 'the test delivery');

    const scrape = (auth?: string) => fetch(`http://127.0.0.1:${port}/metrics`, auth ? { headers: { authorization: auth } } : {});
    const refused = await scrape();
    expect(refused.status).toBe(401);
    expect(await refused.json()).toMatchObject({ code: 'unauthorized' });
    const text = await (await scrape(`Bearer ${metricsToken}`)).text();
    expect(text).toMatch(/^keel_webhook_delivery_attempts_total\{[^}]*outcome="delivered"[^}]*\} 1$/m);
    expect(text).toMatch(/^keel_process_start_time_seconds /m);
    const other = await fetch(`http://127.0.0.1:${port}/api/v1/users/me`);
    expect(other.status).toBe(404);
    expect(await worker.stop('SIGTERM')).toBe(0);
  }, 120_000);
});
