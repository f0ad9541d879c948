import { serve, type ServerType } from '@hono/node-server';
import { releaseKeysOf } from './modules/agents/release-keys.js';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Keel, KeelOptions } from './keel.js';
import { openKeel, processRoles } from './compose.js';
import { buildApp } from './app.js';
import type { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from './app-env.js';
import { PgliteMaintenance } from './platform/db/pglite-maintenance.js';
import { refusalLogOf } from './platform/http/refusal-log.js';

export interface RunningServer {
  keel: Keel;
  /** The HTTP application being served (its OpenAPI registry holds every route's zod schemas). */
  app: OpenAPIHono<AppEnv>;
  url: string;
  port: number;
  /**
   * Stops accepting connections and lets the requests in flight finish (each idle keep-alive
   * connection is closed as soon as it is idle); those still running after the grace period
   * (`drainMs`, default SHUTDOWN_GRACE_MS) are cut. Resolves when no connection is left and no
   * handler runs (a handler whose client left still commits and announces its change before the
   * pools close; one still running after the grace period is abandoned). Idempotent.
   */
  drain(): Promise<void>;
  /** drain(), then the Keel (its pools, caches and timers). */
  close(): Promise<void>;
  /** VACUUM and ANALYZE every 30 s on the embedded database, which has no autovacuum; null on PostgreSQL. */
  maintenance: PgliteMaintenance | null;
}

/** How long a stopping server lets requests in flight finish before it cuts their connections. */
export const SHUTDOWN_GRACE_MS = 10_000;
/** How often a draining server closes the connections that became idle (keep-alive between requests). */
const DRAIN_POLL_MS = 50;

/** The listen address could not be taken; the message is one line naming HOST/PORT and what to do. */
export class ListenError extends Error {
  override name = 'ListenError';
}

function listenError(err: NodeJS.ErrnoException, host: string, port: number): ListenError {
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return new ListenError(`cannot listen on ${where}: another process already listens there; stop it, or set PORT to a free port`);
    case 'EACCES':
      return new ListenError(`cannot listen on ${where}: permission denied (ports below 1024 need privileges); set PORT to 1024 or above`);
    case 'EADDRNOTAVAIL':
      return new ListenError(`cannot listen on ${where}: HOST is not an address of this machine; set HOST to one of its addresses (e.g. 127.0.0.1 or 0.0.0.0)`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'EAI_NONAME':
      return new ListenError(`cannot listen on ${where}: HOST "${host}" does not resolve to an address; set HOST to an IP address or a name that resolves`);
    default:
      return new ListenError(`cannot listen on ${where}: ${err.code ?? err.message}`);
  }
}

/**
 * A request Node's parser refuses before Keel sees it (headers over 16 KiB, a malformed request
 * line): answered in the error envelope like every other error, then the connection closes.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (!socket.writable || (err as { bytesParsed?: number }).bytesParsed === undefined) {
    socket.destroy();
    return;
  }
  const [status, reason, body] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'Request Header Fields Too Large', { error: 'The request line and headers are too large', code: 'headers_too_large' }]
      : [400, 'Bad Request', { error: 'The request could not be parsed as HTTP', code: 'bad_request' }];
  const text = JSON.stringify(body);
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
}

/**
 * An answer sent while the server drains says `Connection: close`, so a keep-alive client sends its
 * next request on a new connection instead of one this server is about to close under it.
 */
function closing(response: Response): Response {
  try {
    response.headers.set('Connection', 'close');
  } catch {
    // Immutable headers (a Response.redirect): Node closes the connection when the server has closed.
  }
  return response;
}

/**
 * The per-source connection budget (MAX_CONNECTIONS_PER_SOURCE; docs/decisions.md "Speed: embedded
 * backend and floods"): a client address holding that many connections has a new one closed at once,
 * before Node parses a byte of it, and counted in the aggregated refusal line (refusal-log.ts). The
 * proxies of TRUST_PROXY are exempt: every client behind them shares their address.
 */
function budgetConnections(server: ServerType, keel: Keel): void {
  const max = keel.config.MAX_CONNECTIONS_PER_SOURCE;
  if (max <= 0) return;
  const trusted = new Set((keel.config.TRUST_PROXY ?? '').split(',').map((s) => s.trim()).filter(Boolean));
  const open = new Map<string, number>();
  const refusals = refusalLogOf(keel);
  server.on('connection', (socket: Socket) => {
    const raw = socket.remoteAddress ?? '';
    const source = raw.startsWith('::ffff:') ? raw.slice(7) : raw;
    if (trusted.has(raw) || trusted.has(source)) return;
    const held = open.get(source) ?? 0;
    if (held >= max) {
      refusals.refused(source, 'connection', undefined, 'connection_budget');
      socket.destroy();
      return;
    }
    open.set(source, held + 1);
    socket.once('close', () => {
      const left = (open.get(source) ?? 1) - 1;
      if (left <= 0) open.delete(source);
      else open.set(source, left);
    });
  });
}

/** Builds Keel and listens. Used by `keel serve`, the tests (port 0) and the benchmarks. */
export async function startServer(opts: KeelOptions & { port?: number; host?: string; drainMs?: number } = {}): Promise<RunningServer> {
  const keel = await openKeel(opts);
  const host = opts.host ?? keel.config.HOST;
  const port = opts.port ?? keel.config.PORT;
  // The app is built once the port is known, so a default PUBLIC_URL names the port actually taken
  // (PORT=0); it is in place before the first request can be read.
  let handle = (_request: Request, _env: unknown): Response | Promise<Response> => new Response('Starting', { status: 503 });
  let server: ServerType;
  let app: OpenAPIHono<AppEnv> | undefined;
  // Handlers still running: a stop waits for them (not only for the sockets), because a client that
  // left does not stop its handler, and one committing after the pools closed could not announce
  // what it committed (a logout's revocation) to the other processes.
  let inflight = 0;
  let stopping = false;
  let allFinished: (() => void) | null = null;
  const finished = (): void => {
    if (--inflight === 0 && allFinished) allFinished();
  };
  const tracked = (request: Request, env: unknown): Response | Promise<Response> => {
    inflight++;
    let answer: Response | Promise<Response>;
    try {
      answer = handle(request, env);
    } catch (err) {
      finished();
      throw err;
    }
    if (answer instanceof Promise) {
      return answer.then(
        (response) => {
          finished();
          return stopping ? closing(response) : response;
        },
        (err: unknown) => {
          finished();
          throw err;
        },
      );
    }
    finished();
    return stopping ? closing(answer) : answer;
  };
  try {
    server = await new Promise<ServerType>((resolve, reject) => {
      const s = serve({ fetch: tracked, port, hostname: host }, () => {
        try {
          const actual = (s.address() as AddressInfo).port;
          if (keel.config.publicUrlFromListenPort) keel.config.publicUrl = `http://localhost:${actual}`;
          app = buildApp(keel);
          handle = app.fetch;
          resolve(s);
        } catch (err) {
          s.close();
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      s.once('error', (err: NodeJS.ErrnoException) => reject(listenError(err, host, port)));
      s.on('clientError', answerClientError);
      budgetConnections(s, keel);
    });
  } catch (err) {
    await keel.close();
    throw err;
  }
  const actual = (server.address() as AddressInfo).port;
  // The jobs of the API role; the worker's too (the delivery engine, the sweeps) unless WORKER=off
  // leaves them to `keel worker` processes.
  try {
    await keel.modules.start(processRoles('serve', keel.config.WORKER));
  } catch (err) {
    server.close();
    await keel.close();
    throw err;
  }
  if (keel.config.WORKER === 'off' && keel.database.kind === 'pglite') {
    keel.log.warn('WORKER=off on the embedded database: no process delivers webhooks (a keel worker needs PostgreSQL)');
  }
  if (releaseKeysOf(keel.config).keys.length === 0) {
    keel.log.warn('AGENT_RELEASE_PUBLIC_KEYS is not set: unsigned agent builds are accepted and offered (development only; NODE_ENV=production refuses to start without it)');
  }
  let maintenance: PgliteMaintenance | null = null;
  if (keel.database.kind === 'pglite') {
    const m = new PgliteMaintenance(keel.database, keel.log);
    m.start();
    keel.onClose(() => m.stop());
    maintenance = m;
  }
  const shownHost = host.includes(':') ? `[${host}]` : host;
  if (!app) throw new Error('the app was not built');
  const http = server as ServerType & { closeIdleConnections(): void; closeAllConnections(): void };
  const graceMs = opts.drainMs ?? SHUTDOWN_GRACE_MS;
  let draining: Promise<void> | null = null;
  /** Resolves when no handler runs, or after `ms` (a handler stuck on I/O is abandoned, and said so). */
  const handlersFinished = (ms: number): Promise<void> =>
    inflight === 0
      ? Promise.resolve()
      : new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            keel.log.warn({ requests: inflight }, 'shutdown: requests still running after the grace period are abandoned');
            resolve();
          }, ms);
          allFinished = () => {
            clearTimeout(timer);
            resolve();
          };
        });
  const drain = (): Promise<void> =>
    (draining ??= (async () => {
      stopping = true;
      const startedAt = Date.now();
      await new Promise<void>((resolve) => {
        // Stops listening; the callback runs once every connection has closed.
        const idle = setInterval(() => http.closeIdleConnections(), DRAIN_POLL_MS);
        const cut = setTimeout(() => http.closeAllConnections(), graceMs);
        server.close(() => {
          clearInterval(idle);
          clearTimeout(cut);
          resolve();
        });
        http.closeIdleConnections();
      });
      // Connections can close before their handlers end (a client that left): wait for the handlers too,
      // within what is left of the grace period (at least a second).
      await handlersFinished(Math.max(1000, graceMs - (Date.now() - startedAt)));
    })());
  return {
    keel,
    app,
    url: `http://${shownHost}:${actual}`,
    port: actual,
    drain,
    maintenance,
    async close() {
      await drain();
      await keel.close();
    },
  };
}
