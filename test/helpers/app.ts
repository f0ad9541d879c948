import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { migrate, MIGRATIONS_DIR } from '../../src/platform/db/migrator.js';
import { createLogger, type Logger } from '../../src/platform/logger.js';
import { clock } from '../../src/platform/clock.js';
import { createPgDatabase, realBackendsAvailable, redisUrl } from './backends.js';

export type Backend = 'pglite' | 'postgres';

/** The backend of this vitest project (KEEL_TEST_DB): pglite, or the real PostgreSQL + Redis servers. */
export const backend: Backend = process.env.KEEL_TEST_DB === 'postgres' ? 'postgres' : 'pglite';

/** True when this project's backend can run here (the postgres project needs the Debian servers). */
export function backendAvailable(): boolean {
  return backend === 'pglite' || realBackendsAvailable();
}

/**
 * A fresh in-memory PGlite with every migration applied. PGlite's initdb costs about 2.5 s, so the
 * first test file of a run migrates one and leaves its dump in the temp dir (keyed by the migration
 * files); later files load that dump (about 1.1 s here, 1.5 s before the 32 MB buffer pool of
 * `openDatabase`).
 */
export async function openTemplatePglite(): Promise<Database> {
  const file = templateFile();
  if (existsSync(file)) return openDatabase({ pgliteDir: 'memory://', pgliteLoad: new Blob([readFileSync(file)]) });
  const db = await openDatabase({ pgliteDir: 'memory://' });
  await migrate(db);
  await saveTemplate(file, await db.dump!());
  return db;
}

/** The migrated template's dump (made here when this run has none yet): what `openTemplatePglite` loads. */
export async function templateDump(): Promise<Blob> {
  const file = templateFile();
  if (!existsSync(file)) {
    const db = await openDatabase({ pgliteDir: 'memory://' });
    try {
      await migrate(db);
      await saveTemplate(file, await db.dump!());
    } finally {
      await db.close();
    }
  }
  return new Blob([readFileSync(file)]);
}

/** The template's file in the temp dir, keyed by the migration files. */
function templateFile(): string {
  const hash = createHash('sha256');
  for (const f of readdirSync(MIGRATIONS_DIR).filter((n) => n.endsWith('.sql')).sort()) hash.update(f).update(readFileSync(join(MIGRATIONS_DIR, f)));
  return join(tmpdir(), `keel-pglite-template-${hash.digest('hex').slice(0, 16)}.tar`);
}

/** Written under a private name, then renamed: a parallel test file reads a whole dump or none. */
async function saveTemplate(file: string, dump: Blob): Promise<void> {
  const partial = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(partial, Buffer.from(await dump.arrayBuffer()));
  renameSync(partial, file);
}

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
  /** Set-Cookie values, one per cookie. */
  cookies: string[];
}

export interface RequestOptions {
  body?: unknown;
  /** Bearer token (access token or API key). */
  token?: string | undefined;
  headers?: Record<string, string>;
  /** Raw body (string) sent as is, with `headers` deciding the content type. */
  raw?: string;
}

export interface TestApp {
  server: RunningServer;
  url: string;
  /** Keel's PUBLIC_URL (http://localhost:<port> with publicUrlFromPort). */
  publicUrl: string;
  /** The client IP this app's requests claim (X-Forwarded-For through the trusted loopback proxy). */
  ip: string;
  request<T = any>(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse<T>>;
  /** Like request but under /api/v1. */
  api<T = any>(method: string, path: string, opts?: RequestOptions): Promise<ApiResponse<T>>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  env?: Record<string, string>;
  /**
   * Listen on a free port picked first and set PUBLIC_URL to http://localhost:<that port>, so a
   * browser page on Keel's own origin works with WebAuthn (which refuses IP addresses as RP ID).
   */
  publicUrlFromPort?: boolean;
  /** The app's logger (default: LOG_LEVEL's, written to stdout); tests that read log lines pass their own. */
  log?: Logger;
  /** How long a draining server waits for requests in flight (default SHUTDOWN_GRACE_MS). */
  drainMs?: number;
}

/** A free loopback port (the OS picks it; released at once for the caller to listen on). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createNetServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts Keel on a random loopback port against this project's backend: a fresh in-memory PGlite, or a
 * fresh database on the real PostgreSQL server plus the real Redis. Each app claims its own client
 * IP (through TRUST_PROXY) so per-IP limits of parallel test files never meet in the shared Redis.
 */
export async function startTestApp(opts: TestAppOptions = {}): Promise<TestApp> {
  clock.reset();
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-test-'));
  const ip = `10.${randomBytes(1)[0]}.${randomBytes(1)[0]}.${1 + (randomBytes(1)[0] ?? 0) % 250}`;
  let dropDb: (() => Promise<void>) | null = null;
  const env: Record<string, string> = {
    NODE_ENV: 'test',
    DATA_DIR: dataDir,
    LOG_LEVEL: process.env.KEEL_TEST_LOG ?? 'silent',
    APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    JWT_SECRET: randomBytes(48).toString('base64url'),
    TRUST_PROXY: '127.0.0.1',
    HOST: '127.0.0.1',
    ALLOW_INSECURE_TARGETS: 'true',
  };
  if (backend === 'postgres') {
    const pg = await createPgDatabase();
    env.DATABASE_URL = pg.url;
    env.REDIS_URL = redisUrl();
    dropDb = () => pg.drop();
  }
  const port = opts.publicUrlFromPort ? await freePort() : 0;
  if (opts.publicUrlFromPort) env.PUBLIC_URL = `http://localhost:${port}`;
  Object.assign(env, opts.env ?? {});
  // Production refuses to start without release keys: a test app under production gets a throwaway one.
  if (env.NODE_ENV === 'production' && env.AGENT_RELEASE_PUBLIC_KEYS === undefined) {
    env.AGENT_RELEASE_PUBLIC_KEYS = generateKeyPairSync('ed25519').publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
  }
  const config = loadConfig(env);
  const log = opts.log ?? createLogger(config.LOG_LEVEL);
  const database = config.DATABASE_URL ? await openDatabase({ url: config.DATABASE_URL, poolSize: 10 }) : await openTemplatePglite();
  let server: RunningServer;
  try {
    server = await startServer({ config, log, database, port, host: '127.0.0.1', ...(opts.drainMs === undefined ? {} : { drainMs: opts.drainMs }) });
  } catch (err) {
    await database.close();
    await dropDb?.();
    throw err;
  }
  const request = async <T>(method: string, path: string, o: RequestOptions = {}): Promise<ApiResponse<T>> => {
    const headers: Record<string, string> = { 'x-forwarded-for': ip, ...(o.headers ?? {}) };
    if (o.token) headers.authorization = `Bearer ${o.token}`;
    let body: string | undefined;
    if (o.raw !== undefined) body = o.raw;
    else if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${server.url}${path}`, { method, headers, redirect: 'manual', ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    if (/^application\/([\w.-]+\+)?json\b/.test(res.headers.get('content-type') ?? '') && text) parsed = JSON.parse(text);
    return { status: res.status, body: parsed as T, headers: res.headers, cookies: res.headers.getSetCookie() };
  };
  return {
    server,
    url: server.url,
    publicUrl: config.publicUrl,
    ip,
    request,
    api: (method, path, o) => request(method, `/api/v1${path}`, o),
    async close() {
      await server.close();
      await database.close();
      await dropDb?.();
      rmSync(dataDir, { recursive: true, force: true });
      clock.reset();
    },
  };
}
