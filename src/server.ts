import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createKeel, type Keel, type KeelOptions } from './keel.js';
import { buildApp } from './app.js';

export interface RunningServer {
  keel: Keel;
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Builds Keel and listens. Used by `keel serve`, the tests (port 0) and the benchmarks. */
export async function startServer(opts: KeelOptions & { port?: number; host?: string } = {}): Promise<RunningServer> {
  const keel = await createKeel(opts);
  const app = buildApp(keel);
  const host = opts.host ?? keel.config.HOST;
  const port = opts.port ?? keel.config.PORT;
  const server: ServerType = await new Promise((resolve, reject) => {
    const s = serve({ fetch: app.fetch, port, hostname: host }, () => resolve(s));
    s.once('error', reject);
  });
  const actual = (server.address() as AddressInfo).port;
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
