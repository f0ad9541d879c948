/**
 * The webhook URL guard through the API (docs/specification.md "Outbound targets"): every blocked range and IPv4/IPv6
 * literal encoding, and host names answering blocked addresses, refused at create and update with
 * `invalid_webhook_url`, under the production policy (ALLOW_INSECURE_TARGETS=false). Then DNS
 * rebinding: a host whose answer changes to a private address after it was saved is never connected
 * to, whether the change comes before the attempt's check or between that check and the connect; the
 * attempt fails without a request, with the spec's "unsafe webhook URL" text. Names resolve through
 * resolvers the test injects into the app's outbound policy; no test needs the internet, and no
 * connection to a private address is ever attempted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LookupAddress } from 'node:dns';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import type { Resolver } from '../../src/platform/outbound.js';
import { startReceiver, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, publish, type WebhookWorld } from './setup.js';

const PUBLIC = '93.184.216.34';

const answers: Record<string, string[]> = {
  'hooks.example.com': [PUBLIC],
  'internal.example.com': ['10.1.2.3'],
  'mixed.example.com': [PUBLIC, '192.168.1.20'],
  'mixed6.example.com': ['2606:2800:220:1:248:1893:25c8:1946', 'fd00::5'],
  'metadata.example.com': ['169.254.169.254'],
  'mapped.example.com': ['::ffff:10.0.0.1'],
  'loopback.example.com': ['127.0.0.1'],
  'loopback6.example.com': ['::1'],
  'nat64.example.com': ['64:ff9b::a00:1'],
  'teredo.example.com': ['2001:0:4136:e378:8000:63bf:3fff:fdd2'],
  'cgnat.example.com': ['100.100.100.100'],
  'sixtofour.example.com': ['2002:a00:1::1'],
};
const staticResolver: Resolver = (host) => {
  const found = answers[host];
  if (!found) return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
  return Promise.resolve(found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
};

/** Why an entry is refused, as the answer's message names it after `Invalid webhook URL: `. */
const PRIVATE = 'the address is private, link-local or reserved';
const LOOPBACK = 'the address is loopback';
const notAllowed = (host: string) => `${host} is not allowed`;
const resolvesTo = (host: string, why: 'private, link-local or reserved' | 'loopback') => `${host} resolves to a ${why} address`;
const HTTPS_ONLY = 'the URL must use https';

