/**
 * Access to the real PostgreSQL / Redis servers started by test/setup/real-backends.ts
 * (globalSetup of the `postgres` vitest project). In the `pglite` project, or when the
 * binaries are not installed, `realBackendsAvailable()` is false: guard suites with
 * `describe.skipIf(!realBackendsAvailable())`.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { REDIS_DATABASES } from '../setup/provided.js';
import type { KeelProvidedContext } from '../setup/provided.js';

function injected(key: keyof KeelProvidedContext): string {
  // In projects without the globalSetup, inject() returns undefined despite its type.
  const value: unknown = inject(key);
  return typeof value === 'string' ? value : '';
}

function requireUrl(key: keyof KeelProvidedContext): string {
  const url = injected(key);
  if (url === '') {
    throw new Error(
      `Real backends are not available (no ${key} provided): run under the 'postgres' vitest project ` +
        `with PostgreSQL and Redis installed, and guard the suite with describe.skipIf(!realBackendsAvailable()).`,
    );
  }
  return url;
}

/** True when the shared PostgreSQL and Redis servers are running for this test run. */
export function realBackendsAvailable(): boolean {
  return injected('pgUrl') !== '' && injected('redisUrl') !== '';
}

/** Superuser URL of the shared server's `postgres` maintenance database. Prefer createPgDatabase(). */
export function pgAdminUrl(): string {
  return requireUrl('pgUrl');
}

export interface PgTestDatabase {
  /** postgres://postgres@127.0.0.1:PORT/keel_test_xxx */
  url: string;
  /** Database name (keel_test_<random hex>). */
  name: string;
  /** Terminates remaining connections to the database and drops it. Idempotent. */
  drop(): Promise<void>;
}

async function withAdminClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: pgAdminUrl() });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Creates a fresh, uniquely named, empty database on the shared PostgreSQL server. */
export async function createPgDatabase(): Promise<PgTestDatabase> {
  const name = `keel_test_${randomBytes(6).toString('hex')}`;
  const ident = pg.escapeIdentifier(name);
  await withAdminClient((c) => c.query(`CREATE DATABASE ${ident}`));
  const url = new URL(pgAdminUrl());
  url.pathname = `/${name}`;
  let dropped = false;
  return {
    url: url.toString(),
    name,
    async drop(): Promise<void> {
      if (dropped) return;
      dropped = true;
      await withAdminClient(async (c) => {
        await c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [
          name,
        ]);
        // WITH (FORCE) (PostgreSQL 13+) also kicks out anything that reconnected in between.
        await c.query(`DROP DATABASE IF EXISTS ${ident} WITH (FORCE)`);
      });
    },
  };
}

/**
 * Redis URL for this test worker. The server is shared by all parallel workers, so each
 * worker gets its own logical database (VITEST_POOL_ID), e.g. redis://127.0.0.1:PORT/1.
 */
export function redisUrl(): string {
  const base = requireUrl('redisUrl');
  const poolId = Number(process.env.VITEST_POOL_ID ?? '0');
  const db = Number.isInteger(poolId) && poolId > 0 ? ((poolId - 1) % (REDIS_DATABASES - 1)) + 1 : 0;
  return `${base}/${db}`;
}

/**
 * Empties this worker's Redis database (see redisUrl()). This is FLUSHDB on the
 * worker's own logical database rather than FLUSHALL, so it cannot wipe keys of a
 * test file running concurrently in another worker.
 */
export async function flushRedis(): Promise<void> {
  const client = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.flushdb();
  } finally {
    client.disconnect();
  }
}
