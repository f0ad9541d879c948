/**
 * `POST /agents/enroll` is rate limited (docs/decisions.md "Agent update
 * control"): per client IP (every attempt, a wrong key too, so keys cannot be guessed at speed) and
 * per enrolment key, through the project's limiter (Redis on the postgres project, memory on pglite).
 * Client addresses are claimed with X-Forwarded-For through the trusted loopback proxy (TRUST_PROXY).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../agent/agent.js';
import { enrollLimits } from '../../src/modules/agents/devices.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import type { RunningServer } from '../../src/server.js';
import { closeSecond, enrollmentKey, startSecondProcess } from './helpers.js';

const IP_LIMIT = 3;
const KEY_LIMIT = 5;

/** An address no other test claims (the postgres project's Redis is shared by parallel files). */
const freshIp = () => `10.${randomBytes(1)[0]}.${randomBytes(1)[0]}.${1 + (randomBytes(1)[0] ?? 0) % 250}`;

describe.skipIf(!backendAvailable())(`enrolment rate limit (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', ENROLL_IP_LIMIT: String(IP_LIMIT), ENROLL_KEY_LIMIT: String(KEY_LIMIT) } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const enrollFrom = (ip: string, key: string) =>
    app.api('POST', '/agents/enroll', { headers: { 'x-forwarded-for': ip }, body: { enrollmentKey: key, hostname: 'limited', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } });

  function expectLimited(res: Awaited<ReturnType<typeof enrollFrom>>): void {
    expect(res.status).toBe(429);
    expect(res.body).toEqual({ error: expect.any(String), code: 'rate_limited', retryAfter: expect.any(Number) });
    expect(res.body.retryAfter).toBeGreaterThanOrEqual(1);
    expect(res.body.retryAfter).toBeLessThanOrEqual(60);
    expect(res.headers.get('retry-after')).toBe(String(res.body.retryAfter));
  }

  it('per IP: every attempt counts, wrong keys too; beyond the limit 429 with Retry-After; another IP is unaffected', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const guesser = freshIp();
    for (let i = 0; i < IP_LIMIT - 1; i++) {
      const wrong = await enrollFrom(guesser, `ke_${randomBytes(32).toString('base64url')}`);
      expect(wrong.status).toBe(401);
      expect(wrong.body.code).toBe('invalid_enrollment_key');
    }
    expect((await enrollFrom(guesser, key)).status).toBe(201);
    // The limit is spent: a right key from this address is refused too, and no device is made.
    const refused = await enrollFrom(guesser, key);
    expectLimited(refused);
    expect(JSON.stringify(refused.body)).not.toContain('kd_');
    expectLimited(await enrollFrom(guesser, `ke_${randomBytes(32).toString('base64url')}`));
    // Another address enrols with the same key.
    const other = await enrollFrom(freshIp(), key);
    expect(other.status).toBe(201);
    expect(other.body.deviceToken).toMatch(/^kd_/);
  });

  it('per key: beyond the limit from any address 429; another key of the organisation still enrols', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    for (let i = 0; i < KEY_LIMIT; i++) expect((await enrollFrom(freshIp(), key)).status).toBe(201);
    const late = freshIp();
    expectLimited(await enrollFrom(late, key));
    // The refused attempt spent the address's point, not another key's.
    expect((await enrollFrom(late, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId))).status).toBe(201);
  });

  // The agent's address is the loopback (no X-Forwarded-For); on pglite the limiter is this app's own
  // memory, on postgres Redis is shared with every other file's agents: so pglite only.
  it.skipIf(backend !== 'pglite')('the reference agent waits what Retry-After says and enrols then; a wrong key is not retried', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    for (let i = 0; i < KEY_LIMIT; i++) expect((await enrollFrom(freshIp(), key)).status).toBe(201);
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-limit-'));
    try {
      const waits: number[] = [];
      const agent = new Agent({
        server: app.url, enrollmentKey: key, stateDir: join(dir, 'a'), binaryPath: join(dir, 'a-bin'), initialVersion: '1.0.0', hostname: 'patient', os: 'linux', arch: 'amd64',
        // The window passes while the agent waits.
        sleep: async (ms) => {
          waits.push(ms);
          await enrollLimits(app.server.keel).perKey.reset(sha256Hex(key));
        },
      });
      await agent.enrollWithRetry();
      expect(waits).toHaveLength(1);
      expect(waits[0]).toBeGreaterThanOrEqual(1_000);
      expect(waits[0]).toBeLessThanOrEqual(66_000); // Retry-After (at most 60 s) plus up to 10% jitter
      expect(agent.deviceId).toMatch(/^[0-9a-f-]{36}$/);

      const wrong = new Agent({
        server: app.url, enrollmentKey: `ke_${randomBytes(32).toString('base64url')}`, stateDir: join(dir, 'b'), binaryPath: join(dir, 'b-bin'), initialVersion: '1.0.0', hostname: 'wrong', os: 'linux', arch: 'amd64',
        sleep: () => Promise.reject(new Error('a refused key must not be retried')),
      });
      await expect(wrong.enrollWithRetry()).rejects.toThrow('enrolment refused: 401');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the OpenAPI document declares the 429 and names both limits', async () => {
    const doc = (await app.api('GET', '/openapi.json')).body;
    const op = doc.paths['/api/v1/agents/enroll'].post;
    expect(Object.keys(op.responses)).toContain('429');
    expect(op.description).toContain('ENROLL_IP_LIMIT');
    expect(op.description).toContain('ENROLL_KEY_LIMIT');
  });
});

/** Two Keel processes on one PostgreSQL and one Redis: the limits are one budget across both. */
describe.skipIf(!backendAvailable() || backend !== 'postgres')(`enrolment rate limit across processes (${backend})`, () => {
  let app: TestApp;
  let second: RunningServer;
  let w: World;
  const limits = { ENROLL_IP_LIMIT: String(IP_LIMIT), ENROLL_KEY_LIMIT: String(KEY_LIMIT) };
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', ...limits } });
    w = await createWorld(app);
    second = await startSecondProcess(app, limits);
  });
  afterAll(async () => {
    await closeSecond(second);
    await app?.close();
  });

  const enrollAt = async (url: string, ip: string, key: string) => {
    const res = await fetch(`${url}/api/v1/agents/enroll`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': ip },
      body: JSON.stringify({ enrollmentKey: key, hostname: 'limited', os: 'linux', arch: 'amd64', agentVersion: '1.0.0' }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('points spent on one process count on the other, per IP and per key', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const ip = freshIp();
    for (let i = 0; i < IP_LIMIT; i++) expect((await enrollAt(i % 2 ? second.url : app.url, ip, key)).status).toBe(201);
    const refused = await enrollAt(second.url, ip, key);
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('rate_limited');
    expect((await enrollAt(app.url, ip, key)).status).toBe(429);
    // The key has IP_LIMIT of KEY_LIMIT spent; the rest, from new addresses on either process, then 429.
    for (let i = IP_LIMIT; i < KEY_LIMIT; i++) expect((await enrollAt(i % 2 ? second.url : app.url, freshIp(), key)).status).toBe(201);
    expect((await enrollAt(second.url, freshIp(), key)).status).toBe(429);
    expect((await enrollAt(app.url, freshIp(), key)).status).toBe(429);
  });
});
