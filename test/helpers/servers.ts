import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { findBinaries, pgUrlFor, resolveRunAs, restartPostgres, startPostgres, startRedis, stopServer, type Server } from '../setup/real-backends.js';

/**
 * A PostgreSQL or Redis server of a test's own (the shared ones of test/setup/real-backends.ts serve
 * other files in parallel and must never stop), for fault tests that stop and restart a server.
 */
export interface OwnServer {
  url: string;
  port: number;
  /** Stops the server (PostgreSQL: fast shutdown; Redis: SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port (and, for PostgreSQL, the same data). */
  restart(): Promise<void>;
  close(): Promise<void>;
}

const owned = new Set<Server>();
afterAll(async () => {
  await Promise.all([...owned].map((s) => stopServer(s, 'SIGKILL', 5_000)));
});

function binaries() {
  const found = findBinaries();
  if ('missing' in found) throw new Error(`missing: ${found.missing.join(', ')}`);
  return found.binaries;
}

export async function startOwnPostgres(): Promise<OwnServer> {
  const bin = binaries();
  const runAs = resolveRunAs();
  const dir = mkdtempSync(join(tmpdir(), 'keel-own-pg-'));
  if (runAs !== undefined) chownSync(dir, runAs.uid, runAs.gid);
  let server = (await startPostgres(bin, dir, runAs)).server;
  owned.add(server);
  const port = server.port;
  return {
    url: pgUrlFor(port),
    port,
    async stop() {
      await stopServer(server, 'SIGINT', 15_000);
      owned.delete(server);
    },
    async restart() {
      server = await restartPostgres(bin, dir, runAs, port);
      owned.add(server);
    },
    async close() {
      await stopServer(server, 'SIGINT', 15_000);
      owned.delete(server);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function startOwnRedis(): Promise<OwnServer> {
  const bin = binaries();
  const dir = mkdtempSync(join(tmpdir(), 'keel-own-redis-'));
  let server = await startRedis(bin, dir);
  owned.add(server);
  const port = server.port;
  return {
    url: `redis://127.0.0.1:${port}/0`,
    port,
    async stop() {
      await stopServer(server, 'SIGTERM', 5_000);
      owned.delete(server);
    },
    async restart() {
      server = await startRedis(bin, dir, port);
      owned.add(server);
    },
    async close() {
      await stopServer(server, 'SIGTERM', 5_000);
      owned.delete(server);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
