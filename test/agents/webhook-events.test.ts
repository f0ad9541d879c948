import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { startReceiver, verifyServiceSignature, type Received, type Receiver } from '../webhooks/receiver.js';
import { clock } from '../../src/platform/clock.js';
import { waitUntil } from '../helpers/wait.js';
import { enroll, enrollmentKey, heartbeat, runSweep } from './helpers.js';

/**
 * Device events reach a webhook receiver: the device events the agents module publishes
 * on the bus arrive, signed, at a real HTTP receiver subscribed to them through the webhooks engine,
 * in the order they happened, and only to the device's organisation.
 */
interface Payload {
  orgId: string;
  data: { deviceId?: string };
}
const payload = (r: Received): Payload => JSON.parse(r.body) as Payload;

describe.skipIf(!backendAvailable())('device events as webhooks', () => {
  let app: TestApp;
  let w: World;
  let rx: Receiver;
  let other: Receiver;
  const secret = 'device-events-secret-0123456789';
  let hookId = '';

  beforeAll(async () => {
    app = await startTestApp();
    w = await createWorld(app);
    rx = await startReceiver();
    other = await startReceiver();
    const events = ['device.enrolled', 'device.online', 'device.offline', 'device.updated', 'device.decommissioned', 'session.login', 'session.logout'];
    const hook = await app.api('POST', '/webhooks', { token: w.tokens.orgAdmin, body: { name: 'psa', url: rx.url, secret, events } });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    hookId = hook.body.id as string;
    // A webhook of another organisation of the same partner hears nothing of these devices.
    const elsewhere = await app.api('POST', `/webhooks?orgId=${w.otherOrgId}`, { token: w.tokens.partnerFull, body: { name: 'other', url: other.url, events } });
    expect(elsewhere.status, JSON.stringify(elsewhere.body)).toBe(201);
  }, 60_000);

  afterAll(async () => {
    clock.reset();
    await rx?.close();
    await other?.close();
    await app?.close();
  });

  it('enrolment, heartbeats, an update, a user session, going offline and decommission arrive each once, signed', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const d = await enroll(app, key);
    expect((await heartbeat(app, d, { components: { agent: '1.0.0' } })).status).toBe(200);
    expect((await heartbeat(app, d, { components: { agent: '1.0.0' } })).status).toBe(200); // nothing new
    expect((await heartbeat(app, d, { components: { agent: '1.1.0' }, loggedInUser: 'alice' })).status).toBe(200);
    // Moving the clock while attempts are in flight would make their leases look expired: let the
    // first four deliveries finish (recorded delivered) before the clock moves.
    await waitUntil(
      'the first four deliveries (enrolled, online, updated, session.login) recorded delivered',
      async () => (await app.api('GET', `/webhooks/${hookId}/deliveries?status=delivered&limit=1`, { token: w.tokens.orgAdmin })).body.pagination,
      (p: { total: number }) => p.total >= 4,
    );
    // Heartbeats stop: the offline timer marks the device. (The clock stays moved until the deliveries
    // it made due have arrived.)
    clock.advance(3 * 60_000 + 1_000);
    await runSweep(app);
    expect((await app.api('DELETE', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).status).toBe(204);

    // Deliveries run in parallel, so they may arrive in any order (each carries its event's timestamp).
    const mine = (r: Received) => payload(r).data.deviceId === d.deviceId;
    const expected = ['device.decommissioned', 'device.enrolled', 'device.offline', 'device.online', 'device.updated', 'session.login'];
    const typesNow = () => [...new Set(rx.received.filter(mine).map((r) => r.headers['x-service-event-type']))].sort();
    await waitUntil(`a delivery of each of ${expected.join(', ')} at the receiver`, typesNow, (types) => types.length >= expected.length);
    expect(typesNow()).toEqual(expected);
    const got = rx.received.filter(mine);
    expect(got.map((r) => r.headers['x-service-event-type']).sort()).toEqual(expected); // each once: an unchanged heartbeat adds nothing
    const byType = new Map(got.map((r) => [r.headers['x-service-event-type'], Date.parse((JSON.parse(r.body) as { timestamp: string }).timestamp)]));
    expect(byType.get('device.enrolled')!).toBeLessThanOrEqual(byType.get('device.online')!);
    expect(byType.get('device.offline')!).toBeLessThanOrEqual(byType.get('device.decommissioned')!);
    clock.reset();
    for (const r of got) {
      expect(verifyServiceSignature(secret, r)).toBe(true);
      expect(payload(r).orgId).toBe(w.orgId);
    }
    expect(other.received.filter((r) => payload(r).data.deviceId === d.deviceId)).toEqual([]);
  }, 60_000);
});