/** Every entry is refused, each for the reason beside it. */
const BLOCKED: [url: string, reason: string][] = [
  // IPv4 ranges of the table, at their edges.
  ['https://0.0.0.0/', PRIVATE], ['https://0.255.255.255/', PRIVATE], ['https://10.0.0.1/', PRIVATE], ['https://10.255.255.255/', PRIVATE],
  ['https://100.64.0.1/', PRIVATE], ['https://100.127.255.254/', PRIVATE], ['https://127.0.0.1/', LOOPBACK], ['https://127.255.255.254/', LOOPBACK],
  ['https://169.254.169.254/latest/meta-data', PRIVATE], ['https://172.16.0.1/', PRIVATE], ['https://172.31.255.255/', PRIVATE],
  ['https://192.0.0.170/', PRIVATE], ['https://192.0.2.1/', PRIVATE], ['https://192.88.99.1/', PRIVATE], ['https://192.168.0.1/', PRIVATE],
  ['https://198.18.0.1/', PRIVATE], ['https://198.19.255.255/', PRIVATE], ['https://198.51.100.7/', PRIVATE], ['https://203.0.113.9/', PRIVATE],
  ['https://224.0.0.1/', PRIVATE], ['https://239.255.255.250/', PRIVATE], ['https://240.0.0.1/', PRIVATE], ['https://255.255.255.255/', PRIVATE],
  // IPv4 literal encodings.
  ['https://2130706433/', LOOPBACK], ['https://0177.0.0.1/', LOOPBACK], ['https://0x7f.1/', LOOPBACK], ['https://0x7f.0.0.1/', LOOPBACK],
  ['https://0x7f000001/', LOOPBACK], ['https://017700000001/', LOOPBACK], ['https://127.1/', LOOPBACK], ['https://10.1/', PRIVATE],
  ['https://0xa9fea9fe/', PRIVATE], ['https://3232235521/', PRIVATE], ['https://0300.0250.0.1/', PRIVATE], ['https://127.0.0.1./', LOOPBACK],
  // IPv6: unspecified, loopback, forms carrying IPv4 (judged by the IPv4 address), special-purpose ranges.
  ['https://[::]/', PRIVATE], ['https://[::1]/', LOOPBACK], ['https://[::ffff:127.0.0.1]/', LOOPBACK], ['https://[::ffff:7f00:1]/', LOOPBACK],
  ['https://[::ffff:192.168.1.1]/', PRIVATE], ['https://[::ffff:a9fe:a9fe]/', PRIVATE], ['https://[::127.0.0.1]/', LOOPBACK], ['https://[::10.0.0.1]/', PRIVATE],
  ['https://[64:ff9b::7f00:1]/', PRIVATE], ['https://[64:ff9b::808:808]/', PRIVATE], ['https://[64:ff9b:1::1]/', PRIVATE], ['https://[100::1]/', PRIVATE],
  ['https://[2001::1]/', PRIVATE], ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', PRIVATE], ['https://[2001:db8::1]/', PRIVATE],
  ['https://[2002:7f00:1::1]/', PRIVATE], ['https://[2002:808:808::1]/', PRIVATE], ['https://[3fff::1]/', PRIVATE], ['https://[5f00::1]/', PRIVATE],
  ['https://[fc00::1]/', PRIVATE], ['https://[fd12:3456::1]/', PRIVATE], ['https://[fec0::1]/', PRIVATE], ['https://[fe80::1]/', PRIVATE], ['https://[ff02::1]/', PRIVATE],
  // Names: refused by name, by what they resolve to, or for not resolving.
  ['https://localhost/', notAllowed('localhost')], ['https://api.localhost/', notAllowed('api.localhost')], ['https://LOCALHOST./', notAllowed('localhost.')],
  ['https://printer.local/', notAllowed('printer.local')], ['https://internal.example.com/', resolvesTo('internal.example.com', 'private, link-local or reserved')],
  ['https://mixed.example.com/', resolvesTo('mixed.example.com', 'private, link-local or reserved')],
  ['https://mixed6.example.com/', resolvesTo('mixed6.example.com', 'private, link-local or reserved')],
  ['https://metadata.example.com/', resolvesTo('metadata.example.com', 'private, link-local or reserved')],
  ['https://mapped.example.com/', resolvesTo('mapped.example.com', 'private, link-local or reserved')],
  ['https://loopback.example.com/', resolvesTo('loopback.example.com', 'loopback')], ['https://loopback6.example.com/', resolvesTo('loopback6.example.com', 'loopback')],
  ['https://nat64.example.com/', resolvesTo('nat64.example.com', 'private, link-local or reserved')],
  ['https://teredo.example.com/', resolvesTo('teredo.example.com', 'private, link-local or reserved')],
  ['https://cgnat.example.com/', resolvesTo('cgnat.example.com', 'private, link-local or reserved')],
  ['https://sixtofour.example.com/', resolvesTo('sixtofour.example.com', 'private, link-local or reserved')],
  ['https://nowhere.example.com/', 'nowhere.example.com does not resolve'],
  // Scheme.
  ['http://hooks.example.com/', HTTPS_ONLY], ['ftp://hooks.example.com/', HTTPS_ONLY],
];

