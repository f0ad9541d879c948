import { ConfigError, loadConfig, lookalikeSettings, type Config } from './config.js';
import { createLogger, flushLogs, flushLogsSync, type Logger } from './platform/logger.js';
import { openDatabase, pgliteDirFor, type Database } from './platform/db/client.js';
import type { AppError } from './platform/http/errors.js';
import { loggableError } from './platform/safe-error.js';
import type { Keel } from './keel.js';

// Start-up time: only light modules are imported statically. Each command imports what it needs,
// and `serve` opens the database while the HTTP app's modules load (bench/startup.ts measures it).
//
// Every failure ends in one line on stderr, `keel: …`, and an exit code: 2 for a wrong command line
// (with the usage), 1 for anything else, 130 for a cancelled prompt. Never a stack trace, a query
// or a value from the database (docs/decisions.md "Operating Keel: data directory, CLI, start-up, access log").

const USAGE = `Usage: keel <command> [options]

Commands:
  serve                 HTTP API (and the worker in-process unless WORKER=off)
  worker                delivery worker and timers only
  migrate               apply pending migrations and exit
  admin create --email <email> [--name <name>]
                        create a platform administrator; the password is read from
                        standard input, or asked twice at a hidden prompt
  secrets reseal        seal every stored secret again with the current
                        APP_ENCRYPTION_KEY (after a key rotation, before the old key
                        is dropped from APP_ENCRYPTION_KEYS_PREVIOUS)
  sessions revoke-all   sign every user out everywhere at once (after a suspected
                        compromise); accounts, factors and API keys stay
  release keygen --out <file>
                        write a new Ed25519 release-signing key (PKCS#8 PEM, mode
                        0600, never overwriting) and print its public key (base64)
  release sign --key <file> --file <binary> --version <v> --component <c>
               --os <os> --arch <arch>
                        print the build's signature (base64 Ed25519 over its
                        canonical manifest entry) for POST /agent-versions
  release sign-keys --key <file> --keys <k1,k2,...>
                        print the signature of a release-key list (key rotation)
  audit verify [--org <id>] [--partner <id>]
                        check the audit log's hash chains (of one organisation, of
                        a partner's own entries, or every chain): one JSON line per
                        chain; exit code 1 when one is broken
  audit checkpoints     print the signed checkpoints of the audit chains (JSON
                        lines), to copy out of the database
  help                  show this text (also: keel --help)

Configuration comes from environment variables (README.md, "Configuration"); the release
commands read none: they work on the operator's machine, where the private key stays.`;

/** A wrong command line: exit code 2, the message and the usage. */
class UsageError extends Error {
  override name = 'UsageError';
}

/** A failure with a message meant for the operator as it is: exit code `exitCode`, one line. */
class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

type Command =
  | { name: 'help' }
  | { name: 'serve' }
  | { name: 'worker' }
  | { name: 'migrate' }
  | { name: 'admin create'; email: string; displayName: string | undefined }
  | { name: 'secrets reseal' }
  | { name: 'sessions revoke-all' }
  | { name: 'release'; args: string[] }
  | { name: 'audit verify'; orgId: string | undefined; partnerId: string | undefined }
  | { name: 'audit checkpoints' };

const HELP = new Set(['help', '--help', '-h']);

function noMoreArgs(command: string, rest: string[]): void {
  const [extra] = rest;
  if (extra !== undefined) {
    throw new UsageError(extra.startsWith('-') ? `unknown option ${quote(extra)} for ${command}` : `unexpected argument ${quote(extra)} for ${command}`);
  }
}

/** The argument as typed, shortened and without control characters (it is echoed in an error line). */
function quote(arg: string): string {
  const clean = arg.replace(/[\u0000-\u001f\u007f]/g, '?'); // eslint-disable-line no-control-regex
  return `"${clean.length > 60 ? `${clean.slice(0, 57)}...` : clean}"`;
}

