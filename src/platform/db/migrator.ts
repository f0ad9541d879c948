import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { sha256Hex } from '../crypto.js';
import { rowsOf, type Database } from './client.js';
import { PROJECT_ROOT } from '../paths.js';
import { loggableError } from '../safe-error.js';

export const MIGRATIONS_DIR = join(PROJECT_ROOT, 'drizzle');

export class MigrationError extends Error {
  override name = 'MigrationError';
}

interface MigrationFile {
  name: string;
  sha256: string;
  statements: string[];
}

function readMigrations(dir: string): MigrationFile[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((name) => {
      const text = readFileSync(join(dir, name), 'utf8');
      return {
        name,
        sha256: sha256Hex(text),
        statements: text
          .split('--> statement-breakpoint')
          .map((s) => s.trim())
          .filter(Boolean),
      };
    });
}

/** What failed, in one line: the innermost cause's message, without the query, its parameters or quoted values. */
function reasonOf(err: unknown): string {
  let e = loggableError(err);
  while (e.cause) e = e.cause;
  return `${e.message.split('\n')[0] ?? ''}${e.code !== undefined ? ` (${e.code})` : ''}`;
}

/** The advisory lock every migration run takes first (transaction-scoped). */
export const MIGRATION_LOCK = 7345001;

/**
 * Applies pending migration files in order, in one transaction under an advisory lock taken before
 * any other statement (so several processes starting at once on an empty database apply each file
 * once: even `create table if not exists` races in PostgreSQL's catalog when run outside it). Each
 * applied file's SHA-256 is recorded; a file changed after it was applied, an applied file missing
 * from this build, or an SQL error stops with a MigrationError naming the file, and nothing of the
 * failed run stays applied.
 */
export async function migrate(database: Database, dir = MIGRATIONS_DIR): Promise<{ applied: string[] }> {
  const files = readMigrations(dir);
  return database.db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(${sql.raw(String(MIGRATION_LOCK))})`);
    await tx.execute(
      sql.raw('create table if not exists keel_migrations (name text primary key, sha256 text not null, applied_at timestamptz not null default now())'),
    );
    const rows = rowsOf<{ name: string; sha256: string }>(await tx.execute(sql`select name, sha256 from keel_migrations order by name`));
    const applied = new Map(rows.map((r) => [r.name, r.sha256]));
    const byName = new Map(files.map((f) => [f.name, f]));
    for (const [name, checksum] of applied) {
      const file = byName.get(name);
      if (!file) throw new MigrationError(`Migration ${name} is applied in the database but missing from drizzle/`);
      if (file.sha256 !== checksum) {
        throw new MigrationError(`Migration ${name} was changed after it was applied (checksum mismatch); restore the file`);
      }
    }
    const done: string[] = [];
    for (const file of files) {
      if (applied.has(file.name)) continue;
      for (const statement of file.statements) {
        try {
          await tx.execute(sql.raw(statement));
        } catch (err) {
          throw new MigrationError(`Migration ${file.name} failed: ${reasonOf(err)}`);
        }
      }
      await tx.execute(sql`insert into keel_migrations (name, sha256) values (${file.name}, ${file.sha256})`);
      done.push(file.name);
    }
    return { applied: done };
  });
}

/** Names of files not yet applied (for `keel migrate --status` and start-up when AUTO_MIGRATE=false). */
export async function pendingMigrations(database: Database, dir = MIGRATIONS_DIR): Promise<string[]> {
  const files = readMigrations(dir);
  const exists = await database.query<{ t: string | null }>("select to_regclass('keel_migrations')::text as t");
  if (!exists[0]?.t) return files.map((f) => f.name);
  const applied = new Set((await database.query<{ name: string }>('select name from keel_migrations')).map((r) => r.name));
  return files.filter((f) => !applied.has(f.name)).map((f) => f.name);
}