describe.skipIf(!backendAvailable())('webhook URL guard at create and update (production policy)', () => {
  let app: TestApp;
  let w: WebhookWorld;

  beforeAll(async () => {
    app = await startTestApp({ env: { ALLOW_INSECURE_TARGETS: 'false' } });
    app.server.keel.outbound.resolve = staticResolver;
    w = await createWebhookWorld(app);
  });
  afterAll(async () => {
    await app.close();
  });

  it(`refuses each of ${BLOCKED.length} blocked targets at create and at update`, async () => {
    expect(BLOCKED.length).toBeGreaterThanOrEqual(60);
    const allowed = await createHook(app, w.admin, { url: 'https://hooks.example.com/keel' });
    expect(allowed.status).toBe('active');
    for (const [url, reason] of BLOCKED) {
      const created = await app.api('POST', '/webhooks', { token: w.admin, body: { name: 'x', url, events: ['alert.triggered'] } });
      expect(created.status, url).toBe(400);
      expect(created.body, url).toEqual({ error: `Invalid webhook URL: ${reason}`, code: 'invalid_webhook_url', details: { fields: [{ path: 'url', message: reason }] } });
      const updated = await app.api('PATCH', `/webhooks/${allowed.id}`, { token: w.admin, body: { url } });
      expect(updated.status, url).toBe(400);
      expect(updated.body, url).toEqual({ error: `Invalid webhook URL: ${reason}`, code: 'invalid_webhook_url', details: { fields: [{ path: 'url', message: reason }] } });
    }
    const list = await app.api('GET', '/webhooks', { token: w.admin });
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0].url).toBe('https://hooks.example.com/keel');
  });
});

describe.skipIf(!backendAvailable())('DNS rebinding between validation and delivery', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;
  /** Per host: the answers it gives, one per lookup; the last repeats. */
  const script = new Map<string, string[]>();
  const lookups: { host: string; answer: string }[] = [];

  beforeAll(async () => {
    // Development policy: loopback receivers allowed, private ranges still refused.
    app = await startTestApp({ env: { ALLOW_INSECURE_TARGETS: 'true' } });
    app.server.keel.outbound.resolve = (host): Promise<LookupAddress[]> => {
      const list = script.get(host);
      if (!list) return Promise.reject(new Error(`ENOTFOUND ${host}`));
      const answer = list.length > 1 ? list.shift()! : list[0]!;
      lookups.push({ host, answer });
      return Promise.resolve([{ address: answer, family: 4 }]);
    };
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx.close();
    await app.close();
  });

  it('an answer that turns private after the webhook was saved: the attempt fails without a request', async () => {
    script.set('rebind-a.webhooks.test', ['127.0.0.1', '10.0.0.7']);
    const hook = await createHook(app, w.admin, { url: `http://rebind-a.webhooks.test:${rx.port}/hook`, events: ['alert.triggered'], retryPolicy: { maxRetries: 0 } });
    await publish(app, w.eventsKey, 'alert.triggered', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'failed');
    expect(d.errorMessage).toMatch(/^Unsafe webhook URL: rebind-a\.webhooks\.test resolves to a private, link-local or reserved address$/);
    expect(d.responseStatus).toBeNull();
    expect(rx.connections).toBe(0);
    expect(lookups.filter((l) => l.host === 'rebind-a.webhooks.test').map((l) => l.answer)).toEqual(['127.0.0.1', '10.0.0.7']);
  });

  it('an answer that turns private between the attempt\'s check and its connect: the vetted address is the only one dialled, so nothing is', async () => {
    // Saved (1st lookup), checked before the attempt (2nd), then the connect-time lookup (3rd) answers a private address.
    script.set('rebind-b.webhooks.test', ['127.0.0.1', '127.0.0.1', '10.0.0.7']);
    const hook = await createHook(app, w.admin, { url: `http://rebind-b.webhooks.test:${rx.port}/hook`, events: ['alert.resolved'], retryPolicy: { maxRetries: 0 } });
    await publish(app, w.eventsKey, 'alert.resolved', {});
    const [d] = await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'failed');
    expect(d.errorMessage).toMatch(/^Unsafe webhook URL: /);
    expect(rx.connections).toBe(0);
    expect(lookups.filter((l) => l.host === 'rebind-b.webhooks.test').map((l) => l.answer)).toEqual(['127.0.0.1', '127.0.0.1', '10.0.0.7']);
  });

  it('the same host answering a loopback address throughout is delivered (the guard refuses only what it must)', async () => {
    script.set('steady.webhooks.test', ['127.0.0.1']);
    const hook = await createHook(app, w.admin, { url: `http://steady.webhooks.test:${rx.port}/hook`, events: ['alert.escalated'] });
    await publish(app, w.eventsKey, 'alert.escalated', {});
    await deliveriesUntil(app, w.admin, hook.id, (l) => l.length === 1 && l[0].status === 'delivered');
    expect(rx.connections).toBe(1);
  });
});