/** `--email x`, `--email=x`: the options of `admin create`. */
function adminCreateOptions(args: string[]): { email: string; displayName: string | undefined } {
  const values = new Map<string, string>();
  const queue = [...args];
  for (let arg = queue.shift(); arg !== undefined; arg = queue.shift()) {
    const [name, inline] = arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (name !== '--email' && name !== '--name') {
      throw new UsageError(name.startsWith('-') ? `unknown option ${quote(name)} for admin create` : `unexpected argument ${quote(arg)} for admin create`);
    }
    const value = inline ?? queue.shift();
    if (value === undefined || (inline === undefined && value.startsWith('--'))) throw new UsageError(`${name} needs a value`);
    if (values.has(name)) throw new UsageError(`${name} is given twice`);
    values.set(name, value);
  }
  const email = values.get('--email')?.trim();
  if (!email) throw new UsageError('admin create: --email is required');
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email) || email.length > 254) throw new UsageError(`admin create: --email ${quote(email)} is not an email address`);
  const displayName = values.get('--name')?.trim();
  if (displayName !== undefined && (displayName.length === 0 || displayName.length > 255)) {
    throw new UsageError('admin create: --name must be 1 to 255 characters');
  }
  return { email, displayName };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `audit verify [--org <id>] [--partner <id>]`, `audit checkpoints`. */
function auditCommand(rest: string[]): Command {
  const [sub, ...args] = rest;
  if (sub === undefined) throw new UsageError('audit needs a subcommand: audit verify, or audit checkpoints');
  if (sub === 'checkpoints') {
    noMoreArgs('audit checkpoints', args);
    return { name: 'audit checkpoints' };
  }
  if (sub !== 'verify') throw new UsageError(`unknown audit subcommand ${quote(sub)}`);
  const values = new Map<string, string>();
  const queue = [...args];
  for (let arg = queue.shift(); arg !== undefined; arg = queue.shift()) {
    const [name, inline] = arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (name !== '--org' && name !== '--partner') {
      throw new UsageError(name.startsWith('-') ? `unknown option ${quote(name)} for audit verify` : `unexpected argument ${quote(arg)} for audit verify`);
    }
    const value = inline ?? queue.shift();
    if (value === undefined || (inline === undefined && value.startsWith('--'))) throw new UsageError(`${name} needs a value`);
    if (values.has(name)) throw new UsageError(`${name} is given twice`);
    if (!UUID.test(value)) throw new UsageError(`audit verify: ${name} ${quote(value)} is not an id`);
    values.set(name, value.toLowerCase());
  }
  if (values.size > 1) throw new UsageError('audit verify: give --org or --partner, not both');
  return { name: 'audit verify', orgId: values.get('--org'), partnerId: values.get('--partner') };
}

/** A command with one subcommand (`admin create`, `secrets reseal`): the arguments after it. */
function subcommand(command: string, only: string, rest: string[], usage = ''): string[] {
  const [sub, ...options] = rest;
  if (sub === undefined) throw new UsageError(`${command} needs a subcommand: ${command} ${only}${usage ? ` ${usage}` : ''}`);
  if (sub !== only) throw new UsageError(`unknown ${command} subcommand ${quote(sub)}`);
  return options;
}

function parseArgs(argv: string[]): Command {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('no command given');
  if (HELP.has(command) || rest.some((a) => a === '--help' || a === '-h')) return { name: 'help' };
  switch (command) {
    case 'serve':
    case 'worker':
    case 'migrate':
      noMoreArgs(command, rest);
      return { name: command };
    case 'admin':
      return { name: 'admin create', ...adminCreateOptions(subcommand('admin', 'create', rest, '--email <email>')) };
    case 'secrets':
      noMoreArgs('secrets reseal', subcommand('secrets', 'reseal', rest));
      return { name: 'secrets reseal' };
    case 'sessions':
      noMoreArgs('sessions revoke-all', subcommand('sessions', 'revoke-all', rest));
      return { name: 'sessions revoke-all' };
    case 'release':
      return { name: 'release', args: rest }; // parsed by modules/agents/release-cli.ts
    case 'audit':
      return auditCommand(rest);
    default:
      throw new UsageError(`unknown command ${quote(command)}`);
  }
}

