/**
 * Processes starting together on one empty PostgreSQL database all come up: the
 * migrator takes its advisory lock before any statement (even `create table if not exists
 * keel_migrations`, which otherwise races in PostgreSQL's catalog: "duplicate key value violates
 * unique constraint pg_type_typname_nsp_index"), the seed is idempotent, and the first administrator
 * from ADMIN_EMAIL is created once. PostgreSQL only: PGlite is one process, and its data directory
 * lock refuses a second one (operator-data-dir.test.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import type { Keel } from '../../src/keel.js';
import { openKeel } from '../../src/compose.js';
import { createLogger } from '../../src/platform/logger.js';
import { openDatabase } from '../../src/platform/db/client.js';
import { MIGRATIONS_DIR } from '../../src/platform/db/migrator.js';
import { backend } from '../helpers/app.js';
import { createPgDatabase, realBackendsAvailable, redisUrl } from '../helpers/backends.js';
import { cliEnv, startServe, type ServeProcess } from '../helpers/cli.js';

const PASSWORD = 'granite-meadow-falcon-71-ember';
const PROCESSES = 4;

/** What the database holds after the starts: applied migrations, platform administrators, system roles. */
async function stateOf(url: string): Promise<{ migrations: string[]; admins: string[]; systemRoles: number }> {
  const database = await openDatabase({ url, poolSize: 1 });
  try {
    const migrations = (await database.query<{ name: string }>('select name from keel_migrations order by name')).map((r) => r.name);
    const admins = (await database.query<{ email: string }>('select email from users where is_platform_admin')).map((r) => r.email);
    const [roles] = await database.query<{ n: number }>('select count(*)::int as n from roles where is_system');
    return { migrations, admins, systemRoles: roles?.n ?? 0 };
  } finally {
    await database.close();
  }
}

const migrationFiles = readdirSync(MIGRATIONS_DIR)
  .filter((f) => f.endsWith('.sql'))
  .sort();

describe.skipIf(backend !== 'postgres' || !realBackendsAvailable())('starting together on one empty PostgreSQL database', () => {
  let dataDir: string;
  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'keel-pgrace-'));
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it(`${PROCESSES} starts with their own connections all come up, 5 rounds on a fresh database each`, async () => {
    for (let round = 0; round < 5; round++) {
      const pg = await createPgDatabase();
      const keels: Keel[] = [];
      try {
        const config = loadConfig({
          NODE_ENV: 'test',
          DATA_DIR: dataDir,
          DATABASE_URL: pg.url,
          REDIS_URL: redisUrl(),
          APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
          JWT_SECRET: randomBytes(48).toString('base64url'),
          ADMIN_EMAIL: 'race-admin@example.com',
          ADMIN_PASSWORD: PASSWORD,
        });
        const starts = await Promise.allSettled(Array.from({ length: PROCESSES }, () => openKeel({ config, log: createLogger('silent') })));
        for (const s of starts) if (s.status === 'fulfilled') keels.push(s.value);
        const failures = starts.flatMap((s) => (s.status === 'rejected' ? [(s.reason as Error).message.split('\n')[0]] : []));
        expect(failures, `round ${round}`).toEqual([]);
        expect(await stateOf(pg.url)).toEqual({ migrations: migrationFiles, admins: ['race-admin@example.com'], systemRoles: expect.any(Number) });
        expect((await stateOf(pg.url)).systemRoles).toBeGreaterThan(0);
      } finally {
        await Promise.all(keels.map((k) => k.close()));
        await pg.drop();
      }
    }
  }, 180_000);

  it(`${PROCESSES} keel serve processes started at once all answer /health`, async () => {
    const pg = await createPgDatabase();
    const started: ServeProcess[] = [];
    try {
      const env = cliEnv(dataDir, { DATABASE_URL: pg.url, REDIS_URL: redisUrl(), ADMIN_EMAIL: 'race-admin@example.com', ADMIN_PASSWORD: PASSWORD });
      const starts = await Promise.allSettled(Array.from({ length: PROCESSES }, () => startServe(env)));
      for (const s of starts) if (s.status === 'fulfilled') started.push(s.value);
      const failures = starts.flatMap((s) => (s.status === 'rejected' ? [(s.reason as Error).message] : []));
      expect(failures).toEqual([]);
      expect(started).toHaveLength(PROCESSES);
      expect((await stateOf(pg.url)).admins).toEqual(['race-admin@example.com']);
      expect(await Promise.all(started.map((s) => s.stop('SIGTERM')))).toEqual(Array.from({ length: PROCESSES }, () => 0));
    } finally {
      await Promise.all(started.map((s) => s.stop('SIGKILL')));
      await pg.drop();
    }
  }, 180_000);
});
