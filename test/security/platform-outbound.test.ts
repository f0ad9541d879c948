/**
 * The outbound guard (platform/outbound.ts), docs/security.md "Findings", 12:
 * - the blocked-range table (docs/specification.md "Outbound targets" and every special-purpose range), complete, and every IPv4 literal encoding, as a
 *   table of refused and allowed targets (IP literals in URLs, and addresses a name resolves to);
 * - one deadline per attempt, created first: it ends a slow resolution while vetting, a slow
 *   connect-time resolution, a server that accepts TCP and never speaks TLS, and a trickling body.
 *   Each case asserts the `timeout` code (not another failure) and, where it can, the mechanism: the
 *   resolver's AbortSignal fired, the half-open TLS socket was closed by the client.
 * Host names resolve through resolvers the test controls; no test needs the internet.
 */
import { once } from 'node:events';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressBlocked, outboundRequest, vetTarget, type OutboundPolicy, type Resolver } from '../../src/platform/outbound.js';

const PUBLIC_V4 = '93.184.216.34';
const PUBLIC_V6 = '2606:2800:220:1:248:1893:25c8:1946';

const names: Record<string, string[]> = {
  'hooks.example.com': [PUBLIC_V4, PUBLIC_V6],
  'v6only.example.com': ['2001:4860:4860::8888'],
  'internal.example.com': ['10.1.2.3'],
  'mixed.example.com': [PUBLIC_V4, '192.168.1.20'],
  'mixed6.example.com': [PUBLIC_V6, 'fd00::5'],
  'metadata.example.com': ['169.254.169.254'],
  'mapped.example.com': ['::ffff:10.0.0.1'],
  'mapped-hex.example.com': ['::ffff:a9fe:a9fe'],
  'loopback6.example.com': ['::1'],
  'nat64.example.com': ['64:ff9b::a00:1'],
  'teredo.example.com': ['2001:0:4136:e378:8000:63bf:3fff:fdd2'],
  'cgnat.example.com': ['100.100.100.100'],
};
const resolve: Resolver = (host) => {
  const found = names[host];
  if (!found) return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
  return Promise.resolve(found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
};
const strict: OutboundPolicy = { allowInsecure: false, resolve };
const development: OutboundPolicy = { allowInsecure: true, resolve };

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'accepted';
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
}

const BLOCKED = 'blocked_address';

