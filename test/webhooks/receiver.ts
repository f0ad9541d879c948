/**
 * A real webhook receiver on loopback (node:http or node:https with a certificate made for the test),
 * recording every request it gets with its raw body, and answering as the test tells it to. It also
 * counts TCP connections, so a test can prove that nothing connected at all.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** Date.now() when the body was complete. */
  at: number;
}

export type Behaviour = (req: Received, res: ServerResponse, raw: IncomingMessage) => void | Promise<void>;

export interface Receiver {
  url: string;
  port: number;
  received: Received[];
  connections: number;
  /** How every later request is answered (default: 200 "ok"). */
  behave(fn: Behaviour): void;
  /** Resolves once `n` requests (matching `filter`) have arrived. */
  waitFor(n: number, filter?: (r: Received) => boolean, timeoutMs?: number): Promise<Received[]>;
  /** Resolves with the next request the receiver starts reading (before its answer). */
  nextRequest(): Promise<IncomingMessage>;
  close(): Promise<void>;
}

export const ok: Behaviour = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('ok');
};

export const status =
  (code: number, body = `status ${code}`, headers: Record<string, string> = {}): Behaviour =>
  (_req, res) => {
    res.writeHead(code, { 'content-type': 'text/plain', ...headers });
    res.end(body);
  };

export interface TlsMaterial {
  key: string;
  cert: string;
}

/** A certificate for localhost and 127.0.0.1 (its own CA: pass `cert` as the outbound policy's `ca`). */
export async function makeCertificate(): Promise<TlsMaterial> {
  const { generate } = await import('selfsigned');
  const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }] },
    ],
  } as never);
  return { key: pems.private, cert: pems.cert };
}

export async function startReceiver(opts: { tls?: TlsMaterial } = {}): Promise<Receiver> {
  let behaviour: Behaviour = ok;
  const received: Received[] = [];
  const waiters: (() => void)[] = [];
  const requestWaiters: ((r: IncomingMessage) => void)[] = [];
  const sockets = new Set<Socket>();
  let connections = 0;
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    for (const w of requestWaiters.splice(0)) w(req);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) headers[k] = Array.isArray(v) ? v.join(', ') : (v ?? '');
      const r: Received = { method: req.method ?? '', path: req.url ?? '', headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      received.push(r);
      for (const w of waiters.splice(0)) w();
      void Promise.resolve(behaviour(r, res, req)).catch(() => res.destroy());
    });
  };
  const server: Server = opts.tls ? createHttpsServer({ key: opts.tls.key, cert: opts.tls.cert }, handler) : createHttpServer(handler);
  server.on(opts.tls ? 'secureConnection' : 'connection', () => connections++);
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${opts.tls ? 'https' : 'http'}://${opts.tls ? 'localhost' : '127.0.0.1'}:${port}/hook`,
    port,
    received,
    get connections() {
      return connections;
    },
    behave(fn) {
      behaviour = fn;
    },
    async waitFor(n, filter = () => true, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const got = received.filter(filter);
        if (got.length >= n) return got;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`receiver: ${got.length} of ${n} requests arrived within ${timeoutMs} ms`);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, Math.min(left, 1_000));
          waiters.push(() => {
            clearTimeout(t);
            resolve();
          });
        });
      }
    },
    nextRequest() {
      return new Promise((resolve) => requestWaiters.push(resolve));
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The spec's signature check, as a receiver would write it (constant-time compare). */
export function verifyServiceSignature(secret: string, r: Received, header = 'x-service-signature'): boolean {
  const ts = r.headers['x-service-signature-timestamp'] ?? '';
  const expected = `sha256=${createHmac('sha256', secret).update(`${ts}.${r.body}`).digest('hex')}`;
  const got = r.headers[header] ?? '';
  return got.length === expected.length && timingSafeEqual(Buffer.from(got), Buffer.from(expected));
}

/** The Standard Webhooks check by the `standardwebhooks` package (the key is the secret's UTF-8 bytes). */
export function verifyStandard(secret: string, r: Received): boolean {
  try {
    new Webhook(Buffer.from(secret, 'utf8').toString('base64')).verify(r.body, {
      'webhook-id': r.headers['webhook-id'] ?? '',
      'webhook-timestamp': r.headers['webhook-timestamp'] ?? '',
      'webhook-signature': r.headers['webhook-signature'] ?? '',
    });
    return true;
  } catch {
    return false;
  }
}

/** Standard Webhooks signatures checked by hand against one secret (any of the space-separated ones). */
export function standardSignedBy(secret: string, r: Received): boolean {
  const id = r.headers['webhook-id'] ?? '';
  const ts = r.headers['webhook-timestamp'] ?? '';
  const expected = `v1,${createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${id}.${ts}.${r.body}`).digest('base64')}`;
  return (r.headers['webhook-signature'] ?? '').split(' ').includes(expected);
}
