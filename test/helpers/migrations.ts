import { afterEach } from 'vitest';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { MIGRATIONS_DIR } from '../../src/platform/db/migrator.js';
import { backend } from './app.js';
import { createPgDatabase } from './backends.js';

/**
 * Scratch databases and migration folders for migration tests, removed after each test: an empty
 * database of the run's backend, and a copy of the migrations (all, or those numbered below a number,
 * to migrate a database to the state before a change and then check what the change's file does).
 */
export const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

/** An empty database: a new PostgreSQL database on the postgres project, an in-memory PGlite otherwise. */
export async function freshDatabase(): Promise<Database> {
  if (backend === 'postgres') {
    const pg = await createPgDatabase();
    const db = await openDatabase({ url: pg.url });
    cleanups.push(() => pg.drop(), () => db.close());
    return db;
  }
  const db = await openDatabase({ pgliteDir: 'memory://' });
  cleanups.push(() => db.close());
  return db;
}

/** A copy of the migrations folder; with `before`, only the files numbered below it. */
export function copyMigrations(before?: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'keel-mig-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const numbered = /\/(\d{4})_[^/]*\.sql$/;
  cpSync(MIGRATIONS_DIR, dir, { recursive: true, filter: (src) => before === undefined || !numbered.test(src) || Number(numbered.exec(src)?.[1]) < before });
  return dir;
}
