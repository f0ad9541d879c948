/**
 * The outbound-request guard (platform/outbound.ts): the target rules of docs/specification.md "Outbound targets", the development
 * allowance for http and loopback (and only those), and the request itself against real receivers
 * on loopback: headers and body arrive, no redirect is followed, a name that re-resolves to a
 * blocked address at connect time is refused, a silent receiver times out, a huge answer is cut.
 * Host names resolve through a resolver the test controls; IP literals need none.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressBlocked, outboundRequest, vetTarget, type OutboundPolicy, type Resolver } from '../../src/platform/outbound.js';
import { makeCertificate } from '../webhooks/receiver.js';

const PUBLIC = '93.184.216.34';
const names: Record<string, string[]> = {
  'hooks.example.com': [PUBLIC, '2606:2800:220:1:248:1893:25c8:1946'],
  'internal.example.com': ['10.1.2.3'],
  'mixed.example.com': [PUBLIC, '192.168.1.20'],
  'metadata.example.com': ['169.254.169.254'],
  'mapped.example.com': ['::ffff:10.0.0.1'],
};
const resolve: Resolver = (host) => {
  const found = names[host];
  if (!found) return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
  return Promise.resolve(found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
};
const strict: OutboundPolicy = { allowInsecure: false, resolve };
const development: OutboundPolicy = { allowInsecure: true, resolve };

const codeOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'accepted';
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
};

describe('outbound target rules', () => {
  it('accepts a public https target, resolved', async () => {
    const vetted = await vetTarget('https://hooks.example.com/keel?x=1', strict);
    expect(vetted.url.hostname).toBe('hooks.example.com');
    expect(vetted.addresses).toContain(PUBLIC);
  });

  it('refuses what the target rules refuse, saying which rule', async () => {
    const cases: [string, string][] = [
      ['http://hooks.example.com/', 'insecure_url'],
      ['ftp://hooks.example.com/', 'invalid_url'],
      ['not a url', 'invalid_url'],
      ['https://localhost/', 'blocked_host'],
      ['https://api.localhost/', 'blocked_host'],
      ['https://printer.local/', 'blocked_host'],
      ['https://127.0.0.1/', 'blocked_address'],
      ['https://10.0.0.1/', 'blocked_address'],
      ['https://172.16.5.4/', 'blocked_address'],
      ['https://192.168.0.10/', 'blocked_address'],
      ['https://100.64.0.1/', 'blocked_address'],
      ['https://169.254.169.254/latest/meta-data', 'blocked_address'],
      ['https://192.0.2.1/', 'blocked_address'],
      ['https://198.51.100.7/', 'blocked_address'],
      ['https://203.0.113.9/', 'blocked_address'],
      ['https://0.0.0.0/', 'blocked_address'],
      ['https://[::1]/', 'blocked_address'],
      ['https://[fe80::1]/', 'blocked_address'],
      ['https://[fd00::1]/', 'blocked_address'],
      ['https://[::ffff:192.168.1.1]/', 'blocked_address'],
      ['https://[64:ff9b::a00:1]/', 'blocked_address'],
      ['https://[2002:c0a8:101::1]/', 'blocked_address'],
      ['https://internal.example.com/', 'blocked_address'],
      ['https://mixed.example.com/', 'blocked_address'],
      ['https://metadata.example.com/', 'blocked_address'],
      ['https://mapped.example.com/', 'blocked_address'],
      ['https://nowhere.invalid/', 'unresolvable'],
    ];
    for (const [url, code] of cases) expect([url, await codeOf(vetTarget(url, strict))]).toEqual([url, code]);
  });

  it('in development allows http and loopback, and nothing else that is blocked', async () => {
    expect(await codeOf(vetTarget('http://127.0.0.1:8080/hook', development))).toBe('accepted');
    expect(await codeOf(vetTarget('http://[::1]:8080/hook', development))).toBe('accepted');
    expect(await codeOf(vetTarget('http://localhost:8080/hook', { allowInsecure: true }))).toBe('accepted');
    expect(await codeOf(vetTarget('http://10.0.0.1/', development))).toBe('blocked_address');
    expect(await codeOf(vetTarget('http://printer.local/', development))).toBe('blocked_host');
    expect(addressBlocked('127.0.0.1', false)).toBe('loopback');
    expect(addressBlocked('8.8.8.8', false)).toBeNull();
  });
});

describe('outbound requests against real receivers', () => {
  let server: Server;
  let base: string;
  const received: { method: string; path: string; headers: IncomingMessage['headers']; body: string }[] = [];

  beforeAll(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body });
        if (req.url === '/redirect') {
          res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data' }).end();
        } else if (req.url === '/silent') {
          // never answers
        } else if (req.url === '/huge') {
          res.writeHead(200, { 'content-type': 'text/plain' }).end('x'.repeat(64 * 1024));
        } else {
          res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('delivers method, headers and body, and answers status, headers and body', async () => {
    const res = await outboundRequest(`${base}/hook`, { headers: { 'content-type': 'application/json', 'x-service-signature': 'sig' }, body: '{"a":1}', timeoutMs: 5_000, maxResponseBytes: 1024 }, development);
    expect(res.status).toBe(201);
    expect(res.body.toString()).toBe('{"ok":true}');
    expect(res.headers['content-type']).toBe('application/json');
    expect(received.at(-1)).toMatchObject({ method: 'POST', path: '/hook', body: '{"a":1}', headers: { 'x-service-signature': 'sig' } });
  });

  it('refuses a loopback receiver outside development, without connecting', async () => {
    const before = received.length;
    expect(await codeOf(outboundRequest(`${base}/hook`, { timeoutMs: 5_000, maxResponseBytes: 1024 }, strict))).toBe('insecure_url');
    expect(received).toHaveLength(before);
  });

  it('does not follow a redirect (to a metadata address here): the 302 is the answer', async () => {
    const res = await outboundRequest(`${base}/redirect`, { timeoutMs: 5_000, maxResponseBytes: 1024 }, development);
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe('http://169.254.169.254/latest/meta-data');
  });

  it('checks the addresses again when it connects: a name re-resolving to a blocked address is refused', async () => {
    let calls = 0;
    const rebinding: OutboundPolicy = {
      allowInsecure: false,
      resolve: () => Promise.resolve([{ address: calls++ === 0 ? PUBLIC : '127.0.0.1', family: 4 }]),
    };
    expect(await codeOf(outboundRequest('https://rebind.example.com/hook', { timeoutMs: 5_000, maxResponseBytes: 1024 }, rebinding))).toBe('blocked_address');
    expect(calls).toBe(2);
  });

  it('gives up on a receiver that never answers, and cuts an answer that is too large', async () => {
    expect(await codeOf(outboundRequest(`${base}/silent`, { timeoutMs: 300, maxResponseBytes: 1024 }, development))).toBe('timeout');
    expect(await codeOf(outboundRequest(`${base}/huge`, { method: 'GET', timeoutMs: 5_000, maxResponseBytes: 1024 }, development))).toBe('too_large');
  });
});

describe('outbound requests check the server certificate', () => {
  let server: HttpsServer;
  let base: string;
  let cert: string;

  beforeAll(async () => {
    // A self-signed certificate for 127.0.0.1: its own CA, in no trust store unless given as `policy.ca`.
    const material = await makeCertificate();
    cert = material.cert;
    server = createHttpsServer({ key: material.key, cert: material.cert }, (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('secret-bearing answer');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    base = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('refuses a server whose certificate no trusted authority signed, and accepts it once its CA is given', async () => {
    // Each policy has its own connection pool: the refused attempt leaves nothing the accepted one reuses.
    const untrusted: OutboundPolicy = { allowInsecure: true, resolve };
    let refusal: unknown;
    try {
      await outboundRequest(`${base}/token`, { method: 'POST', body: 'client_secret=s3cret', timeoutMs: 5_000, maxResponseBytes: 1024 }, untrusted);
    } catch (err) {
      refusal = err;
    }
    expect(refusal).toMatchObject({ code: 'network' });
    expect((refusal as Error).message).toMatch(/certificate/i);

    const trusted: OutboundPolicy = { allowInsecure: true, resolve, ca: cert };
    const res = await outboundRequest(`${base}/token`, { method: 'GET', timeoutMs: 5_000, maxResponseBytes: 1024 }, trusted);
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('secret-bearing answer');
  });
});