/** [target URL, expected outcome] under the production policy. */
const TABLE: [string, string][] = [
  // IPv4 ranges of the table, at their edges.
  ['https://0.0.0.0/', BLOCKED],
  ['https://0.255.255.255/', BLOCKED],
  ['https://10.0.0.1/', BLOCKED],
  ['https://10.255.255.255/', BLOCKED],
  ['https://100.64.0.1/', BLOCKED],
  ['https://100.127.255.254/', BLOCKED],
  ['https://127.0.0.1/', BLOCKED],
  ['https://127.255.255.254/', BLOCKED],
  ['https://169.254.169.254/latest/meta-data', BLOCKED],
  ['https://172.16.0.1/', BLOCKED],
  ['https://172.31.255.255/', BLOCKED],
  ['https://192.0.0.170/', BLOCKED],
  ['https://192.0.2.1/', BLOCKED],
  ['https://192.88.99.1/', BLOCKED],
  ['https://192.168.0.1/', BLOCKED],
  ['https://198.18.0.1/', BLOCKED],
  ['https://198.19.255.255/', BLOCKED],
  ['https://198.51.100.7/', BLOCKED],
  ['https://203.0.113.9/', BLOCKED],
  ['https://224.0.0.1/', BLOCKED],
  ['https://239.255.255.250/', BLOCKED],
  ['https://240.0.0.1/', BLOCKED],
  ['https://255.255.255.255/', BLOCKED],
  // Every IPv4 literal encoding.
  ['https://2130706433/', BLOCKED], // decimal 127.0.0.1
  ['https://0177.0.0.1/', BLOCKED], // octal
  ['https://0x7f.1/', BLOCKED], // hex, short
  ['https://0x7f.0.0.1/', BLOCKED],
  ['https://0x7f000001/', BLOCKED],
  ['https://017700000001/', BLOCKED],
  ['https://127.1/', BLOCKED], // short form
  ['https://10.1/', BLOCKED],
  ['https://0xa9fea9fe/', BLOCKED], // 169.254.169.254
  ['https://3232235521/', BLOCKED], // 192.168.0.1
  ['https://0300.0250.0.1/', BLOCKED], // 192.168.0.1 in octal
  ['https://127.0.0.1./', BLOCKED], // trailing dot
  // IPv6: loopback, unspecified, forms carrying an IPv4 address, special-purpose ranges.
  ['https://[::]/', BLOCKED],
  ['https://[::1]/', BLOCKED],
  ['https://[::ffff:127.0.0.1]/', BLOCKED], // mapped
  ['https://[::ffff:7f00:1]/', BLOCKED],
  ['https://[::ffff:192.168.1.1]/', BLOCKED],
  ['https://[::ffff:a9fe:a9fe]/', BLOCKED],
  ['https://[::127.0.0.1]/', BLOCKED], // compatible (::/96)
  ['https://[::10.0.0.1]/', BLOCKED],
  ['https://[::ffff:0:7f00:1]/', BLOCKED], // SIIT
  ['https://[::ffff:0:808:808]/', BLOCKED],
  ['https://[64:ff9b::7f00:1]/', BLOCKED], // NAT64
  ['https://[64:ff9b::808:808]/', BLOCKED],
  ['https://[64:ff9b:1::1]/', BLOCKED], // local-use NAT64
  ['https://[100::1]/', BLOCKED], // discard-only
  ['https://[2001::1]/', BLOCKED], // Teredo
  ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', BLOCKED],
  ['https://[2001:2::1]/', BLOCKED], // benchmarking
  ['https://[2001:10::1]/', BLOCKED], // ORCHID
  ['https://[2001:20::1]/', BLOCKED], // ORCHIDv2
  ['https://[2001:1ff:ffff::1]/', BLOCKED], // end of 2001::/23
  ['https://[2001:db8::1]/', BLOCKED], // documentation
  ['https://[2002:7f00:1::1]/', BLOCKED], // 6to4
  ['https://[2002:808:808::1]/', BLOCKED],
  ['https://[3fff::1]/', BLOCKED], // documentation (2024)
  ['https://[3fff:fff::1]/', BLOCKED],
  ['https://[5f00::1]/', BLOCKED], // SRv6 SIDs
  ['https://[fc00::1]/', BLOCKED], // unique local
  ['https://[fd12:3456::1]/', BLOCKED],
  ['https://[fec0::1]/', BLOCKED], // site-local
  ['https://[fe80::1]/', BLOCKED], // link-local
  ['https://[ff02::1]/', BLOCKED], // multicast
  // Names.
  ['https://localhost/', 'blocked_host'],
  ['https://api.localhost/', 'blocked_host'],
  ['https://LOCALHOST./', 'blocked_host'],
  ['https://printer.local/', 'blocked_host'],
  ['https://internal.example.com/', BLOCKED],
  ['https://mixed.example.com/', BLOCKED], // one blocked answer is enough
  ['https://mixed6.example.com/', BLOCKED],
  ['https://metadata.example.com/', BLOCKED],
  ['https://mapped.example.com/', BLOCKED],
  ['https://mapped-hex.example.com/', BLOCKED],
  ['https://loopback6.example.com/', BLOCKED],
  ['https://nat64.example.com/', BLOCKED],
  ['https://teredo.example.com/', BLOCKED],
  ['https://cgnat.example.com/', BLOCKED],
  ['https://nowhere.invalid/', 'unresolvable'],
  ['http://hooks.example.com/', 'insecure_url'],
  ['ftp://hooks.example.com/', 'invalid_url'],
  // Allowed: public addresses, in any encoding, and the neighbours of blocked ranges.
  ['https://hooks.example.com/keel', 'accepted'],
  ['https://v6only.example.com/', 'accepted'],
  ['https://8.8.8.8/', 'accepted'],
  ['https://134744072/', 'accepted'], // 8.8.8.8 in decimal
  ['https://0x08080808/', 'accepted'],
  ['https://010.010.010.010/', 'accepted'], // 8.8.8.8 in octal
  ['https://1.1/', 'accepted'], // 1.0.0.1
  ['https://9.255.255.255/', 'accepted'],
  ['https://11.0.0.1/', 'accepted'],
  ['https://100.63.255.255/', 'accepted'],
  ['https://100.128.0.1/', 'accepted'],
  ['https://126.255.255.255/', 'accepted'],
  ['https://128.0.0.1/', 'accepted'],
  ['https://172.15.255.255/', 'accepted'],
  ['https://172.32.0.1/', 'accepted'],
  ['https://192.0.1.1/', 'accepted'],
  ['https://192.88.98.1/', 'accepted'],
  ['https://198.17.255.255/', 'accepted'],
  ['https://198.20.0.1/', 'accepted'],
  ['https://223.255.255.255/', 'accepted'],
  ['https://[2606:4700:4700::1111]/', 'accepted'],
  ['https://[2001:4860:4860::8888]/', 'accepted'],
  ['https://[2001:200::1]/', 'accepted'], // just past 2001::/23
  ['https://[2003::1]/', 'accepted'],
  ['https://[::ffff:8.8.8.8]/', 'accepted'], // mapped public address: judged by it
  ['https://[::8.8.8.8]/', 'accepted'],
  ['https://[3fff:1000::1]/', 'accepted'], // just past 3fff::/20
  ['https://[5f01::1]/', 'accepted'],
  ['https://[64:ff9b:2::1]/', 'accepted'],
];

