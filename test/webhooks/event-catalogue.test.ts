import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { login } from '../helpers/fixtures.js';
import { startReceiver, type Receiver } from './receiver.js';
import { clock } from '../../src/platform/clock.js';
import { waitUntil } from '../helpers/wait.js';
import { enroll, enrollmentKey, heartbeat, runSweep } from '../agents/helpers.js';
import { EVENT_TYPES } from '../../src/event-types.js';
import { KEEL_EVENT_DATA } from '../../src/event-catalogue.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

interface Item {
  type: string;
  description: string;
  example: Record<string, unknown>;
  schema?: Record<string, unknown>;
}

/**
 * The event catalogue (docs/decisions.md "Event catalogue"): every event type is listed with a
 * description, an example and the JSON Schema of its delivery body, the same in the API document's
 * `webhooks` section; and what Keel actually delivers matches what it publishes (checked with ajv,
 * an independent JSON Schema validator, on bodies a real receiver got).
 */
describe.skipIf(!backendAvailable())('the event catalogue', () => {
  let app: TestApp;
  let w: World;
  let rx: Receiver;
  let catalogue: Item[] = [];
  const ajv = addFormats(new Ajv2020({ strict: false, allErrors: true }));

  beforeAll(async () => {
    app = await startTestApp({ env: { AGENT_FIELD_EVENT_WINDOW_SECONDS: '0' } });
    w = await createWorld(app);
    rx = await startReceiver();
    const res = await app.api('GET', '/webhooks/event-types?include=schema', { token: w.tokens.orgReadOnly });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    catalogue = res.body.data as Item[];
  });

  afterAll(async () => {
    clock.reset();
    await rx?.close();
    await app?.close();
  });

  it('lists every type once with a description and an example that its own schema accepts; the schema only on request', async () => {
    expect(catalogue.map((i) => i.type)).toEqual([...EVENT_TYPES]);
    for (const item of catalogue) {
      expect(item.description.length, item.type).toBeGreaterThan(10);
      const validate = ajv.compile(item.schema!);
      expect(validate(item.example), `${item.type}: ${ajv.errorsText(validate.errors)}`).toBe(true);
    }
    const plain = await app.api('GET', '/webhooks/event-types', { token: w.tokens.orgReadOnly });
    expect(plain.body.data[0]).not.toHaveProperty('schema');
    expect(plain.body.data[0]).toHaveProperty('example');
    expect((await app.api('GET', '/webhooks/event-types?include=schemas', { token: w.tokens.orgReadOnly })).status).toBe(400);
    expect((await app.api('GET', '/webhooks/event-types')).status).toBe(401);
  });

  it('the schemas are strict: an unknown or missing field of a Keel event is refused', () => {
    const enrolled = catalogue.find((i) => i.type === 'device.enrolled')!;
    const validate = ajv.compile(enrolled.schema!);
    const example = enrolled.example as { data: Record<string, unknown> };
    expect(validate({ ...example, data: { ...example.data, extra: 1 } })).toBe(false);
    const { hostname: _h, ...withoutHostname } = example.data;
    expect(validate({ ...example, data: withoutHostname })).toBe(false);
    expect(validate({ ...example, type: 'device.online' })).toBe(false);
  });

  it('the API document describes each type in its webhooks section with the same schema', async () => {
    const doc = (await app.api('GET', '/openapi.json')).body as { webhooks: Record<string, { post: { requestBody: { content: Record<string, { schema: unknown }> } } }> };
    expect(Object.keys(doc.webhooks).sort()).toEqual([...EVENT_TYPES].sort());
    for (const item of catalogue) expect(doc.webhooks[item.type]!.post.requestBody.content['application/json']!.schema, item.type).toEqual(item.schema);
  });

  it('every event Keel emits, as a receiver gets it, matches its published schema', async () => {
    const all = [...EVENT_TYPES];
    const hook = await app.api('POST', '/webhooks', { token: w.tokens.orgAdmin, body: { name: 'everything', url: rx.url, events: all } });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);

    // Each flow that emits an event: a sign-in and sign-out, a device's life, a test delivery.
    const session = await login(app, w.orgTechnician);
    expect((await app.api('POST', '/auth/logout', { token: session.accessToken })).status).toBeLessThan(300);
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const d = await enroll(app, key);
    expect((await heartbeat(app, d, { components: { agent: '1.0.0' }, loggedInUser: 'alice' })).status).toBe(200);
    expect((await heartbeat(app, d, { components: { agent: '1.1.0' }, loggedInUser: 'bob' })).status).toBe(200);
    expect((await app.api('POST', `/webhooks/${hook.body.id}/test`, { token: w.tokens.orgAdmin })).status).toBe(202);
    // Checked where their flows are: webhook.disabled (a day of failures) in test/webhooks/schedules.test.ts,
    // user.deactivated (SCIM provisioning) in test/scim/scim.test.ts.
    const elsewhere = ['webhook.disabled', 'user.deactivated'];
    const emitted = [...Object.keys(KEEL_EVENT_DATA).filter((t) => !elsewhere.includes(t)), 'webhook.test'];
    const seen = () => new Set(rx.received.map((r) => r.headers['x-service-event-type']));
    const before = emitted.filter((t) => t !== 'device.offline' && t !== 'device.decommissioned');
    await waitUntil(`a delivery of each of ${before.join(', ')}`, seen, (s) => before.every((t) => s.has(t)));
    // Going offline needs the clock moved; then decommission.
    clock.advance(3 * 60_000 + 1_000);
    await runSweep(app);
    expect((await app.api('DELETE', `/devices/${d.deviceId}`, { token: w.tokens.orgAdmin })).status).toBe(204);
    await waitUntil(`a delivery of each of ${emitted.join(', ')}`, seen, (s) => emitted.every((t) => s.has(t)));
    clock.reset();

    const schemaOf = new Map(catalogue.map((i) => [i.type, ajv.compile(i.schema!)]));
    const checked = new Set<string>();
    for (const r of rx.received) {
      const body = JSON.parse(r.body) as { type: string };
      const validate = schemaOf.get(body.type)!;
      expect(validate(body), `${body.type}: ${ajv.errorsText(validate.errors)}\n${r.body}`).toBe(true);
      checked.add(body.type);
    }
    expect([...checked].sort()).toEqual(emitted.sort());
  });
});
