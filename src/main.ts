import { createInterface } from 'node:readline';
import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './platform/logger.js';
import { openDatabase, pgliteDirFor } from './platform/db/client.js';
import type { AppError } from './platform/http/errors.js';

// Start-up time: only light modules are imported statically. Each command imports what it needs,
// and `serve` opens the database while the HTTP app's modules load (bench/startup.ts measures it).

const USAGE = `Usage: keel <command>
  serve                 HTTP API (and the worker in-process unless WORKER=off)
  worker                delivery worker and timers only
  migrate               apply pending migrations and exit
  admin create --email <email> [--name <name>]
                        create a platform administrator; the password is read from stdin or a prompt`;

function flag(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
  }
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
  const rlOut = rl as unknown as { _writeToOutput: (s: string) => void };
  process.stdout.write('Password: ');
  rlOut._writeToOutput = () => undefined;
  const answer = await new Promise<string>((resolve) => rl.question('', resolve));
  rl.close();
  process.stdout.write('\n');
  return answer;
}

async function main(argv: string[]): Promise<number> {
  const [command, sub, ...rest] = argv;
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL);
  switch (command) {
    case 'serve': {
      // PGlite's start (WASM instantiation, file reads) overlaps the import of the app's modules.
      const opening = openDatabase({ url: config.DATABASE_URL, pgliteDir: pgliteDirFor(config.DATA_DIR) });
      opening.catch(() => undefined); // awaited below; this only keeps an early failure from going unhandled
      const { startServer } = await import('./server.js');
      const database = await opening;
      let server: Awaited<ReturnType<typeof startServer>>;
      try {
        server = await startServer({ config, log, database });
      } catch (err) {
        await database.close();
        throw err;
      }
      log.info({ url: server.url, version: config.serviceVersion, database: database.kind }, 'Keel is listening');
      const stop = () => {
        log.info('shutting down');
        void server
          .close()
          .then(() => database.close())
          .then(() => process.exit(0));
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      return -1;
    }
    case 'worker': {
      log.info('worker: nothing to run yet (webhook delivery arrives with the webhooks capability)');
      return 0;
    }
    case 'migrate': {
      const [{ migrate }, { seedAccess }] = await Promise.all([import('./platform/db/migrator.js'), import('./modules/access/seed.js')]);
      const database = await openDatabase({ url: config.DATABASE_URL, pgliteDir: pgliteDirFor(config.DATA_DIR) });
      try {
        const { applied } = await migrate(database);
        await seedAccess(database.db);
        log.info({ applied }, applied.length ? 'migrations applied' : 'database is up to date');
      } finally {
        await database.close();
      }
      return 0;
    }
    case 'admin': {
      if (sub !== 'create') break;
      const email = flag(rest, '--email');
      if (!email) {
        process.stderr.write('keel admin create: --email is required\n');
        return 2;
      }
      const password = await readPassword();
      const [{ migrate }, { seedAccess }, { createPlatformAdmin }] = await Promise.all([
        import('./platform/db/migrator.js'),
        import('./modules/access/seed.js'),
        import('./modules/identity/bootstrap.js'),
      ]);
      const database = await openDatabase({ url: config.DATABASE_URL, pgliteDir: pgliteDirFor(config.DATA_DIR) });
      try {
        await migrate(database);
        await seedAccess(database.db);
        const id = await createPlatformAdmin(database.db, { email, password, name: flag(rest, '--name') });
        process.stdout.write(`Created platform administrator ${email} (${id})\n`);
      } finally {
        await database.close();
      }
      return 0;
    }
    default:
      break;
  }
  process.stderr.write(`${USAGE}\n`);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err: unknown) => {
    // By name: the classes live in modules this file imports only when a command needs them.
    const name = err instanceof Error ? err.name : '';
    if (err instanceof ConfigError || name === 'MigrationError' || name === 'AdminExistsError') {
      process.stderr.write(`keel: ${(err as Error).message}\n`);
    } else if (name === 'AppError') {
      const appError = err as AppError;
      const fields = (appError.details?.fields as { path: string; message: string }[] | undefined) ?? [];
      process.stderr.write(`keel: ${appError.message}${fields.map((f) => `; ${f.path} ${f.message}`).join('')}\n`);
    } else {
      process.stderr.write(`keel: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    }
    process.exit(1);
  },
);
