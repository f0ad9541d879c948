import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createKeel, type Keel, type KeelOptions } from './keel.js';
import { buildApp } from './app.js';
import { webhooksOf } from './modules/webhooks/runtime.js';

export interface RunningServer {
  keel: Keel;
  url: string;
  port: number;
  close(): Promise<void>;
}

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

/** Builds Keel and listens. Used by `keel serve`, the tests (port 0) and the benchmarks. */
export async function startServer(opts: KeelOptions & { port?: number; host?: string } = {}): Promise<RunningServer> {
  const keel = await createKeel(opts);
  const host = opts.host ?? keel.config.HOST;
  const port = opts.port ?? keel.config.PORT;
  // The app is built once the port is known, so a default PUBLIC_URL names the port actually taken
  // (PORT=0); it is in place before the first request can be read.
  let handle = (_request: Request, _env: unknown): Response | Promise<Response> => new Response('Starting', { status: 503 });
  let server: ServerType;
  try {
    server = await new Promise<ServerType>((resolve, reject) => {
      const s = serve({ fetch: (request, env) => handle(request, env), port, hostname: host }, () => {
        try {
          const actual = (s.address() as AddressInfo).port;
          if (keel.config.publicUrlFromListenPort) keel.config.publicUrl = `http://localhost:${actual}`;
          const app = buildApp(keel);
          handle = app.fetch;
          resolve(s);
        } catch (err) {
          s.close();
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      s.once('error', (err: NodeJS.ErrnoException) => reject(listenError(err, host, port)));
    });
  } catch (err) {
    await keel.close();
    throw err;
  }
  const actual = (server.address() as AddressInfo).port;
  // The delivery worker runs inside `serve` unless WORKER=off leaves it to `keel worker` processes.
  if (keel.config.WORKER === 'inline') {
    try {
      await webhooksOf(keel).startWorker();
    } catch (err) {
      server.close();
      await keel.close();
      throw err;
    }
  } else if (keel.database.kind === 'pglite') {
    keel.log.warn('WORKER=off on the embedded database: no process delivers webhooks (a keel worker needs PostgreSQL)');
  }
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    keel,
    url: `http://${shownHost}:${actual}`,
    port: actual,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      await keel.close();
    },
  };
}
