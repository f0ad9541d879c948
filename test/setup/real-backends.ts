/**
 * vitest globalSetup for the `postgres` project: starts ONE throwaway PostgreSQL
 * server and ONE Redis server for the whole run and provides their URLs to tests
 * (`inject('pgUrl')`, `inject('redisUrl')`; see test/helpers/backends.ts).
 *
 * - PostgreSQL: the newest /usr/lib/postgresql/<v>/bin (Debian layout), else `initdb` +
 *   `postgres` on PATH. Override with KEEL_PG_BIN_DIR=/path/to/bin.
 * - Redis: `redis-server` on PATH (or /usr/bin, /usr/sbin, /usr/local/bin).
 *   Override with KEEL_REDIS_SERVER=/path/to/redis-server.
 * - If a binary is missing, a loud warning is printed and empty URLs are provided so
 *   the dependent tests skip, unless REQUIRE_REAL_BACKENDS=1, which makes the run fail.
 * - Both servers listen on 127.0.0.1 at a random free port, keep all their state
 *   (data dir, unix socket, logs) in one temp dir, and log to files there. The dir is
 *   removed at teardown unless KEEL_KEEP_BACKEND_LOGS=1.
 * - PostgreSQL refuses to run as root: when we are root, initdb runs through
 *   `runuser -u postgres` and the server is spawned with the postgres uid/gid (so the
 *   postmaster is our direct child and receives our signals itself).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { accessSync, chownSync, closeSync, constants, existsSync, openSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { REDIS_DATABASES } from './provided.js';
import type { KeelProvidedContext } from './provided.js';

const execFileAsync = promisify(execFile);

const STARTUP_TIMEOUT_MS = 30_000;
const PORT_ATTEMPTS = 3;

export interface Binaries {
  initdb: string;
  postgres: string;
  redisServer: string;
}

export interface RunAs {
  uid: number;
  gid: number;
}

export interface Server {
  name: string;
  child: ChildProcess;
  port: number;
  logFile: string;
}

// ---------------------------------------------------------------------------
// binary discovery

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

function pathDirs(): string[] {
  return (process.env.PATH ?? '').split(delimiter).filter((d) => d !== '');
}

function compareVersionsDesc(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const diff = (pb[i] ?? 0) - (pa[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

function findPgBinDir(): string | undefined {
  const hasBins = (dir: string): boolean => isExecutable(join(dir, 'initdb')) && isExecutable(join(dir, 'postgres'));
  const override = process.env.KEEL_PG_BIN_DIR;
  if (override !== undefined && override !== '') return hasBins(override) ? override : undefined;

  const debianRoot = '/usr/lib/postgresql';
  if (existsSync(debianRoot)) {
    const versions = readdirSync(debianRoot)
      .filter((v) => /^\d+(\.\d+)*$/.test(v))
      .sort(compareVersionsDesc);
    for (const v of versions) {
      const dir = join(debianRoot, v, 'bin');
      if (hasBins(dir)) return dir;
    }
  }
  return pathDirs().find(hasBins);
}

function findRedisServer(): string | undefined {
  const override = process.env.KEEL_REDIS_SERVER;
  if (override !== undefined && override !== '') return isExecutable(override) ? override : undefined;
  const dirs = [...pathDirs(), '/usr/bin', '/usr/sbin', '/usr/local/bin'];
  return dirs.map((d) => join(d, 'redis-server')).find(isExecutable);
}

/** The PostgreSQL and Redis binaries, or what is missing (exported for test/harness.test.ts). */
export function findBinaries(): { binaries: Binaries } | { missing: string[] } {
  const pgBin = findPgBinDir();
  const redisServer = findRedisServer();
  const missing: string[] = [];
  const pgOverride = process.env.KEEL_PG_BIN_DIR ?? '';
  const redisOverride = process.env.KEEL_REDIS_SERVER ?? '';
  if (pgBin === undefined) {
    missing.push(
      `PostgreSQL initdb/postgres (looked in ${pgOverride !== '' ? pgOverride : '/usr/lib/postgresql/*/bin and PATH'})`,
    );
  }
  if (redisServer === undefined) {
    missing.push(`redis-server (looked in ${redisOverride !== '' ? redisOverride : 'PATH'})`);
  }
  if (pgBin === undefined || redisServer === undefined) return { missing };
  return { binaries: { initdb: join(pgBin, 'initdb'), postgres: join(pgBin, 'postgres'), redisServer } };
}

