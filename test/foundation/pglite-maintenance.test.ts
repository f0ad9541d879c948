import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { PgliteMaintenance, type MaintenanceLog } from '../../src/platform/db/pglite-maintenance.js';
import { backend, backendAvailable, startTestApp } from '../helpers/app.js';

/**
 * PGlite runs PostgreSQL as one standalone backend: `autovacuum` is on, but nothing acts on it, so
 * dead rows stay and transaction ids age towards wraparound unless the server vacuums by itself.
 */
describe.skipIf(backend !== 'pglite')('embedded database maintenance', () => {
  let database: Database;
  const lines: string[] = [];
  const log: MaintenanceLog = { info: (_o, msg) => lines.push(msg), warn: (_o, msg) => lines.push(`warn: ${msg}`) };
  const stats = async (table: string) =>
    (await database.query<{ dead: number; age: number; vacuumed: boolean }>(
      `select s.n_dead_tup::int as dead, age(c.relfrozenxid)::int as age, s.last_vacuum is not null as vacuumed
         from pg_stat_user_tables s join pg_class c on c.oid = s.relid where s.relname = $1`,
      [table],
    ))[0]!;

  beforeAll(async () => {
    database = await openDatabase({ pgliteDir: 'memory://' });
    await database.query('create table churn (id int primary key, v int not null)');
    await database.query('create table quiet (id int primary key)');
    await database.query('insert into churn select g, 0 from generate_series(1, 5000) g');
    await database.query('insert into quiet values (1), (2), (3)');
  });
  afterAll(async () => {
    await database.close();
  });

  it('nothing vacuums by itself: dead rows stay', async () => {
    await database.query('update churn set v = v + 1');
    await database.query('update churn set v = v + 1');
    await database.query('select pg_stat_force_next_flush()');
    const churn = await stats('churn');
    expect(churn.dead).toBeGreaterThanOrEqual(10_000);
    expect(churn.vacuumed).toBe(false);
  });

  it('a pass vacuums the table with dead rows, leaves the quiet one alone, and the next pass has nothing to do', async () => {
    const m = new PgliteMaintenance(database, log);
    const steps = await m.runOnce();
    expect(steps.map((s) => [s.table, s.action])).toEqual([['churn', 'vacuum']]);
    expect(steps[0]!.deadRows).toBeGreaterThanOrEqual(10_000);
    expect(await stats('churn')).toMatchObject({ dead: 0, vacuumed: true });
    expect((await stats('quiet')).vacuumed).toBe(false);
    expect(lines).toContain('database maintenance: vacuum churn');
    expect(await m.runOnce()).toEqual([]);
  });

  it('freezes a table whose transaction ids grew old, whatever its dead rows (anti-wraparound)', async () => {
    for (let i = 0; i < 5; i++) await database.query('insert into quiet values ($1)', [100 + i]);
    const before = await stats('quiet');
    expect(before.age).toBeGreaterThan(0);
    // A threshold of 1 transaction stands for autovacuum_freeze_max_age's 200 million.
    const steps = await new PgliteMaintenance(database, log, { freezeAge: 1 }).runOnce();
    expect(steps.filter((s) => s.action === 'freeze').map((s) => s.table)).toEqual(expect.arrayContaining(['churn', 'quiet']));
    expect((await stats('quiet')).age).toBeLessThan(before.age);
  });
});

describe.skipIf(!backendAvailable())('the server and database maintenance', () => {
  it('runs it on the embedded database only (PostgreSQL has its own autovacuum)', async () => {
    const app = await startTestApp();
    try {
      if (backend === 'pglite') {
        expect(app.server.maintenance).toBeInstanceOf(PgliteMaintenance);
        expect(Array.isArray(await app.server.maintenance!.runOnce())).toBe(true);
      } else expect(app.server.maintenance).toBeNull();
    } finally {
      await app.close();
    }
  });
});
