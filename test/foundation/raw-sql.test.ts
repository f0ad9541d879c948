/**
 * Hand-written hot SQL (platform/db/raw.ts) on this project's backend: prepared statements give the
 * rows drizzle would, run inside the transaction of the handle they are given and never inside
 * another request's open transaction, survive errors, and (on PGlite) really take the prepared path.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { declaredStatement, prepared, rawQuery } from '../../src/platform/db/raw.js';
import '../../src/modules/webhooks/engine.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { pglitePreparedRunner } from '../../src/platform/db/pglite-statements.js';
import type { Db } from '../../src/platform/db/client.js';

const INSERT = prepared('test_probe_insert', 'insert into raw_sql_probe (id, at, doc, flag, note) values ($1, $2::timestamptz, $3::jsonb, $4, $5) returning id');
const BY_ID = prepared('test_probe_by_id', 'select id, at, doc, flag, note from raw_sql_probe where id = $1');
const BY_ID_CUSTOM = prepared('test_probe_by_id_custom', 'select id, at, doc, flag, note from raw_sql_probe where id = $1', { customPlan: true });

describe.skipIf(!backendAvailable())(`raw SQL and prepared statements (${backend})`, () => {
  let app: TestApp;
  let db: Db;

  beforeAll(async () => {
    app = await startTestApp();
    db = app.server.keel.db;
    await app.server.keel.database.query('create table raw_sql_probe (id int primary key, at timestamptz, doc jsonb, flag boolean, note text)');
  });
  afterAll(async () => app?.close());

  it('answers typed rows, the same as the unprepared driver query, call after call', async () => {
    const at = new Date('2026-03-04T05:06:07.089Z');
    await rawQuery(db, INSERT, [1, at.toISOString(), JSON.stringify({ a: [1, 'x'] }), true, null]);
    for (let i = 0; i < 3; i++) {
      const [row] = await rawQuery(db, BY_ID, [1]);
      expect(row).toEqual({ id: 1, at, doc: { a: [1, 'x'] }, flag: true, note: null });
    }
    // The same text unprepared, through the driver's own query(): the same values.
    expect(await rawQuery(db, BY_ID.text, [1])).toEqual(await rawQuery(db, BY_ID, [1]));
  });

  it('runs a customPlan statement unnamed, so it is planned for its parameters every time (never a cached generic plan)', async () => {
    await rawQuery(db, INSERT, [7, new Date().toISOString(), '{}', false, 'custom']);
    for (let i = 0; i < 8; i++) expect(await rawQuery(db, BY_ID_CUSTOM, [7])).toEqual(await rawQuery(db, BY_ID, [7]));
    if (backend === 'pglite') {
      // One session: every statement it has prepared by name is listed here; the custom one never is.
      const names = (await rawQuery<{ name: string }>(db, 'select name from pg_prepared_statements', [])).map((r) => r.name);
      expect(names).toContain('test_probe_by_id');
      expect(names).not.toContain('test_probe_by_id_custom');
    }
    // The webhook claim, whose generic plan once scanned the whole deliveries table (raw.ts).
    expect(declaredStatement('webhook_deliveries_claim')?.customPlan).toBe(true);
  });

  it('runs inside the transaction of the handle it is given: a rollback takes its write away', async () => {
    await expect(
      transaction(db, async (tx) => {
        await rawQuery(tx.db, INSERT, [2, null, null, false, 'rolled back']);
        expect(await rawQuery(tx.db, BY_ID, [2])).toHaveLength(1);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await rawQuery(db, BY_ID, [2])).toEqual([]);
  });

  it('never runs inside another open transaction: a statement beside it does not see its uncommitted row', async () => {
    let reached!: (txDb: Db) => void;
    const inside = new Promise<Db>((resolve) => (reached = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tx = transaction(db, async (t) => {
      await rawQuery(t.db, INSERT, [3, null, null, null, 'uncommitted']);
      reached(t.db);
      await gate;
      throw new Error('roll back');
    });
    const txDb = await inside;
    let settled = false;
    const beside = rawQuery(db, BY_ID, [3]).finally(() => (settled = true));
    if (backend === 'postgres') {
      // Another connection: it answers while the transaction is still open, without its row.
      expect(await beside).toEqual([]);
    } else {
      // PGlite has one session: the statement waits for the transaction. A statement of the transaction
      // issued after it completes first (it queues behind the transaction, not just behind a query).
      expect(await rawQuery(txDb, BY_ID, [3])).toHaveLength(1);
      expect(settled).toBe(false);
    }
    release();
    await expect(tx).rejects.toThrow('roll back');
    expect(await beside).toEqual([]);
  });

  it('runs in a drizzle transaction opened directly too (unprepared there)', async () => {
    await db.transaction(async (tx) => {
      await rawQuery(tx, INSERT, [5, null, JSON.stringify(['direct']), null, 'drizzle transaction']);
      expect(await rawQuery(tx, BY_ID, [5])).toEqual([{ id: 5, at: null, doc: ['direct'], flag: null, note: 'drizzle transaction' }]);
    });
    expect(await rawQuery(db, BY_ID, [5])).toHaveLength(1);
  });

  it('keeps the connection usable after an error, inside and outside a transaction', async () => {
    await expect(rawQuery(db, INSERT, [1, null, null, null, 'duplicate'])).rejects.toMatchObject({ code: '23505' });
    expect(await rawQuery(db, BY_ID, [1])).toHaveLength(1);
    await expect(
      transaction(db, async (tx) => {
        await rawQuery(tx.db, INSERT, [1, null, null, null, 'duplicate']);
      }),
    ).rejects.toMatchObject({ code: '23505' });
    await transaction(db, async (tx) => {
      await rawQuery(tx.db, INSERT, [4, null, null, null, 'after the error']);
    });
    expect(await rawQuery(db, BY_ID, [4])).toHaveLength(1);
  });

  it('rejects SQL that does not parse, every time, and one name for two texts', async () => {
    const broken = prepared('test_probe_broken', 'selec nothing');
    await expect(rawQuery(db, broken, [])).rejects.toMatchObject({ code: '42601' });
    await expect(rawQuery(db, broken, [])).rejects.toMatchObject({ code: '42601' });
    expect(() => prepared('test_probe_by_id', 'select 1')).toThrow(/another text/);
  });

  it.runIf(backend === 'pglite')('takes the prepared path on PGlite (its internal locks are still there)', async () => {
    const { PGlite } = await import('@electric-sql/pglite');
    const pg = await PGlite.create();
    try {
      const run = pglitePreparedRunner(pg);
      expect(run).not.toBeNull();
      const statement = prepared('test_probe_pglite', 'select $1::int + 1 as n');
      expect(await run!(pg, statement, [41], false)).toEqual([{ n: 42 }]);
      const { rows } = await pg.query<{ n: number }>("select count(*)::int as n from pg_prepared_statements where name = 'test_probe_pglite'");
      expect(rows).toEqual([{ n: 1 }]);
    } finally {
      await pg.close();
    }
  });
});
