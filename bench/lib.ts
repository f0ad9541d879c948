/**
 * Shared pieces of the benchmarks: child processes in their own process group (so a stop reaches
 * npm, its shell and node alike), /health polling, free loopback ports, a throwaway PostgreSQL
 * server, autocannon and a small table printer. Benchmarks print figures; they assert nothing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, existsSync, fstatSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import autocannon, { type Options, type Result } from 'autocannon';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** True when `moduleUrl` is the script node was started with (a bench run on its own). */
export function isMain(moduleUrl: string): boolean {
  const entry = process.argv[1];
  return entry !== undefined && moduleUrl === pathToFileURL(entry).href;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

// ---------------------------------------------------------------------------------------------
// child processes

export interface Proc {
  child: ChildProcess;
  /** The file its stdout and stderr go to (removed when the bench process exits). */
  logFile: string;
  /** The last `maxBytes` (default 8 KiB) of its stdout and stderr. */
  output(maxBytes?: number): string;
  exited(): boolean;
  /** SIGTERM to the whole process group, SIGKILL after `graceMs`; resolves when the group is gone. */
  stop(graceMs?: number): Promise<void>;
}

const running = new Set<Proc>();
let cleanupInstalled = false;
let logDir: string | null = null;
let logCount = 0;

/** The end of a file, as text. */
function tail(file: string, maxBytes: number): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return '';
  }
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, maxBytes);
    const buf = Buffer.alloc(length);
    readSync(fd, buf, 0, length, size - length);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

function installCleanup(): void {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  const killAll = (): void => {
    for (const p of running) {
      if (p.child.pid !== undefined) {
        try {
          process.kill(-p.child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  };
  process.on('exit', () => {
    killAll();
    if (logDir) rmSync(logDir, { recursive: true, force: true });
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      killAll();
      process.exit(130);
    });
  }
}

function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Spawns a command in its own process group with the given environment (over ours; undefined
 * unsets). Its stdout and stderr go to a file, as `npm start > keel.log` does: Keel runs at its
 * default LOG_LEVEL (info, an access line per request) and the bench process does not spend the
 * load generator's CPU reading them.
 */
export function spawnGroup(command: string, args: string[], env: Record<string, string | undefined>, cwd = ROOT): Proc {
  installCleanup();
  const merged: Record<string, string | undefined> = { ...process.env, ...env };
  const childEnv = Object.fromEntries(Object.entries(merged).filter((e): e is [string, string] => e[1] !== undefined));
  logDir ??= tempDir('keel-bench-logs-');
  const logFile = join(logDir, `${++logCount}.log`);
  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(command, args, { cwd, env: childEnv, detached: true, stdio: ['ignore', fd, fd] });
  } finally {
    closeSync(fd); // the child has its own copy
  }
  child.on('error', (err) => appendFileSync(logFile, `spawn error: ${err.message}\n`));
  let done = false;
  const exitPromise = new Promise<void>((resolve) => child.once('exit', () => {
    done = true;
    resolve();
  }));
  const proc: Proc = {
    child,
    logFile,
    output: (maxBytes = 8192) => tail(logFile, maxBytes),
    exited: () => done,
    async stop(graceMs = 10_000) {
      const pid = child.pid;
      if (pid === undefined) return;
      try {
        process.kill(-pid, 'SIGTERM');
      } catch {
        // already gone
      }
      const deadline = Date.now() + graceMs;
      while (groupAlive(pid) && Date.now() < deadline) await sleep(25);
      if (groupAlive(pid)) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // raced with its exit
        }
      }
      await Promise.race([exitPromise, sleep(2_000)]);
      while (groupAlive(pid)) await sleep(25);
      running.delete(proc);
    },
  };
  running.add(proc);
  return proc;
}

