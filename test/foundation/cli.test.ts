/**
 * The `keel` command line as an operator runs it: `admin create` with the password on stdin, and the
 * first administrator from ADMIN_EMAIL/ADMIN_PASSWORD on first start. Each case runs the real CLI in
 * a child process on a temp DATA_DIR (PGlite), then opens that data dir to see what it stored.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, pgliteDirFor } from '../../src/platform/db/client.js';
import { cliEnv, migratedDataDir, runCli, startServe } from '../helpers/cli.js';

const STRONG = 'quiet-lantern-orbit-7-tundra';

/** Starts `serve`, waits for /health, stops it with SIGTERM and waits for a clean exit. */
async function serveOnce(env: Record<string, string>): Promise<{ health: unknown; exitCode: number | null; output: string }> {
  const served = await startServe(env);
  let health: unknown;
  try {
    health = await (await fetch(`${served.url}/health`)).json();
  } finally {
    await served.stop('SIGTERM');
  }
  return { health, exitCode: await served.exited, output: served.stdout() + served.stderr() };
}

interface UserRow extends Record<string, unknown> {
  email: string;
  name: string;
  is_platform_admin: boolean;
  password_hash: string | null;
  status: string;
}

/** Opens the data dir the CLI used (after it exited: PGlite is one process) and lists its users. */
async function usersIn(dataDir: string): Promise<UserRow[]> {
  const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
  try {
    return await database.query<UserRow>('select email, name, is_platform_admin, password_hash, status from users order by created_at');
  } finally {
    await database.close();
  }
}

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('keel CLI', () => {
  describe('admin create', () => {
    let dataDir: string;
    let env: Record<string, string>;
    beforeAll(async () => {
      dataDir = await migratedDataDir();
      env = cliEnv(dataDir);
    });
    afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

    it('creates a platform administrator from the password on stdin', async () => {
      const args = ['admin', 'create', '--email', 'Root@Example.com', '--name', 'Root Admin'];
      expect(args.join(' ')).not.toContain(STRONG);
      const res = await runCli(args, env, `${STRONG}\n`);
      expect(res.stderr).toBe('');
      expect(res.code).toBe(0);
      expect(res.stdout).toMatch(/^Created platform administrator Root@Example\.com \([0-9a-f-]{36}\)\n$/);
      expect(res.stdout + res.stderr).not.toContain(STRONG);

      const rows = await usersIn(dataDir);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ email: 'Root@Example.com', name: 'Root Admin', is_platform_admin: true, status: 'active' });
      expect(rows[0]!.password_hash).toMatch(/^\$argon2id\$/);
      expect(rows[0]!.password_hash).not.toContain(STRONG);
    }, 90_000);

    it('refuses a weak password with one clear line and exit code 1', async () => {
      const res = await runCli(['admin', 'create', '--email', 'weak@example.com', '--name', 'Weak'], env, 'password123\n');
      expect(res.code).toBe(1);
      expect(res.stdout).toBe('');
      const lines = res.stderr.trimEnd().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^keel: .*password is too weak/);
      expect(res.stderr).not.toContain('password123');
      expect(res.stderr).not.toMatch(/\bat .+:\d+:\d+/); // no stack trace
      expect((await usersIn(dataDir)).map((u) => u.email)).not.toContain('weak@example.com');
    }, 90_000);

    it('refuses a too-short password', async () => {
      const res = await runCli(['admin', 'create', '--email', 'short@example.com'], env, 'aB3$\n');
      expect(res.code).toBe(1);
      expect(res.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(res.stderr).toMatch(/password must be at least 8 characters/);
    }, 90_000);

    it('refuses an email that already has an account, whatever its case', async () => {
      const res = await runCli(['admin', 'create', '--email', 'root@EXAMPLE.com', '--name', 'Again'], env, `${STRONG}-2\n`);
      expect(res.code).toBe(1);
      const lines = res.stderr.trimEnd().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^keel: .*already exists/);
      const rows = await usersIn(dataDir);
      expect(rows.filter((u) => u.email.toLowerCase() === 'root@example.com')).toHaveLength(1);
    }, 90_000);

    it('asks for --email (usage error, exit code 2)', async () => {
      const res = await runCli(['admin', 'create', '--name', 'Nobody'], env, `${STRONG}\n`);
      expect(res.code).toBe(2);
      expect(res.stderr).toMatch(/--email is required/);
    }, 60_000);
  });

  describe('first administrator from ADMIN_EMAIL / ADMIN_PASSWORD', () => {
    let dataDir: string;
    beforeAll(() => {
      dataDir = mkdtempSync(join(tmpdir(), 'keel-cli-bootstrap-'));
    });
    afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

    it('is created on the first start, and later starts create no other', async () => {
      const base = { APP_ENCRYPTION_KEY: randomBytes(32).toString('hex'), JWT_SECRET: randomBytes(48).toString('base64url') };
      const env = cliEnv(dataDir, { ...base, ADMIN_EMAIL: 'first@example.com', ADMIN_PASSWORD: STRONG });

      const first = await serveOnce(env);
      expect(first.exitCode).toBe(0);
      expect(first.health).toMatchObject({ status: 'ok' });
      let admins = (await usersIn(dataDir)).filter((u) => u.is_platform_admin);
      expect(admins.map((u) => u.email)).toEqual(['first@example.com']);
      expect(admins[0]!.password_hash).toMatch(/^\$argon2id\$/);

      const second = await serveOnce(env);
      expect(second.exitCode).toBe(0);
      admins = (await usersIn(dataDir)).filter((u) => u.is_platform_admin);
      expect(admins.map((u) => u.email)).toEqual(['first@example.com']);

      // Another address later does not add a second administrator either: only a first start bootstraps.
      const third = await serveOnce(cliEnv(dataDir, { ...base, ADMIN_EMAIL: 'other@example.com', ADMIN_PASSWORD: `${STRONG}-x` }));
      expect(third.exitCode).toBe(0);
      const all = await usersIn(dataDir);
      expect(all.filter((u) => u.is_platform_admin).map((u) => u.email)).toEqual(['first@example.com']);
      expect(all.map((u) => u.email)).not.toContain('other@example.com');
    }, 180_000);
  });
});