/** PostgreSQL refuses to run as root; find the unprivileged user to run it as. */
export function resolveRunAs(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    return { uid, gid };
  } catch {
    throw new Error(
      'Running as root, but there is no `postgres` OS user to run PostgreSQL as ' +
        '(install the postgresql package or run the tests as an unprivileged user).',
    );
  }
}

/** Every server process spawned by this module (including failed attempts), for teardown. */
const spawned: Server[] = [];

// ---------------------------------------------------------------------------
// small utilities

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      if (addr === null || typeof addr === 'string') {
        srv.close();
        reject(new Error('could not determine a free port'));
        return;
      }
      srv.close(() => {
        resolve(addr.port);
      });
    });
  });
}

function logTail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function spawnServer(
  name: string,
  command: string,
  args: string[],
  logFile: string,
  port: number,
  cwd: string,
  runAs?: RunAs,
): Server {
  const fd = openSync(logFile, 'a');
  try {
    if (runAs !== undefined) chownSync(logFile, runAs.uid, runAs.gid);
    const child = spawn(command, args, {
      cwd,
      stdio: ['ignore', fd, fd],
      env: { ...process.env, LC_ALL: 'C', LANG: 'C' },
      ...(runAs ?? {}),
    });
    // Avoid an unhandled 'error' event (e.g. ENOENT); the exit watcher reports it.
    child.on('error', () => undefined);
    const server: Server = { name, child, port, logFile };
    spawned.push(server);
    return server;
  } finally {
    closeSync(fd);
  }
}

function hasExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

async function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (hasExited(child) || child.pid === undefined) return true;
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      resolve(false);
    }, timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

export async function stopServer(server: Server, signal: NodeJS.Signals, timeoutMs: number): Promise<void> {
  const { child } = server;
  if (hasExited(child) || child.pid === undefined) return;
  child.kill(signal);
  if (await waitForExit(child, timeoutMs)) return;
  process.stderr.write(`[real-backends] ${server.name} did not stop after ${signal}; sending SIGKILL\n`);
  child.kill('SIGKILL');
  await waitForExit(child, 5_000);
}

async function waitUntilReady(server: Server, probe: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (hasExited(server.child)) {
      throw new Error(
        `${server.name} exited during startup (code ${String(server.child.exitCode)}, ` +
          `signal ${String(server.child.signalCode)}). Log ${server.logFile}:\n${logTail(server.logFile)}`,
      );
    }
    try {
      await probe();
      return;
    } catch (error) {
      lastError = error;
      await sleep(50);
    }
  }
  throw new Error(
    `${server.name} did not become ready within ${STARTUP_TIMEOUT_MS} ms ` +
      `(last error: ${lastError instanceof Error ? lastError.message : String(lastError)}). ` +
      `Log ${server.logFile}:\n${logTail(server.logFile)}`,
  );
}

/** Start a server on a random free port, retrying with another port if it dies at startup (port race). */
async function startOnFreePort(
  name: string,
  start: (port: number) => Server,
  probe: (port: number) => Promise<void>,
): Promise<Server> {
  for (let attempt = 1; ; attempt++) {
    const server = start(await freePort());
    try {
      await waitUntilReady(server, () => probe(server.port));
      return server;
    } catch (error) {
      await stopServer(server, 'SIGKILL', 5_000);
      const diedEarly = hasExited(server.child);
      if (!diedEarly || attempt >= PORT_ATTEMPTS) throw error;
      process.stderr.write(`[real-backends] ${name} failed to start on port ${server.port}; retrying on another port\n`);
    }
  }
}

// ---------------------------------------------------------------------------
// PostgreSQL

async function initDb(bin: Binaries, dir: string, dataDir: string, runAs: RunAs | undefined): Promise<void> {
  const initdbArgs = ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale=C'];
  const [command, args] =
    runAs === undefined ? [bin.initdb, initdbArgs] : ['runuser', ['-u', 'postgres', '--', bin.initdb, ...initdbArgs]];
  const logFile = join(dir, 'initdb.log');
  try {
    const { stdout, stderr } = await execFileAsync(command, args, {
      cwd: dir,
      env: { ...process.env, LC_ALL: 'C', LANG: 'C' },
    });
    await writeFile(logFile, stdout + stderr);
  } catch (error) {
    const out = error as { stdout?: string; stderr?: string; message?: string };
    await writeFile(logFile, `${out.stdout ?? ''}${out.stderr ?? ''}`).catch(() => undefined);
    throw new Error(`initdb failed: ${out.message ?? String(error)}\n${out.stderr ?? ''}`, { cause: error });
  }
}