/** What to do instead, by command, when another process holds the embedded data directory. */
const LOCKED_HINT: Record<string, string> = {
  'keel serve': 'stop that process first, or give this one its own DATA_DIR',
  'keel migrate': 'a running server applies pending migrations itself when it starts; stop it to run keel migrate',
  'keel worker': 'on the embedded database the worker runs inside keel serve (WORKER=inline); separate workers need PostgreSQL (DATABASE_URL)',
  'keel secrets reseal': 'stop the server first (on PostgreSQL, keel secrets reseal runs beside serving processes)',
  'keel audit verify': 'stop the server first (on PostgreSQL, keel audit verify runs beside serving processes)',
  'keel audit checkpoints': 'stop the server first (on PostgreSQL, keel audit checkpoints runs beside serving processes)',
  'keel sessions revoke-all': 'stop the server first (on PostgreSQL, keel sessions revoke-all runs beside serving processes and reaches them at once)',
  'keel admin create':
    'stop the server and run keel admin create again, or restart the server with ADMIN_EMAIL and ADMIN_PASSWORD set (used while no administrator exists)',
};

async function open(config: Config, command: string): Promise<Database> {
  try {
    return await openDatabase({ url: config.DATABASE_URL, pgliteDir: pgliteDirFor(config.DATA_DIR), command });
  } catch (err) {
    // By name: DataDirLockedError of platform/db/data-dir-lock.ts.
    if (err instanceof Error && err.name === 'DataDirLockedError') {
      throw new CliError(`cannot open DATA_DIR: ${err.message}; ${LOCKED_HINT[command] ?? 'stop that process first'}`);
    }
    throw err;
  }
}

/** Reads the password for `admin create`: the first line of standard input, or a hidden prompt asked twice. */
async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    const password = Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
    if (password === '') throw new CliError('no password on standard input (give it as the first line, or run in a terminal to be asked)');
    return password;
  }
  const [first = '', second = ''] = await promptHidden(['Password: ', 'Repeat the password: ']);
  if (first === '') throw new CliError('no password given; nothing was created');
  if (first !== second) throw new CliError('the two passwords do not match; nothing was created');
  return first;
}

/**
 * Asks each question on the terminal with echo off (raw mode) and answers the lines typed. Typed or
 * pasted ahead, the next answer is kept. Backspace edits; Ctrl-C or Ctrl-D on an empty line cancels.
 */
function promptHidden(questions: string[]): Promise<string[]> {
  const input = process.stdin;
  const out = process.stderr;
  return new Promise((resolve, reject) => {
    const answers: string[] = [];
    let current = '';
    const finish = (err?: Error): void => {
      input.removeListener('data', onData);
      input.setRawMode(false);
      input.pause();
      if (err) reject(err);
      else resolve(answers);
    };
    const onData = (chunk: string): void => {
      for (const ch of chunk) {
        if (answers.length === questions.length) break;
        if (ch === '\r' || ch === '\n') {
          answers.push(current);
          current = '';
          out.write('\n');
          if (answers.length === questions.length) return finish();
          out.write(questions[answers.length] ?? '');
        } else if (ch === '\u0003' || (ch === '\u0004' && current === '')) {
          out.write('\n');
          return finish(new CliError('cancelled; nothing was created', 130));
        } else if (ch === '\u007f' || ch === '\b') {
          current = current.replace(/.$/u, '');
        } else if (ch >= ' ') {
          current += ch;
        }
      }
    };
    input.setRawMode(true);
    input.setEncoding('utf8');
    input.on('data', onData);
    input.resume();
    out.write(questions[0] ?? '');
  });
}

