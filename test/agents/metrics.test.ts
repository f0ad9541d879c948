/**
 * Agent metrics in `GET /metrics` (heartbeat rate, devices by status):
 * `keel_agent_heartbeats_total{outcome}`, `keel_agent_update_reports_total{state}` and
 * `keel_devices{status}`, the last counted by the database on each scrape with the status clients see
 * (silent devices and stuck updates read `offline` before the timer stores it).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { sample } from '../ops/prometheus.js';
import { clock } from '../../src/platform/clock.js';
import { enroll, enrollmentKey, heartbeat } from './helpers.js';

describe.skipIf(!backendAvailable())(`agent metrics (${backend})`, () => {
  let app: TestApp;
  let w: World;
  const scrape = async (): Promise<string> => {
    const res = await app.request<string>('GET', '/metrics');
    expect(res.status).toBe(200);
    return res.body;
  };
  const byStatus = (text: string) => ({
    online: sample(text, 'keel_devices', { status: 'online' }),
    offline: sample(text, 'keel_devices', { status: 'offline' }),
    updating: sample(text, 'keel_devices', { status: 'updating' }),
  });
  const heartbeats = (text: string, outcome: string) => sample(text, 'keel_agent_heartbeats_total', { outcome });
  const reports = (text: string, state: string) => sample(text, 'keel_agent_update_reports_total', { state });

  beforeAll(async () => {
    app = await startTestApp({ env: { METRICS_ENABLED: 'true', LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  it('counts heartbeats by outcome and update reports by state; devices by status follow heartbeats, silence, updates and decommission', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const [a, b, c, gone] = [await enroll(app, key), await enroll(app, key), await enroll(app, key), await enroll(app, key)];
    const start = await scrape();
    // Enrolled, never heard from: offline. Every status is shown, 0 included.
    expect(byStatus(start)).toEqual({ online: 0, offline: 4, updating: 0 });
    expect(start).toMatch(/^# TYPE keel_devices gauge$/m);

    for (const d of [a, b, c, gone]) expect((await heartbeat(app, d)).status).toBe(200);
    expect((await heartbeat(app, a)).status).toBe(200); // unchanged: no statement, still counted
    expect((await app.api('POST', '/agents/heartbeat', { token: 'kd_not-a-device-token', body: { components: { agent: '1.0.0' } } })).status).toBe(401);
    expect((await app.api('POST', '/agents/heartbeat', { body: { components: { agent: '1.0.0' } } })).status).toBe(401);
    const report = await app.api('POST', '/agents/update-report', { token: c.deviceToken, body: { component: 'agent', fromVersion: '1.0.0', toVersion: '1.1.0', state: 'started' } });
    expect(report.status).toBe(204);
    const live = await scrape();
    expect(heartbeats(live, 'ok') - heartbeats(start, 'ok')).toBe(5);
    expect(heartbeats(live, 'unauthorized') - heartbeats(start, 'unauthorized')).toBe(2);
    expect(reports(live, 'started') - reports(start, 'started')).toBe(1);
    expect(byStatus(live)).toEqual({ online: 3, offline: 0, updating: 1 });

    // Past three intervals: b and gone fell silent; a's heartbeat (buffered, not yet written) keeps it online.
    clock.advance(3 * 60_000 + 1_000);
    expect((await heartbeat(app, a)).status).toBe(200);
    expect(byStatus(await scrape())).toEqual({ online: 1, offline: 2, updating: 1 });

    // c's update is stuck past 5 minutes: offline; a decommissioned device is no longer counted.
    clock.advance(3 * 60_000);
    expect((await heartbeat(app, a)).status).toBe(200);
    expect((await app.api('DELETE', `/devices/${gone.deviceId}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    const end = await scrape();
    expect(byStatus(end)).toEqual({ online: 1, offline: 2, updating: 0 });
    expect(heartbeats(end, 'ok') - heartbeats(start, 'ok')).toBe(7);
    // Labels are outcomes and statuses, never a device id or token.
    for (const d of [a, b, c, gone]) {
      expect(end).not.toContain(d.deviceId);
      expect(end).not.toContain(d.deviceToken);
    }
  });
});