export function pgUrlFor(port: number): string {
  return `postgres://postgres@127.0.0.1:${port}/postgres`;
}

async function pgProbe(port: number): Promise<void> {
  const client = new pg.Client({ connectionString: pgUrlFor(port), connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
  } finally {
    await client.end().catch(() => undefined);
  }
}

function postgresArgs(dataDir: string, dir: string, port: number): string[] {
  return [
    '-D', dataDir,
    '-c', 'listen_addresses=127.0.0.1',
    '-c', `port=${port}`,
    '-c', `unix_socket_directories=${dir}`,
    '-c', 'fsync=off',
    '-c', 'full_page_writes=off',
    '-c', 'synchronous_commit=off',
    '-c', 'max_connections=200',
    '-c', 'logging_collector=off',
  ];
}

export async function startPostgres(bin: Binaries, dir: string, runAs: RunAs | undefined): Promise<{ server: Server; version: string }> {
  const dataDir = join(dir, 'data');
  await initDb(bin, dir, dataDir, runAs);
  const server = await startOnFreePort(
    'PostgreSQL',
    (port) => spawnServer('PostgreSQL', bin.postgres, postgresArgs(dataDir, dir, port), join(dir, 'postgres.log'), port, dir, runAs),
    pgProbe,
  );
  const client = new pg.Client({ connectionString: pgUrlFor(server.port) });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const res = await client.query<{ server_version: string }>('show server_version');
    return { server, version: res.rows[0]?.server_version ?? 'unknown' };
  } finally {
    await client.end();
  }
}

/** Starts a stopped PostgreSQL of `startPostgres` again, on its data directory and port (fault tests). */
export async function restartPostgres(bin: Binaries, dir: string, runAs: RunAs | undefined, port: number): Promise<Server> {
  const server = spawnServer('PostgreSQL', bin.postgres, postgresArgs(join(dir, 'data'), dir, port), join(dir, 'postgres.log'), port, dir, runAs);
  await waitUntilReady(server, () => pgProbe(port));
  return server;
}

// ---------------------------------------------------------------------------
// Redis

async function redisPing(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('PING timed out'));
    }, 2_000);
    const done = (error?: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      if (error === undefined) resolve();
      else reject(error);
    };
    socket.setEncoding('utf8');
    socket.once('error', done);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: string) => {
      reply += chunk;
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG') ? undefined : new Error(`unexpected reply ${reply.trim()}`));
    });
  });
}

export async function startRedis(bin: Binaries, dir: string, port?: number): Promise<Server> {
  const start = (port: number): Server =>
      spawnServer(
        'Redis',
        bin.redisServer,
        [
          '--port', String(port),
          '--bind', '127.0.0.1',
          '--save', '',
          '--appendonly', 'no',
          '--daemonize', 'no',
          '--databases', String(REDIS_DATABASES),
          '--dir', dir,
          '--logfile', join(dir, 'redis.log'),
        ],
        join(dir, 'redis.stdout.log'),
        port,
        dir,
      );
  if (port === undefined) return startOnFreePort('Redis', start, redisPing);
  // Again on a known port (a fault test restarting its own Redis).
  const server = start(port);
  await waitUntilReady(server, () => redisPing(port));
  return server;
}

// ---------------------------------------------------------------------------
// abnormal-exit safety nets

/**
 * A detached shell that outlives us if we die without running teardown (even SIGKILL):
 * once our pid is gone it stops the servers and removes the temp dir.
 */
function spawnWatchdog(dir: string, pids: number[]): ChildProcess {
  const script = [
    'parent="$1"; dir="$2"; shift 2',
    'while kill -0 "$parent" 2>/dev/null; do sleep 1; done',
    'kill -INT "$@" 2>/dev/null',
    'sleep 3',
    'kill -KILL "$@" 2>/dev/null',
    'rm -rf "$dir"',
  ].join('\n');
  const child = spawn('sh', ['-c', script, 'keel-real-backends-watchdog', String(process.pid), dir, ...pids.map(String)], {
    detached: true,
    stdio: 'ignore',
  });
  child.on('error', () => undefined);
  child.unref();
  return child;
}

