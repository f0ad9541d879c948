/**
 * Limits on what one device token may write: update reports per device (AGENT_REPORT_LIMIT an hour)
 * and heartbeats beyond the expected interval (AGENT_HEARTBEAT_LIMIT a minute), both 429 with
 * Retry-After; a report's error text is cut to 500 characters; a signed-in user toggled within
 * AGENT_FIELD_EVENT_WINDOW_SECONDS is told once (the latest value is stored, and told after the window).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { clock } from '../../src/platform/clock.js';
import type { KeelEvent } from '../../src/events.js';
import { agentUpdateReports } from '../../src/modules/agents/schema.js';
import { enroll, enrollmentKey, heartbeat } from '../agents/helpers.js';
import { Agent, HeartbeatDeferred } from '../../agent/agent.js';

const REPORTS = 3;
const HEARTBEATS = 30;

describe.skipIf(!backendAvailable())(`device-side limits (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let key: string;
  const events: KeelEvent[] = [];
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_REPORT_LIMIT: String(REPORTS), AGENT_HEARTBEAT_LIMIT: String(HEARTBEATS) } });
    w = await createWorld(app);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    app.server.keel.events.subscribe('*', (_tx, e) => {
      events.push(e);
      return Promise.resolve();
    });
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  const report = (token: string, error?: string) =>
    app.api('POST', '/agents/update-report', { token, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', state: 'failed', ...(error ? { error } : {}) } });

  it('the (N+1)-th update report of a device is 429 with Retry-After; another device is not held up', async () => {
    const d = await enroll(app, key);
    for (let i = 0; i < REPORTS; i++) expect((await report(d.deviceToken)).status).toBe(204);
    const refused = await report(d.deviceToken);
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await app.server.keel.db.select().from(agentUpdateReports).where(eq(agentUpdateReports.deviceId, d.deviceId))).length).toBe(REPORTS);
    expect((await report((await enroll(app, key)).deviceToken)).status).toBe(204);
  });

  it('heartbeats beyond the limit a minute are 429 with Retry-After', async () => {
    const d = await enroll(app, key);
    for (let i = 0; i < HEARTBEATS; i++) expect((await heartbeat(app, d)).status).toBe(200);
    const refused = await heartbeat(app, d);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('the reference agent takes a 429 heartbeat as "wait Retry-After seconds"', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-limit-'));
    try {
      const agent = new Agent({ server: app.url, enrollmentKey: key, stateDir: join(dir, 'state'), binaryPath: join(dir, 'bin'), initialVersion: '1.0.0', hostname: 'ref-limit', os: 'linux', arch: 'amd64' });
      await agent.enroll();
      for (let i = 0; i < HEARTBEATS; i++) await agent.heartbeat();
      const deferred = await agent.heartbeat().then(() => null, (err: unknown) => err);
      expect(deferred).toBeInstanceOf(HeartbeatDeferred);
      expect((deferred as HeartbeatDeferred).retryAfterSeconds).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a report's error is stored cut to 500 characters", async () => {
    const d = await enroll(app, key);
    expect((await report(d.deviceToken, 'x'.repeat(2000))).status).toBe(204);
    const [row] = await app.server.keel.db.select().from(agentUpdateReports).where(eq(agentUpdateReports.deviceId, d.deviceId));
    expect(row?.error).toBe('x'.repeat(500));
  });

  it('toggling the signed-in user 20 times inside the window is told once; the value then current is told after the window', async () => {
    const d = await enroll(app, key);
    const sessionEvents = () => events.filter((e) => (e.data as { deviceId?: string }).deviceId === d.deviceId && e.type.startsWith('session.')).map((e) => `${e.type}:${(e.data as { username: string }).username}`);
    expect((await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: 'alice' })).status).toBe(200);
    for (let i = 0; i < 20; i++) {
      expect((await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: i % 2 === 0 ? 'bob' : 'alice' })).status).toBe(200);
    }
    expect(sessionEvents()).toEqual(['session.login:alice']);
    // The latest value is stored at once.
    await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: 'bob' });
    expect((await app.api('GET', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).body.loggedInUser).toBe('bob');
    expect(sessionEvents()).toEqual(['session.login:alice']);
    // After the window, the next heartbeat (nothing new in it) tells the change once.
    clock.advance(60_000);
    await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: 'bob' });
    await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: 'bob' });
    expect(sessionEvents()).toEqual(['session.login:alice', 'session.logout:alice', 'session.login:bob']);
  });
});