/** One GET with node:http (no fetch warm-up in the measurement); resolves to status and body. */
export function httpGet(url: string, timeoutMs = 1_000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'GET', agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Polls `url` every `intervalMs` until it answers 200; throws when `proc` exits or time runs out. */
export async function waitForHealthy(url: string, proc: Proc, timeoutMs = 60_000, intervalMs = 20): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exited()) throw new Error(`process exited before ${url} answered:\n${proc.output()}`);
    try {
      const res = await httpGet(url, 500);
      if (res.status === 200) return res.body;
    } catch {
      // not listening yet
    }
    await sleep(intervalMs);
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms:\n${proc.output()}`);
}

// ---------------------------------------------------------------------------------------------
// Keel and the bare baseline server, each in a child process (the load generator keeps its own loop)

export interface RunningKeel {
  url: string;
  dataDir: string;
  proc: Proc;
  stop(): Promise<void>;
}

/**
 * Environment for benchmark runs: Keel's defaults (LOG_LEVEL info: one access line per request, to
 * a file, see spawnGroup), with registration on and the rate limits out of the way.
 */
export function benchEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    NODE_ENV: 'development',
    HOST: '127.0.0.1',
    APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    JWT_SECRET: randomBytes(48).toString('base64url'),
    ENABLE_REGISTRATION: 'true',
    // config.ts caps these at 100000; far beyond what a 10 s run reaches.
    LOGIN_LIMIT: '100000',
    REGISTER_LIMIT: '100000',
    LOCKOUT_THRESHOLD: '100000',
    ...extra,
  };
}

/**
 * Starts `node bin/keel.js serve` (the bundle `npm start` runs) on a free port and waits for /health;
 * `cwd` runs another checkout's (bench/ab.ts compares two; BENCH_KEEL_DIR does it for any benchmark,
 * e.g. a `git worktree` of the commit before a change, with the benchmark itself from this one).
 */
export async function startKeel(env: Record<string, string>, cwd = process.env.BENCH_KEEL_DIR ?? ROOT, node = process.execPath): Promise<RunningKeel> {
  const port = await freePort();
  const dataDir = env.DATA_DIR ?? tempDir('keel-bench-');
  // BENCH_KEEL_NODE_ARGS reaches Keel's node only (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`: Node 20
  // refuses --cpu-prof in NODE_OPTIONS).
  const nodeArgs = (process.env.BENCH_KEEL_NODE_ARGS ?? '').split(' ').filter(Boolean);
  // PG_COUNT_FILE: count the statements Keel sends to PostgreSQL (bench/count-pg.mjs, `pgStatements`).
  if (env.PG_COUNT_FILE) nodeArgs.push('--import', './bench/count-pg.mjs');
  const url = `http://127.0.0.1:${port}`;
  const started = async (): Promise<Proc> => {
    const proc = spawnGroup(node, [...nodeArgs, 'bin/keel.js', 'serve'], { ...env, DATA_DIR: dataDir, PORT: String(port) }, cwd);
    try {
      await waitForHealthy(`${url}/health`, proc, 120_000, 50);
    } catch (err) {
      await proc.stop();
      throw err;
    }
    return proc;
  };
  // Measured as users run it: a server restarted on a database its first start migrated. About a
  // third of first starts leave V8 with a slow process.nextTick for the process's life (the one-time
  // migration's work; bench/README "The whole benchmark, and where a read's extra CPU goes (stop 53)"),
  // which no restart showed. BENCH_FIRST_START=1 measures the first start instead.
  let proc = await started();
  if (process.env.BENCH_FIRST_START !== '1') {
    await proc.stop();
    proc = await started();
  }
  return {
    url,
    dataDir,
    proc,
    async stop() {
      await proc.stop();
      if (!env.DATA_DIR) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A file name for `PG_COUNT_FILE` (give it to `startKeel`), and the reader of the count: statements Keel sent to PostgreSQL so far (NaN on PGlite). */
export function pgStatementCounter(backend: string): { env: Record<string, string>; read(keel: RunningKeel): Promise<number> } {
  const file = join(tmpdir(), `keel-pg-count-${process.pid}-${randomBytes(4).toString('hex')}`);
  return {
    env: backend === 'postgres' ? { PG_COUNT_FILE: file } : {},
    async read(keel) {
      const pid = keel.proc.child.pid;
      if (backend !== 'postgres' || pid === undefined) return NaN;
      rmSync(file, { force: true });
      process.kill(pid, 'SIGUSR2');
      for (let i = 0; i < 200; i++) {
        try {
          const n = Number(readFileSync(file, 'utf8'));
          rmSync(file, { force: true });
          return n;
        } catch {
          await sleep(10);
        }
      }
      return NaN;
    },
  };
}

/** The bare hono + @hono/node-server baseline (bench/bare-server.ts) in a child process. */
export async function startBare(env: Record<string, string> = {}): Promise<{ url: string; pid: number | null; stop(): Promise<void> }> {
  const port = await freePort();
  const proc = spawnGroup(process.execPath, ['--import', 'tsx', 'bench/bare-server.ts'], { ...env, PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  await waitForHealthy(`${url}/health`, proc, 30_000, 50);
  return { url, pid: proc.child.pid ?? null, stop: () => proc.stop() };
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: the test harness's throwaway server (test/setup/real-backends.ts), started on loopback

export interface BenchPostgres {
  /** A fresh empty database on the server; `drop` removes it. */
  createDatabase(): Promise<{ url: string; drop(): Promise<void> }>;
  /** The Redis started beside it (Keel's production setup is PostgreSQL + Redis). */
  redisUrl: string | undefined;
  stop(): Promise<void>;
}

/** True when Debian's PostgreSQL binaries are installed (/usr/lib/postgresql/<v>/bin). */
export function postgresInstalled(): boolean {
  const root = '/usr/lib/postgresql';
  return existsSync(root) && readdirSync(root).some((v) => existsSync(join(root, v, 'bin', 'postgres')));
}

/**
 * Starts the same throwaway PostgreSQL (and Redis) the `postgres` test project uses, by calling
 * that globalSetup with a stand-in for vitest's project. Returns null when it cannot run here.
 */
export async function startPostgres(): Promise<BenchPostgres | null> {
  if (!postgresInstalled()) return null;
  const { default: setup } = await import('../test/setup/real-backends.js');
  const provided: Record<string, string> = {};
  const project = { provide: (key: string, value: string) => (provided[key] = value) };
  const teardown = await setup(project as unknown as Parameters<typeof setup>[0]);
  const adminUrl = provided.pgUrl ?? '';
  if (adminUrl === '') {
    await teardown();
    return null;
  }
  const { default: pg } = await import('pg');
  const admin = async (sql: string): Promise<void> => {
    const client = new pg.Client({ connectionString: adminUrl });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  return {
    async createDatabase() {
      const name = `keel_bench_${randomBytes(6).toString('hex')}`;
      await admin(`CREATE DATABASE ${name}`);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      return { url: url.toString(), drop: () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) };
    },
    redisUrl: provided.redisUrl || undefined,
    stop: () => teardown(),
  };
}

/** The backends a benchmark runs on: the embedded default, and PostgreSQL when installed. */
export interface BenchBackend {
  name: 'pglite' | 'postgres';
  /** Starts Keel on this backend (a fresh database each time). */
  startKeel(extraEnv?: Record<string, string>): Promise<RunningKeel>;
}

export function pgliteBackend(): BenchBackend {
  return { name: 'pglite', startKeel: (extra) => startKeel(benchEnv(extra)) };
}

export function postgresBackend(server: BenchPostgres): BenchBackend {
  return {
    name: 'postgres',
    async startKeel(extra) {
      const db = await server.createDatabase();
      const keel = await startKeel(benchEnv({ DATABASE_URL: db.url, ...(server.redisUrl ? { REDIS_URL: server.redisUrl } : {}), ...extra }));
      return {
        ...keel,
        async stop() {
          await keel.stop();
          await db.drop();
        },
      };
    },
  };
}

/** Runs `fn` on PGlite and, when the binaries exist, on a PostgreSQL server started for the run. */
export async function withBackends<T>(fn: (backend: BenchBackend) => Promise<T>, only?: 'pglite' | 'postgres'): Promise<T[]> {
  const out: T[] = [];
  if (only !== 'postgres') out.push(await fn(pgliteBackend()));
  if (only === 'pglite') return out;
  const server = await startPostgres();
  if (!server) {
    process.stderr.write('PostgreSQL binaries not found (/usr/lib/postgresql/*/bin): PostgreSQL figures skipped\n');
    return out;
  }
  try {
    out.push(await fn(postgresBackend(server)));
  } finally {
    await server.stop();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers, load and printing

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON; keep the text
  }
  return { status: res.status, body: parsed };
}

/** Runs `items` through `fn` with at most `concurrency` in flight. */
export async function pool<T, R>(items: T[], concurrency: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}

export function load(opts: Options): Promise<Result> {
  return new Promise((resolve, reject) => {
    autocannon(opts, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

/**
 * `load` in a child process (bench/load-child.ts), for a load that runs beside another one: each
 * generator then has its own event loop, so neither's latency counts the other's work. Options must
 * be plain data (no request callbacks: bodies sent in turn go in `bodies`). `nice` lowers the
 * child's priority: a flood's generator stands for clients on other machines, so on a 2-core bench
 * machine it should not take a core from the server or from the generator whose latency is measured.
 */
export function loadInChild(opts: Options, more: { bodies?: string[]; nice?: number } = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/load-child.ts'], {
      cwd: ROOT,
      env: { ...process.env, LOAD_OPTIONS: JSON.stringify(opts), LOAD_BODIES: JSON.stringify(more.bodies ?? []) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (more.nice !== undefined && child.pid !== undefined) setPriority(child.pid, more.nice);
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) reject(new Error(`load child exited with ${code}`));
      else resolve(JSON.parse(out) as Result);
    });
  });
}

/** Requests per second over the whole run: completed 2xx responses divided by the duration. */
export function okPerSecond(r: Result): number {
  return r['2xx'] / r.duration;
}

export const BENCH_SECONDS = Number(process.env.BENCH_SECONDS ?? '10');

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toFixed(digits) : '-';
}

export function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n`);
}