describe('outbound guard: the blocked-range table', () => {
  it('has at least 60 cases, refused and allowed', () => {
    expect(TABLE.length).toBeGreaterThanOrEqual(60);
    expect(TABLE.filter(([, c]) => c === 'accepted').length).toBeGreaterThanOrEqual(20);
  });

  for (const [url, expected] of TABLE) {
    it(`${expected === 'accepted' ? 'allows' : 'refuses'} ${url}${expected === 'accepted' ? '' : ` (${expected})`}`, async () => {
      expect(await codeOf(vetTarget(url, strict))).toBe(expected);
    });
  }

  it('judges addresses a resolver answers in any spelling the same way', () => {
    for (const address of ['127.0.0.1', '0177.0.0.1', '2130706433', '::ffff:7f00:1', '[::1]', '::ffff:0:a00:1', '64:ff9b::a00:1', '2002:a00:1::']) {
      expect([address, addressBlocked(address, false)]).not.toEqual([address, null]);
    }
    for (const address of ['8.8.8.8', '134744072', '::ffff:8.8.8.8', '2606:4700:4700::1111']) expect([address, addressBlocked(address, false)]).toEqual([address, null]);
    expect(addressBlocked('not-an-ip', false)).toBe('not an IP address');
  });

  it('in development lets loopback through in every spelling, and nothing else that is blocked', async () => {
    for (const url of ['http://127.0.0.1/', 'http://2130706433/', 'http://0x7f.1/', 'http://[::1]/', 'http://[::ffff:127.0.0.1]/', 'http://loopback6.example.com/']) {
      expect([url, await codeOf(vetTarget(url, development))]).toEqual([url, 'accepted']);
    }
    expect(await codeOf(vetTarget('http://localhost:8080/hook', { allowInsecure: true }))).toBe('accepted');
    for (const url of ['http://10.0.0.1/', 'http://[::ffff:10.0.0.1]/', 'http://[fd00::1]/', 'http://[64:ff9b::7f00:1]/', 'http://169.254.169.254/']) {
      expect([url, await codeOf(vetTarget(url, development))]).toEqual([url, BLOCKED]);
    }
    expect(await codeOf(vetTarget('http://printer.local/', development))).toBe('blocked_host');
  });
});

/**
 * A resolver that answers only when its AbortSignal fires (or, as a guard against a hung run, after a
 * few seconds), and then with a BLOCKED address: if the deadline were not threaded through, the
 * attempt would end as `blocked_address`, never as `timeout`.
 */
function stallingResolver(answer: string, fast?: string): { resolve: Resolver; signals: (AbortSignal | undefined)[]; calls: () => number } {
  const signals: (AbortSignal | undefined)[] = [];
  let calls = 0;
  return {
    signals,
    calls: () => calls,
    resolve: (_host, signal) => {
      calls++;
      if (fast && calls === 1) return Promise.resolve([{ address: fast, family: 4 }]);
      signals.push(signal);
      return new Promise((done) => {
        const give = () => done([{ address: answer, family: 4 }]);
        const fallback = setTimeout(give, 5_000);
        signal?.addEventListener('abort', () => {
          clearTimeout(fallback);
          give();
        });
      });
    },
  };
}

