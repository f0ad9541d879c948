/**
 * Processes started together on an empty database, as an orchestrator starts them: a `keel worker`
 * (which applies no migrations) waits for the migrations that a `serve` or `keel migrate` applies,
 * saying once what it waits for, instead of exiting and crash-looping. PostgreSQL project only.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable } from '../helpers/app.js';
import { createPgDatabase, redisUrl, type PgTestDatabase } from '../helpers/backends.js';
import { cliEnv, keelArgs, ROOT, runCli } from '../helpers/cli.js';

describe.skipIf(!backendAvailable() || backend !== 'postgres')(`start order (${backend})`, () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  async function emptyDatabaseEnv(extra: Record<string, string> = {}) {
    const pg: PgTestDatabase = await createPgDatabase();
    const dir = mkdtempSync(join(tmpdir(), 'keel-start-order-'));
    cleanup.push(async () => {
      await pg.drop();
      rmSync(dir, { recursive: true, force: true });
    });
    return cliEnv(dir, { DATABASE_URL: pg.url, REDIS_URL: redisUrl(), LOG_LEVEL: 'info', ...extra });
  }

  it('a worker started before the migrations waits for them, says so once, and delivers once they are applied', async () => {
    const env = await emptyDatabaseEnv();
    const child = spawn(process.execPath, await keelArgs(['worker']), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    cleanup.push(() => {
      child.kill('SIGKILL');
      return Promise.resolve();
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const until = async (text: string, what: string) => {
      for (let i = 0; i < 1200 && !out.includes(text); i++) {
        if (child.exitCode !== null) throw new Error(`the worker exited while waiting for ${what}:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      if (!out.includes(text)) throw new Error(`no "${text}" from the worker (${what}):\n${out}`);
    };
    await until('waiting for migrations', 'its waiting line');
    const migrate = await runCli(['migrate'], env);
    expect(migrate.code).toBe(0);
    await until('Keel worker is delivering webhooks', 'its start after the migrations');
    expect(out.match(/waiting for migrations/g)).toHaveLength(1);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('gives up with one line naming the pending migrations after MIGRATION_WAIT_SECONDS', async () => {
    const env = await emptyDatabaseEnv({ MIGRATION_WAIT_SECONDS: '0', LOG_LEVEL: 'warn' });
    const res = await runCli(['worker'], env);
    expect(res.code).toBe(1);
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
    expect(res.stderr).toMatch(/^keel: pending migrations \(0000_init\.sql, .*\) after waiting 0 s: start keel serve or run keel migrate/);
  });
});
