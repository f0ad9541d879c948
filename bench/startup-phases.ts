/**
 * Where a restart's time goes, inside one process started the way `npm start` starts Keel
 * (`node --import tsx`): node + tsx boot, each heavy package's import, the rest of Keel's modules,
 * opening PGlite, the migrations check, the access seed check, the admin bootstrap check, the app
 * build and the first /health. Run it on a data dir that has been started once:
 *
 *   DATA_DIR=/tmp/some-dir node --import tsx bench/startup-phases.ts
 *
 * (without DATA_DIR it makes one and migrates it first, so the phases are those of a restart).
 * Import costs depend on order (shared dependencies load once); the order here is roughly Keel's.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { printTable, tempDir } from './lib.js';

const bootMs = process.uptime() * 1000;
const phases: [string, number][] = [['node + tsx boot (before the first line runs)', bootMs]];
let last = performance.now();
const lap = (label: string): void => {
  const now = performance.now();
  phases.push([label, now - last]);
  last = now;
};

const PACKAGES = [
  'zod', 'pino', 'hono', '@hono/zod-openapi', '@hono/node-server', 'drizzle-orm', 'drizzle-orm/pg-core', 'uuid',
  'ioredis', 'rate-limiter-flexible', 'nodemailer', 'jose', '@node-rs/argon2', 'otplib', 'qrcode', 'libphonenumber-js',
  '@simplewebauthn/server', '@electric-sql/pglite', 'drizzle-orm/pglite',
  // Lazy in Keel (loaded on first use); listed to show what they would cost at start.
  '@zxcvbn-ts/core', '@zxcvbn-ts/language-common', '@zxcvbn-ts/language-en', 'pg', 'drizzle-orm/node-postgres',
];

for (const name of PACKAGES) {
  try {
    await import(name);
    lap(`import ${name}`);
  } catch {
    lap(`import ${name} (not installed)`);
  }
}

const { loadConfig } = await import('../src/config.js');
const { createLogger } = await import('../src/platform/logger.js');
const { openDatabase, pgliteDirFor } = await import('../src/platform/db/client.js');
const { migrate } = await import('../src/platform/db/migrator.js');
const { seedAccess } = await import('../src/modules/access/seed.js');
const { bootstrapAdmin } = await import('../src/modules/identity/bootstrap.js');
const { startServer } = await import('../src/server.js');
lap("import Keel's own modules (src/**, transpiled by tsx)");

const ownDir = !process.env.DATA_DIR;
const dataDir = process.env.DATA_DIR ?? tempDir('keel-phases-');
if (ownDir) {
  // A restart is measured: bring the fresh dir to the state a first start leaves.
  const first = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
  await migrate(first);
  await seedAccess(first.db);
  await first.close();
  last = performance.now();
}

// Keel's default LOG_LEVEL, its lines to a file beside the data dir (as `npm start > keel.log`), not between the figures.
const config = loadConfig({ ...process.env, DATA_DIR: dataDir, DATABASE_URL: undefined, REDIS_URL: undefined });
const { pino } = await import('pino');
const log = createLogger(config.LOG_LEVEL, {}, pino.destination({ dest: join(dataDir, 'keel.log'), sync: false, minLength: 8192 }));
lap('load config');
const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
lap('open PGlite (existing data dir)');
await migrate(database);
lap('migrations check');
await seedAccess(database.db);
lap('access seed check');
await bootstrapAdmin(database.db, log, config.ADMIN_EMAIL, config.ADMIN_PASSWORD);
lap('admin bootstrap check');
const server = await startServer({ config, log, database, skipMigrate: true, port: 0, host: '127.0.0.1' });
lap('build the app and listen');
const { httpGet } = await import('./lib.js');
await httpGet(`${server.url}/health`);
lap('first GET /health');
await server.close();
await database.close();
if (ownDir) rmSync(dataDir, { recursive: true, force: true });

const total = phases.reduce((s, [, ms]) => s + ms, 0);
printTable('Start-up phases of one process (restart on an existing data dir)', ['phase', 'ms'], [
  ...phases.map(([label, ms]) => [label, ms.toFixed(0)]),
  ['total (npm adds ~0.2 s before node starts)', total.toFixed(0)],
]);
