import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { createPgDatabase, redisUrl, type PgTestDatabase } from './backends.js';
import { cliEnv, keelArgs, ROOT, startServe, type ServeProcess } from './cli.js';

/**
 * Keel as it runs when one machine is not enough (docs/deploy.md "Topology"): several `keel serve` (WORKER=off) and
 * `keel worker` processes on one real PostgreSQL database and one Redis, all started from the CLI
 * with the same secrets, as an operator would.
 */

export const TOPOLOGY_ADMIN = { email: 'topology-admin@example.com', password: 'harbour-velvet-compass-93-lilac' };

export interface WorkerProcess {
  child: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface Topology {
  apis: ServeProcess[];
  workers: WorkerProcess[];
  env: Record<string, string>;
  databaseUrl: string;
  /** Starts one more worker on the same database and Redis. */
  addWorker(): Promise<WorkerProcess>;
  close(): Promise<void>;
}

const spawned = new Set<ChildProcess>();
afterAll(() => {
  for (const c of spawned) c.kill('SIGKILL');
});

/** `keel worker`, resolved once it logs that it delivers. */
export async function startWorkerProcess(env: Record<string, string>): Promise<WorkerProcess> {
  const child = spawn(process.execPath, await keelArgs(['worker']), { cwd: ROOT, env: { ...env, LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
  spawned.add(child);
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  const exited = new Promise<number | null>((resolve) =>
    child.on('close', (code) => {
      spawned.delete(child);
      resolve(code);
    }),
  );
  const deadline = Date.now() + 90_000;
  while (!out.includes('Keel worker is delivering webhooks')) {
    if (child.exitCode !== null) throw new Error(`worker exited early: ${out}`);
    if (Date.now() > deadline) throw new Error(`worker did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    child,
    output: () => out,
    exited,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

export async function startTopology(opts: { apis?: number; workers?: number; env?: Record<string, string> } = {}): Promise<Topology> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-topology-'));
  const pg: PgTestDatabase = await createPgDatabase();
  const env = cliEnv(dir, {
    DATABASE_URL: pg.url,
    REDIS_URL: redisUrl(),
    WORKER: 'off',
    LOG_LEVEL: 'warn',
    ALLOW_INSECURE_TARGETS: 'true',
    ADMIN_EMAIL: TOPOLOGY_ADMIN.email,
    ADMIN_PASSWORD: TOPOLOGY_ADMIN.password,
    ...opts.env,
  });
  const apis: ServeProcess[] = [];
  const workers: WorkerProcess[] = [];
  const topology: Topology = {
    apis,
    workers,
    env,
    databaseUrl: pg.url,
    async addWorker() {
      const w = await startWorkerProcess(env);
      workers.push(w);
      return w;
    },
    async close() {
      await Promise.all([...apis.map((a) => a.stop('SIGKILL')), ...workers.map((w) => w.stop('SIGKILL'))]);
      await pg.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    // The first process migrates and creates the administrator; the rest start beside it.
    apis.push(await startServe(env));
    const rest = await Promise.all([
      ...Array.from({ length: (opts.apis ?? 2) - 1 }, () => startServe(env)),
      ...Array.from({ length: opts.workers ?? 2 }, () => startWorkerProcess(env)),
    ]);
    for (const p of rest) ('port' in p ? apis : workers).push(p as ServeProcess & WorkerProcess);
  } catch (err) {
    await topology.close();
    throw err;
  }
  return topology;
}

export interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

/** A JSON call under /api/v1 of one process. */
export async function call(url: string, method: string, path: string, opts: { token?: string; body?: unknown } = {}): Promise<Answer> {
  const res = await fetch(`${url}/api/v1${path}`, {
    method,
    headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text && /json/.test(res.headers.get('content-type') ?? '') ? JSON.parse(text) : text, headers: res.headers };
}
