import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type pg from 'pg';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { nodePostgresRunner, registerRunner } from './raw.js';
import type { PGlite as PGliteClient } from '@electric-sql/pglite';
import { activeTracer } from '../tracing/index.js';
import { tracedRunner, tracePglite, tracePool } from '../tracing/db.js';
import { lockDataDir, type DataDirLock } from './data-dir-lock.js';

/** The query builder every module uses; a transaction (`db.transaction(tx => …)`) has the same type. */
export type Db = PgDatabase<PgQueryResultHKT>;

export interface Database {
  kind: 'pglite' | 'postgres';
  db: Db;
  /** Runs one SQL statement with parameters and returns its rows (used by the migrator and probes). */
  query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /**
   * LISTEN on a channel; returns a function that stops listening. `onReconnect` runs when a dropped
   * connection was opened again (notifications sent meanwhile were missed).
   */
  listen(channel: string, onPayload: (payload: string) => void, onReconnect?: () => void): Promise<() => Promise<void>>;
  notify(channel: string, payload: string): Promise<void>;
  close(): Promise<void>;
  /** PGlite only: the whole data dir as a tarball (test templates, backups). */
  dump?: () => Promise<Blob>;
}

export interface DatabaseOptions {
  /** postgres:// URL; unset: embedded PGlite. */
  url?: string | undefined;
  /** Folder for PGlite's files; `memory://` keeps it in memory (tests). */
  pgliteDir?: string;
  /** A PGlite data-dir dump to start from (tests clone a migrated template instead of running initdb). */
  pgliteLoad?: Blob;
  poolSize?: number;
  /** What this process runs (`keel serve`), written into the data directory's lock for a second process to read. */
  command?: string;
}

/**
 * Opens PGlite or a PostgreSQL pool. Each driver is imported only when it is used, so a process on
 * one backend never pays start-up time for the other.
 */
export async function openDatabase(opts: DatabaseOptions): Promise<Database> {
  if (opts.url) return openPostgres(opts.url, opts.poolSize ?? 20);
  return openPglite(opts.pgliteDir ?? 'memory://', opts.pgliteLoad, opts.command);
}

export function pgliteDirFor(dataDir: string): string {
  return join(resolve(dataDir), 'pglite');
}

/** The lock of an embedded data directory: one process at a time (platform/db/data-dir-lock.ts). */
export function pgliteLockFor(pgliteDir: string): string {
  return `${resolve(pgliteDir)}.lock`;
}

/*
 * PGlite's buffer pool (docs/decisions.md "Speed: embedded backend and floods", **The embedded buffer
 * pool**). initdb writes PostgreSQL's default, 128 MB, into the data directory's postgresql.conf, and
 * PGlite's WebAssembly build touches all of it on every open (about 4 ms per MB here): 0.5-1 s of
 * each start and of every test's in-memory database. With 32 MB an open takes 0.2-0.4 s; a block
 * outside the pool is read from the data directory's files (the operating system's cache). Given on
 * the command line, so it holds for data directories made by any earlier version.
 */
export const PGLITE_SHARED_BUFFERS = '32MB';

async function openPglite(dir: string, load?: Blob, command?: string): Promise<Database> {
  let lock: DataDirLock | null = null;
  if (!dir.startsWith('memory://')) {
    mkdirSync(dir, { recursive: true });
    lock = await lockDataDir(pgliteLockFor(dir), dirname(resolve(dir)), command ?? `pid ${process.pid}`);
  }
  try {
    const [{ PGlite }, { drizzle: drizzlePglite }, { pglitePreparedRunner }] = await Promise.all([
      import('@electric-sql/pglite'),
      import('drizzle-orm/pglite'),
      import('./pglite-statements.js'),
    ]);
    const client = await PGlite.create({
      dataDir: dir,
      startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${PGLITE_SHARED_BUFFERS}`],
      ...(load ? { loadDataDir: load } : {}),
    });
    const runner = pglitePreparedRunner(client);
    // Tracing on (docs/deploy.md "Tracing"): a span per statement; off, the driver is untouched.
    if (activeTracer) tracePglite(client);
    if (runner) registerRunner(client, activeTracer ? tracedRunner(runner) : runner);
    return pgliteDatabase(client, drizzlePglite(client), lock);
  } catch (err) {
    lock?.release();
    throw err;
  }
}

function pgliteDatabase(client: PGliteClient, db: Db, lock: DataDirLock | null): Database {
  return {
    kind: 'pglite',
    db,
    async query<T extends Record<string, unknown>>(text: string, params: unknown[] = []) {
      const r = await client.query<T>(text, params);
      return r.rows;
    },
    async listen(channel, onPayload) {
      const unsub = await client.listen(channel, onPayload);
      return async () => {
        await unsub();
      };
    },
    async notify(channel, payload) {
      await client.query('select pg_notify($1, $2)', [channel, payload]);
    },
    async close() {
      try {
        await client.close();
      } finally {
        lock?.release();
      }
    },
    dump: () => client.dumpDataDir('none'),
  };
}

async function openPostgres(url: string, max: number): Promise<Database> {
  const [{ default: pg }, { drizzle: drizzlePg }] = await Promise.all([import('pg'), import('drizzle-orm/node-postgres')]);
  const pool = new pg.Pool({ connectionString: url, max, idleTimeoutMillis: 30_000 });
  // An idle client's error (server restart) must not crash the process; the next query reconnects.
  pool.on('error', () => undefined);
  if (activeTracer) tracePool(pool);
  registerRunner(pool, nodePostgresRunner);
  const db = drizzlePg(pool) as unknown as Db;
  const listeners = new Set<pg.Client>();
  return {
    kind: 'postgres',
    db,
    async query<T extends Record<string, unknown>>(text: string, params: unknown[] = []) {
      const r = await pool.query<T>(text, params);
      return r.rows;
    },
    async listen(channel, onPayload, onReconnect) {
      // One connection of its own; when the server drops it (a restart), it is opened again with a
      // growing pause, LISTEN is repeated and `onReconnect` says messages may have been missed.
      let current: pg.Client | null = null;
      let closed = false;
      let pause = 100;
      const open = async (): Promise<void> => {
        const client = new pg.Client({ connectionString: url });
        client.on('error', () => undefined);
        await client.connect();
        client.on('notification', (n) => {
          if (n.channel === channel && n.payload !== undefined) onPayload(n.payload);
        });
        await client.query(`LISTEN "${channel.replace(/"/g, '')}"`);
        client.once('end', () => {
          listeners.delete(client);
          if (!closed) void reopen();
        });
        current = client;
        listeners.add(client);
      };
      const reopen = async (): Promise<void> => {
        while (!closed) {
          await new Promise((r) => setTimeout(r, pause).unref());
          pause = Math.min(pause * 2, 5_000);
          try {
            await open();
            pause = 100;
            onReconnect?.();
            return;
          } catch {
            // the server is still away: try again after a longer pause
          }
        }
      };
      await open();
      return async () => {
        closed = true;
        const c = current;
        if (c) {
          listeners.delete(c);
          await c.end().catch(() => undefined);
        }
      };
    },
    async notify(channel, payload) {
      await pool.query('select pg_notify($1, $2)', [channel, payload]);
    },
    async close() {
      await Promise.all([...listeners].map((c) => c.end().catch(() => undefined)));
      await pool.end();
    },
  };
}

/** Rows of a `db.execute(sql...)` result (both drivers answer `{ rows }`). */
export function rowsOf<T>(result: unknown): T[] {
  return (result as { rows: T[] }).rows;
}