/** Starts tracing when an OTLP endpoint is configured (docs/deploy.md "Tracing"); before the database opens, so its driver is traced. */
async function startTracingFor(config: Config, log: Logger): Promise<() => Promise<void>> {
  const { startTracing, shutdownTracing, tracesUrl } = await import('./platform/tracing/index.js');
  if (await startTracing(config)) log.info({ endpoint: new URL(tracesUrl(config) ?? '').origin }, 'tracing: spans are exported over OTLP/HTTP');
  return shutdownTracing;
}

async function serve(config: Config, log: Logger): Promise<void> {
  const stopTracing = await startTracingFor(config, log);
  const importing = import('./server.js');
  importing.catch(() => undefined); // awaited below, as `opening`
  // Before any PostgreSQL or Redis traffic (platform/http/warm-up.ts; ~0.3 s, beside the import of
  // the app's modules); the embedded database has no socket.
  if (config.DATABASE_URL || config.REDIS_URL) await (await import('./platform/http/warm-up.js')).warmHttpPath();
  // PGlite's start (WASM instantiation, file reads) overlaps the import of the app's modules.
  const opening = open(config, 'keel serve');
  opening.catch(() => undefined); // awaited below; this only keeps an early failure from going unhandled
  const { startServer } = await importing;
  const database = await opening;
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer({ config, log, database });
  } catch (err) {
    await database.close();
    throw err;
  }
  log.info({ url: server.url, publicUrl: server.keel.config.publicUrl, version: config.serviceVersion, database: database.kind }, 'Keel is listening');
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      // A second Ctrl-C: stop now (the exit hooks still write the buffered log lines and free DATA_DIR).
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    // The listener closes at once and the requests in flight finish (SHUTDOWN_GRACE_MS at most),
    // while the delivery worker stops claiming and finishes its attempts (each within its deadline);
    // then the pools close.
    Promise.all([server.keel.modules.stop({ graceful: true }), server.drain()])
      .then(() => server.close())
      .then(() => database.close())
      // The spans still buffered are exported last.
      .finally(stopTracing)
      .then(
        () => flushLogs().then(() => process.exit(0)),
        (err: unknown) => {
          log.error({ error: loggableError(err) }, 'shutdown failed');
          return flushLogs().then(() => process.exit(1));
        },
      );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

/**
 * A process that does not migrate (`keel worker`) waits for the migrations it needs, as an
 * orchestrator starts it beside the `serve` processes that apply them: one line says what it waits
 * for, it checks every second, and it stops with one line after MIGRATION_WAIT_SECONDS.
 */
