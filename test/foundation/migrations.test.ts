import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { openDatabase } from '../../src/platform/db/client.js';
import { migrate, MigrationError } from '../../src/platform/db/migrator.js';
import { cleanups, copyMigrations, freshDatabase } from '../helpers/migrations.js';
import { backend, backendAvailable } from '../helpers/app.js';


describe.skipIf(!backendAvailable())(`migrations on ${backend}`, () => {
  it('apply every file once and record its checksum', async () => {
    const db = await freshDatabase();
    const first = await migrate(db);
    expect(first.applied).toContain('0000_init.sql');
    expect((await migrate(db)).applied).toEqual([]);
    const rows = await db.query<{ name: string; sha256: string }>('select name, sha256 from keel_migrations');
    expect(rows.map((r) => r.name)).toContain('0000_init.sql');
    expect(rows[0]?.sha256).toMatch(/^[0-9a-f]{64}$/);
    const tables = await db.query<{ t: string }>("select tablename as t from pg_tables where schemaname = 'public'");
    expect(tables.map((t) => t.t)).toEqual(expect.arrayContaining(['users', 'sessions', 'roles', 'organizations', 'audit_logs', 'single_use_records']));
  });

  it('refuse to go on when an applied file was edited, naming the file', async () => {
    const db = await freshDatabase();
    const dir = copyMigrations();
    await migrate(db, dir);
    const file = join(dir, '0000_init.sql');
    writeFileSync(file, `${readFileSync(file, 'utf8')}\n-- edited\n`);
    await expect(migrate(db, dir)).rejects.toThrow(MigrationError);
    await expect(migrate(db, dir)).rejects.toThrow(/0000_init\.sql.*checksum/);
  });

  it('stop on an SQL error, naming the file, and leave nothing of that run applied', async () => {
    const db = await freshDatabase();
    const dir = copyMigrations();
    await migrate(db, dir);
    writeFileSync(join(dir, '0001_good.sql'), 'create table keel_probe_a (id int);');
    writeFileSync(join(dir, '0002_bad.sql'), 'create table keel_probe_b (id int);\n--> statement-breakpoint\nselect * from no_such_table;');
    // One line naming the file and PostgreSQL's reason, never the statement (a query can carry values).
    const failure = await migrate(db, dir).then(() => null, (err: unknown) => err as Error);
    expect(failure?.message).toMatch(/^Migration 0002_bad\.sql failed: relation "no_such_table" does not exist \(42P01\)$/);
    const probe = await db.query<{ a: string | null; b: string | null }>("select to_regclass('keel_probe_a')::text as a, to_regclass('keel_probe_b')::text as b");
    expect(probe[0]).toEqual({ a: null, b: null });
    const names = (await db.query<{ name: string }>('select name from keel_migrations')).map((r) => r.name);
    expect(names).not.toContain('0001_good.sql');
  });
});

describe.skipIf(backend !== 'pglite')('start-up with a bad migration state', () => {
  it('does not start when an applied migration no longer matches its checksum', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'keel-start-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const db = await openDatabase({ pgliteDir: join(dataDir, 'pglite') });
    await migrate(db);
    await db.query("update keel_migrations set sha256 = repeat('0', 64) where name = '0000_init.sql'");
    await db.close();
    const r = spawnSync(join('node_modules', '.bin', 'tsx'), ['src/main.ts', 'serve'], {
      env: { ...process.env, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'silent', NODE_ENV: 'development' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('0000_init.sql');
    expect(r.stderr).toMatch(/checksum/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('does not start on a bad configuration value, with one line naming it', () => {
    const r = spawnSync(join('node_modules', '.bin', 'tsx'), ['src/main.ts', 'serve'], {
      env: { ...process.env, PORT: 'not-a-port' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toMatch(/^keel: Invalid configuration: PORT/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});
