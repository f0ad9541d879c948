/**
 * Putting this process's API under load without timing (platform/http/load.ts `RequestLoad`): requests
 * that stay in flight, and an event loop kept saturated as a flood keeps it. Used where work yields to
 * a saturated API (the webhook inbox, the password hashing threads).
 */
import { connect, type Socket } from 'node:net';
import { expect } from 'vitest';
import { API_BASE } from '../../src/app.js';
import type { TestApp } from './app.js';

/**
 * `n` POSTs to `path` (under the API base) that stay in flight: their bodies never finish arriving.
 * Resolves once the app counts them; destroy the sockets to end them.
 */
export async function holdRequests(app: TestApp, n: number, path: string, headers: Record<string, string> = {}): Promise<Socket[]> {
  const { hostname, port } = new URL(app.url);
  const head = Object.entries({ Host: hostname, 'Content-Type': 'application/json', 'Content-Length': '200', ...headers })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  const sockets = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(Number(port), hostname, () => {
            s.write(`POST ${API_BASE}${path} HTTP/1.1\r\n${head}\r\n{"type":`);
            resolve(s);
          });
          s.on('error', reject);
        }),
    ),
  );
  await expect.poll(() => app.server.keel.requests.active).toBeGreaterThanOrEqual(n);
  return sockets;
}

/** Keeps this process's event loop saturated (it still reads its sockets between slices of 5 ms), as a flood does; returns the stop. */
export function saturate(): () => void {
  let on = true;
  const spin = () => {
    const end = performance.now() + 5;
    while (performance.now() < end);
    if (on) setImmediate(spin);
  };
  setImmediate(spin);
  return () => {
    on = false;
  };
}