async function waitForMigrations(config: Config, log: Logger, pending: () => Promise<string[]>): Promise<void> {
  const deadline = Date.now() + config.MIGRATION_WAIT_SECONDS * 1000;
  let said = false;
  for (;;) {
    let names: string[];
    try {
      names = await pending();
    } catch {
      names = ['(the migration table is being written)'];
    }
    if (names.length === 0) return;
    if (Date.now() >= deadline) throw new CliError(`pending migrations (${names.join(', ')}) after waiting ${config.MIGRATION_WAIT_SECONDS} s: start keel serve or run keel migrate`);
    if (!said) {
      log.info({ pending: names, waitSeconds: config.MIGRATION_WAIT_SECONDS }, 'waiting for migrations: keel serve or keel migrate applies them');
      said = true;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/**
 * `keel worker`: the jobs of the worker role (`processRoles`), on the database `serve` uses, opened
 * the same way (so an embedded DATA_DIR held by a server is refused with the one-line hint). Applies
 * no migrations: it waits for them (`waitForMigrations`). SIGTERM/SIGINT: stop claiming, finish the
 * attempts in flight, exit 0.
 */
async function worker(config: Config, log: Logger): Promise<void> {
  const stopTracing = await startTracingFor(config, log);
  const database = await open(config, 'keel worker');
  let keel: Keel;
  try {
    const [{ openKeel, processRoles }, { pendingMigrations }] = await Promise.all([import('./compose.js'), import('./platform/db/migrator.js')]);
    await waitForMigrations(config, log, () => pendingMigrations(database));
    keel = await openKeel({ config, log, database, skipMigrate: true });
    // The worker role's jobs: the delivery engine, the offline sweep, retention, the domain re-check.
    await keel.modules.start(processRoles('worker'));
  } catch (err) {
    await database.close();
    throw err;
  }
  // The worker serves no API: with METRICS_ENABLED its /metrics listens on WORKER_METRICS_PORT.
  let metrics: { port: number; close(): Promise<void> } | null = null;
  if (keel.metrics.enabled) {
    const { serveMetrics } = await import('./platform/http/metrics.js');
    try {
      metrics = await serveMetrics(keel.metrics, config.METRICS_TOKEN, config.HOST, config.WORKER_METRICS_PORT);
    } catch (err) {
      await keel.modules.stop({ graceful: true }).then(() => keel.close()).then(() => database.close());
      const code = (err as NodeJS.ErrnoException).code;
      throw new CliError(`cannot serve worker metrics on ${config.HOST}:${config.WORKER_METRICS_PORT}: ${code ?? 'listen failed'}; set WORKER_METRICS_PORT to a free port`);
    }
    log.info({ url: `http://${config.HOST}:${metrics.port}/metrics` }, 'worker metrics are served');
  }
  log.info({ database: database.kind, redis: config.REDIS_URL ? 'on' : 'off', concurrency: config.WEBHOOK_CONCURRENCY }, 'Keel worker is delivering webhooks');
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) process.exit(1);
    stopping = true;
    log.info({ signal }, 'worker shutting down: finishing attempts in flight');
    keel.modules.stop({ graceful: true })
      .then(() => metrics?.close())
      .then(() => keel.close())
      .then(() => database.close())
      .finally(stopTracing)
      .then(
        () => flushLogs().then(() => process.exit(0)),
        (err: unknown) => {
          log.error({ error: loggableError(err) }, 'worker shutdown failed');
          return flushLogs().then(() => process.exit(1));
        },
      );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

async function migrateCommand(config: Config, log: Logger): Promise<void> {
  const [{ migrate }, { seedAccess }] = await Promise.all([import('./platform/db/migrator.js'), import('./modules/access/seed.js')]);
  const database = await open(config, 'keel migrate');
  try {
    const { applied } = await migrate(database);
    await seedAccess(database.db);
    log.info({ applied }, applied.length ? 'migrations applied' : 'database is up to date');
  } finally {
    await database.close();
  }
}

/** `keel secrets reseal`: every sealed column (as the modules declare them) moved to the current key. */
async function resealCommand(config: Config, log: Logger): Promise<void> {
  const [{ migrate }, { resolveSecrets }, { resealAll }, { SEALED_COLUMNS }] = await Promise.all([
    import('./platform/db/migrator.js'),
    import('./platform/keys.js'),
    import('./platform/reseal.js'),
    import('./compose.js'),
  ]);
  const secrets = resolveSecrets(config, log);
  const database = await open(config, 'keel secrets reseal');
  try {
    await migrate(database);
    const results = await resealAll(database.db, secrets.sealer, SEALED_COLUMNS);
    const resealed = results.reduce((n, r) => n + r.resealed, 0);
    const detail = results.filter((r) => r.resealed > 0).map((r) => `${r.column} ${r.resealed}`);
    process.stdout.write(`Re-sealed ${resealed} value${resealed === 1 ? '' : 's'} with key ${secrets.sealer.currentKeyId}${detail.length ? ` (${detail.join(', ')})` : ''}\n`);
    const unreadable = results.filter((r) => r.unreadable > 0);
    if (unreadable.length > 0) {
      const n = unreadable.reduce((sum, r) => sum + r.unreadable, 0);
      throw new CliError(
        `${n} stored value${n === 1 ? '' : 's'} could not be opened with the configured keys (${unreadable.map((r) => `${r.column} ${r.unreadable}`).join(', ')}): ` +
          'add the key that sealed them to APP_ENCRYPTION_KEYS_PREVIOUS and run keel secrets reseal again',
      );
    }
  } finally {
    await database.close();
  }
}

/**
 * `keel sessions revoke-all`: every live session ends, announced on the invalidation bus (Redis or
 * NOTIFY), so the servers running beside it drop their session caches at once. Audited as the system.
 */
async function revokeAllSessions(config: Config, log: Logger): Promise<void> {
  const [{ openKeel }, { identityOf }, { writeAudit }, { transaction }] = await Promise.all([
    import('./compose.js'),
    import('./modules/identity/context.js'),
    import('./modules/audit/service.js'),
    import('./platform/db/transaction.js'),
  ]);
  const database = await open(config, 'keel sessions revoke-all');
  try {
    const keel = await openKeel({ config, log, database });
    try {
      // The sessions and the audit entry commit together; the caches are told after the commit.
      const ended = await transaction(keel.db, async (tx) => {
        const n = await identityOf(keel).sessions.revokeEveryone(tx.db, 'operator_sign_out', tx.afterCommit);
        await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'sessions.revoke_all', target: { type: 'session', id: '*' }, details: { revoked: n } });
        return n;
      });
      process.stdout.write(`Ended ${ended} session${ended === 1 ? '' : 's'}: every user signs in again\n`);
    } finally {
      await keel.close();
    }
  } finally {
    await database.close();
  }
}

/**
 * `keel audit verify`: the chain of one organisation (`--org`), of a partner's own entries
 * (`--partner`), or every chain, each as the line GET /audit-logs/verify answers (with its scope
 * when several). Resolves to the exit code: 1 when a chain is broken.
 */
async function auditVerify(config: Config, orgId: string | undefined, partnerId: string | undefined): Promise<number> {
  const [{ migrate }, { chainScopes, verifyChain }] = await Promise.all([import('./platform/db/migrator.js'), import('./modules/audit/chain.js')]);
  const database = await open(config, 'keel audit verify');
  try {
    await migrate(database);
    const one = orgId ?? partnerId;
    if (one) {
      const result = await verifyChain(database.db, one);
      process.stdout.write(`${JSON.stringify(result)}\n`);
      return result.ok ? 0 : 1;
    }
    let ok = true;
    for (const scope of await chainScopes(database.db)) {
      const result = await verifyChain(database.db, scope.scopeId);
      ok &&= result.ok;
      process.stdout.write(`${JSON.stringify({ scope: scope.kind, scopeId: scope.scopeId, ...result })}\n`);
    }
    return ok ? 0 : 1;
  } finally {
    await database.close();
  }
}

/** `keel audit checkpoints`: every signed checkpoint, oldest first, one JSON line each (with whether its signature holds). */
async function auditCheckpoints(config: Config): Promise<void> {
  const [{ migrate }, { checkpointSignatureValid, listCheckpoints }] = await Promise.all([import('./platform/db/migrator.js'), import('./modules/audit/chain.js')]);
  const database = await open(config, 'keel audit checkpoints');
  try {
    await migrate(database);
    for (const c of await listCheckpoints(database.db)) {
      process.stdout.write(`${JSON.stringify({ ...c, createdAt: c.createdAt.toISOString(), signatureValid: checkpointSignatureValid(c) })}\n`);
    }
  } finally {
    await database.close();
  }
}

async function adminCreate(config: Config, email: string, displayName: string | undefined): Promise<void> {
  const [{ migrate }, { seedAccess }, { createPlatformAdmin }] = await Promise.all([
    import('./platform/db/migrator.js'),
    import('./modules/access/seed.js'),
    import('./modules/identity/bootstrap.js'),
  ]);
  // The data directory first: a running server holding it is reported before a password is asked for.
  const database = await open(config, 'keel admin create');
  try {
    const password = await readPassword();
    await migrate(database);
    await seedAccess(database.db);
    const id = await createPlatformAdmin(database.db, { email, password, name: displayName });
    process.stdout.write(`Created platform administrator ${email} (${id})\n`);
  } finally {
    await database.close();
  }
}

/** Runs a command; resolves to an exit code, or null while `serve` keeps the process running. */
async function main(argv: string[]): Promise<number | null> {
  const command = parseArgs(argv);
  if (command.name === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (command.name === 'release') {
    // Signing needs no configuration, no database and no secret of the server's.
    const { releaseCommand } = await import('./modules/agents/release-cli.js');
    process.stdout.write(await releaseCommand(command.args));
    return 0;
  }
  // Every command checks the whole configuration, as `serve` does.
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL);
  activeLog = log;
  for (const { name, closest } of lookalikeSettings()) {
    log.warn({ setting: name, closest }, `${name} is not a Keel setting and is ignored: did you mean ${closest}?`);
  }
  switch (command.name) {
    case 'serve':
      await serve(config, log);
      return null;
    case 'worker':
      await worker(config, log);
      return null;
    case 'migrate':
      await migrateCommand(config, log);
      return 0;
    case 'admin create':
      await adminCreate(config, command.email, command.displayName);
      return 0;
    case 'secrets reseal':
      await resealCommand(config, log);
      return 0;
    case 'sessions revoke-all':
      await revokeAllSessions(config, log);
      return 0;
    case 'audit verify':
      return auditVerify(config, command.orgId, command.partnerId);
    case 'audit checkpoints':
      await auditCheckpoints(config);
      return 0;
  }
}

/** The one line a failure prints (without `keel: `), and its exit code. */
function describeFailure(err: unknown): { line: string; code: number } {
  const name = err instanceof Error ? err.name : '';
  if (name === 'UsageError') return { line: `${(err as Error).message}\n\n${USAGE}`, code: 2 };
  if (err instanceof CliError) return { line: err.message, code: err.exitCode };
  // By name: the classes live in modules this file imports only when a command needs them.
  if (err instanceof ConfigError || ['MigrationError', 'AdminExistsError', 'ListenError', 'ReleaseCommandError'].includes(name)) {
    return { line: (err as Error).message, code: 1 };
  }
  if (name === 'AppError') {
    const appError = err as AppError;
    const fields = (appError.details?.fields as { path: string; message: string }[] | undefined) ?? [];
    return { line: `${appError.message}${fields.map((f) => `; ${f.path} ${f.message}`).join('')}`, code: 1 };
  }
  // Anything else: the innermost cause's message, with no query, parameters or stack.
  let e = loggableError(err);
  while (e.cause) e = e.cause;
  const code = e.code !== undefined ? ` (${e.code})` : '';
  return { line: `unexpected error: ${e.name}: ${(e.message.split('\n')[0] ?? '').slice(0, 300)}${code}`, code: 1 };
}

function fail(err: unknown): never {
  const { line, code } = describeFailure(err);
  flushLogsSync();
  process.stderr.write(`keel: ${line}\n`);
  process.exit(code);
}

let activeLog: Logger | null = null;

/** A fault that escaped every handler (while serving): logged in full (without values), the buffered log written, one line, exit 1. */
function fatal(err: unknown): never {
  activeLog?.fatal({ error: loggableError(err) }, 'fatal error');
  fail(err);
}

process.on('uncaughtException', fatal);
process.on('unhandledRejection', fatal);

main(process.argv.slice(2)).then((code) => {
  if (code !== null) {
    void flushLogs().then(() => process.exit(code));
  }
}, fail);