describe('outbound guard: one deadline per attempt', () => {
  let http: Server;
  let httpPort: number;
  let trickleClosed: Promise<void> = Promise.resolve();
  let silentTls: TcpServer;
  let silentPort: number;
  const silentSockets: Socket[] = [];

  beforeAll(async () => {
    http = createHttpServer((req, res) => {
      if (req.url === '/trickle') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        const timer = setInterval(() => res.write('.'), 20);
        trickleClosed = new Promise((resolve) =>
          res.on('close', () => {
            clearInterval(timer);
            resolve();
          }),
        );
        return;
      }
      res.writeHead(204).end();
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', () => r()));
    httpPort = (http.address() as AddressInfo).port;
    // Accepts TCP and never says a word: a TLS handshake with it never ends.
    silentTls = createTcpServer((socket) => {
      silentSockets.push(socket);
      socket.on('error', () => undefined);
      socket.resume(); // reads (and ignores) the ClientHello, so it sees the client close
    });
    await new Promise<void>((r) => silentTls.listen(0, '127.0.0.1', () => r()));
    silentPort = (silentTls.address() as AddressInfo).port;
  });
  afterAll(async () => {
    http.closeAllConnections();
    await new Promise((r) => http.close(r));
    for (const s of silentSockets) s.destroy();
    await new Promise((r) => silentTls.close(r));
  });

  it('ends a slow resolution while vetting: timeout, and the resolver saw the deadline fire', async () => {
    const stalling = stallingResolver('10.0.0.1');
    const policy: OutboundPolicy = { allowInsecure: false, resolve: stalling.resolve };
    expect(await codeOf(outboundRequest('https://slow-dns.example.com/hook', { timeoutMs: 200, maxResponseBytes: 1024 }, policy))).toBe('timeout');
    expect(stalling.calls()).toBe(1);
    expect(stalling.signals[0]?.aborted).toBe(true);
  });

  it('ends a slow connect-time resolution: timeout, and the connect-time resolver saw the deadline fire', async () => {
    // Vetting resolves at once to loopback (allowed in development); the lookup when connecting stalls.
    const stalling = stallingResolver('10.0.0.1', '127.0.0.1');
    const policy: OutboundPolicy = { allowInsecure: true, resolve: stalling.resolve };
    expect(await codeOf(outboundRequest(`http://slow-connect.example.com:${httpPort}/hook`, { timeoutMs: 200, maxResponseBytes: 1024 }, policy))).toBe('timeout');
    expect(stalling.calls()).toBe(2);
    expect(stalling.signals[0]?.aborted).toBe(true);
  });

  it('lets a caller bound the resolution when a URL is saved', async () => {
    const stalling = stallingResolver('10.0.0.1');
    const policy: OutboundPolicy = { allowInsecure: false, resolve: stalling.resolve };
    expect(await codeOf(vetTarget('https://slow-dns.example.com/', policy, AbortSignal.timeout(50)))).toBe('timeout');
    expect(stalling.signals[0]?.aborted).toBe(true);
  });

  it(
    'ends a TLS handshake with a server that never speaks: timeout, and the client closes the socket',
    async () => {
      const before = silentSockets.length;
      const closed = new Promise<void>((resolve) => {
        silentTls.once('connection', (socket: Socket) => {
          void once(socket, 'close').then(() => resolve());
        });
      });
      expect(await codeOf(outboundRequest(`https://127.0.0.1:${silentPort}/hook`, { timeoutMs: 300, maxResponseBytes: 1024 }, development))).toBe('timeout');
      expect(silentSockets.length).toBe(before + 1);
      // The half-open connection does not outlive the attempt (undici's own connect timeout is 10 s; this
      // test's bound, 5 s, is far above the attempt's 300 ms and below that).
      await closed;
    },
    5_000,
  );

  it(
    'ends an answer whose body trickles in: timeout, and the connection is dropped (5 s bound, as above)',
    async () => {
      expect(await codeOf(outboundRequest(`http://127.0.0.1:${httpPort}/trickle`, { method: 'GET', timeoutMs: 300, maxResponseBytes: 1024 * 1024 }, development))).toBe('timeout');
      await trickleClosed;
    },
    5_000,
  );

  it('still answers a receiver that answers in time, over a connection it keeps', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await outboundRequest(`http://127.0.0.1:${httpPort}/ok`, { timeoutMs: 5_000, maxResponseBytes: 1024 }, development);
      expect(res.status).toBe(204);
    }
  });
});