function killWatchdog(child: ChildProcess): void {
  if (child.pid === undefined || hasExited(child)) return;
  try {
    process.kill(-child.pid, 'SIGKILL'); // its process group: the shell and a pending `sleep`
  } catch {
    child.kill('SIGKILL');
  }
}

// ---------------------------------------------------------------------------

function unavailable(project: TestProject, missing: string[]): () => Promise<void> {
  if (process.env.REQUIRE_REAL_BACKENDS === '1') {
    throw new Error(
      [
        'REQUIRE_REAL_BACKENDS=1 but the real PostgreSQL/Redis backends are unavailable:',
        ...missing.map((m) => `  - missing: ${m}`),
      ].join('\n'),
    );
  }
  const details = missing.map((m) => `!!!   missing: ${m}`);
  const bar = '!'.repeat(78);
  process.stderr.write(
    [
      '',
      bar,
      '!!! REAL BACKENDS UNAVAILABLE: PostgreSQL/Redis tests are SKIPPED !!!',
      ...details,
      '!!! Install postgresql + redis-server, or set REQUIRE_REAL_BACKENDS=1 to fail instead.',
      bar,
      '',
      '',
    ].join('\n'),
  );
  const provided: KeelProvidedContext = { pgUrl: '', redisUrl: '' };
  project.provide('pgUrl', provided.pgUrl);
  project.provide('redisUrl', provided.redisUrl);
  return () => Promise.resolve();
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const found = findBinaries();
  if ('missing' in found) return unavailable(project, found.missing);
  const bin = found.binaries;
  const runAs = resolveRunAs();

  const dir = await mkdtemp(join(tmpdir(), 'keel-backends-'));
  if (runAs !== undefined) chownSync(dir, runAs.uid, runAs.gid);

  const servers = spawned;
  let watchdog: ChildProcess | undefined;
  const onExit = (): void => {
    // Synchronous last resort (e.g. process.exit() without teardown); the watchdog removes the dir.
    for (const s of servers) if (!hasExited(s.child)) s.child.kill(s.name === 'PostgreSQL' ? 'SIGINT' : 'SIGTERM');
  };
  process.on('exit', onExit);

  let tornDown = false;
  const teardown = async (): Promise<void> => {
    if (tornDown) return;
    tornDown = true;
    await Promise.all(
      servers.map((s) => (s.name === 'PostgreSQL' ? stopServer(s, 'SIGINT', 15_000) : stopServer(s, 'SIGTERM', 5_000))),
    );
    servers.length = 0;
    if (watchdog !== undefined) killWatchdog(watchdog);
    process.off('exit', onExit);
    if (process.env.KEEL_KEEP_BACKEND_LOGS === '1') {
      process.stderr.write(`[real-backends] kept ${dir} (KEEL_KEEP_BACKEND_LOGS=1)\n`);
    } else {
      await rm(dir, { recursive: true, force: true });
    }
  };

  try {
    const startedAt = Date.now();
    // allSettled, not all: if one fails, wait for the other before tearing both down.
    const [pgSettled, redisSettled] = await Promise.allSettled([
      startPostgres(bin, dir, runAs),
      startRedis(bin, dir),
    ]);
    if (pgSettled.status === 'rejected') throw pgSettled.reason;
    if (redisSettled.status === 'rejected') throw redisSettled.reason;
    const pgResult = pgSettled.value;
    const redisServer = redisSettled.value;
    watchdog = spawnWatchdog(
      dir,
      servers.flatMap((s) => (s.child.pid === undefined || hasExited(s.child) ? [] : [s.child.pid])),
    );

    const provided: KeelProvidedContext = {
      pgUrl: pgUrlFor(pgResult.server.port),
      redisUrl: `redis://127.0.0.1:${redisServer.port}`,
    };
    project.provide('pgUrl', provided.pgUrl);
    project.provide('redisUrl', provided.redisUrl);
    process.stderr.write(
      `[real-backends] PostgreSQL ${pgResult.version} on :${pgResult.server.port}, Redis on :${redisServer.port} ` +
        `(started in ${Date.now() - startedAt} ms; logs: ${dir}, kept only with KEEL_KEEP_BACKEND_LOGS=1)\n`,
    );
    return teardown;
  } catch (error) {
    await teardown().catch(() => undefined);
    throw error;
  }
}
