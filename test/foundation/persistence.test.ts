/**
 * The embedded database keeps its data across restarts: the real `keel serve` on a temp DATA_DIR,
 * stopped with SIGTERM (as a service manager does) and started again on the same directory. It runs
 * `node bin/keel.js serve`, exactly what `npm start` runs: the esbuild bundle of src/ (built here
 * when src/ changed), so this test is also the bundle's end-to-end check.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, pgliteDirFor, PGLITE_SHARED_BUFFERS } from '../../src/platform/db/client.js';
import { freePort } from '../helpers/app.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PASSWORD = 'harbour-velvet-compass-93-lilac';

interface Served {
  child: ChildProcess;
  url: string;
  output(): string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

async function serve(env: Record<string, string>): Promise<Served> {
  const port = await freePort();
  const child = spawn(process.execPath, ['bin/keel.js', 'serve'], {
    cwd: ROOT,
    env: { ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (c: Buffer) => (output += c.toString('utf8')));
  child.stderr?.on('data', (c: Buffer) => (output += c.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  const served: Served = {
    child,
    url,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`serve exited early (${child.exitCode}):\n${output}`);
    if (Date.now() > deadline) {
      await served.stop();
      throw new Error(`serve did not answer /health within 60 s:\n${output}`);
    }
    try {
      if ((await fetch(`${url}/health`)).status === 200) return served;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('data survives a restart (embedded PGlite)', () => {
  let dataDir: string;
  let env: Record<string, string>;
  let running: Served | null = null;

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'keel-persist-'));
    const inherited: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined) inherited[k] = v;
    delete inherited.DATABASE_URL;
    delete inherited.REDIS_URL;
    env = {
      ...inherited,
      NODE_ENV: 'test',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
      SERVICE_VERSION: '3.2.1-persist',
      ADMIN_EMAIL: 'persist-admin@example.com',
      ADMIN_PASSWORD: PASSWORD,
      // No APP_ENCRYPTION_KEY / JWT_SECRET: development secrets are generated into DATA_DIR and must survive too.
    };
    delete env.APP_ENCRYPTION_KEY;
    delete env.JWT_SECRET;
  });
  afterEach(async () => {
    await running?.stop();
    running = null;
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('keeps the administrator and the sign-in secrets after SIGTERM and a new start on the same DATA_DIR', async () => {
    running = await serve(env);
    const health1 = (await (await fetch(`${running.url}/health`)).json()) as Record<string, unknown>;
    expect(health1).toMatchObject({ status: 'ok', version: '3.2.1-persist', database: { status: 'ok', kind: 'pglite' } });
    const login1 = await fetch(`${running.url}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'persist-admin@example.com', password: PASSWORD }),
    });
    expect(login1.status).toBe(200);
    const tokens1 = (await login1.json()) as { accessToken: string };
    expect(tokens1.accessToken).toBeTruthy();

    const exit1 = await running.stop();
    const output1 = running.output();
    running = null;
    expect(exit1).toBe(0);
    expect(output1).toMatch(/shutting down/);

    running = await serve(env);
    const health2 = (await (await fetch(`${running.url}/health`)).json()) as Record<string, unknown>;
    expect(health2).toMatchObject({ status: 'ok', version: '3.2.1-persist', database: { status: 'ok', kind: 'pglite' } });
    // The first run's access token still verifies: the generated JWT secret persisted with the data.
    const me = await fetch(`${running.url}/api/v1/users/me`, { headers: { authorization: `Bearer ${tokens1.accessToken}` } });
    expect(me.status).toBe(200);
    expect(await me.json()).toMatchObject({ email: 'persist-admin@example.com' });
    const login2 = await fetch(`${running.url}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'persist-admin@example.com', password: PASSWORD }),
    });
    expect(login2.status).toBe(200);
    expect(running.output()).not.toMatch(/created the first platform administrator/);

    expect(await running.stop()).toBe(0);
    running = null;

    // And underneath: one administrator row, written by the first start.
    const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
    try {
      const rows = await database.query<{ email: string; is_platform_admin: boolean }>('select email, is_platform_admin from users');
      expect(rows).toEqual([{ email: 'persist-admin@example.com', is_platform_admin: true }]);
      const sessions = await database.query<{ n: number }>('select count(*)::int as n from sessions');
      expect(sessions[0]!.n).toBeGreaterThanOrEqual(2);
      // Opened with Keel's buffer pool, over the 128 MB initdb wrote into the directory's postgresql.conf.
      expect(readFileSync(join(pgliteDirFor(dataDir), 'postgresql.conf'), 'utf8')).toMatch(/^shared_buffers = 128MB/m);
      const pool = await database.query<{ sb: string }>("select current_setting('shared_buffers') as sb");
      expect(pool).toEqual([{ sb: PGLITE_SHARED_BUFFERS }]);
    } finally {
      await database.close();
    }
  }, 180_000);
});
