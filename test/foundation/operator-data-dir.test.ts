/**
 * One process at a time on an embedded data directory: real `keel serve` processes on a
 * temp DATA_DIR, a second serve, `admin create` and `migrate` against it, then a SIGKILL and a new
 * start over the stale lock. Below, the lock itself (platform/db/data-dir-lock.ts): stale holders,
 * a reused pid, a holder on another host, and several processes recovering one stale lock at once.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, pgliteDirFor, pgliteLockFor } from '../../src/platform/db/client.js';
import { DataDirLockedError, lockDataDir, processStartTime, type LockHolder } from '../../src/platform/db/data-dir-lock.js';
import { cliEnv, ROOT, runCli, startServe, type ServeProcess } from '../helpers/cli.js';

const PASSWORD = 'harbour-velvet-compass-93-lilac';
const OTHER_PASSWORD = 'orchard-mosaic-lantern-58-fjord';

const oneLine = (text: string): string[] => text.trimEnd().split('\n');
const noStack = /\bat .+:\d+:\d+|\n\s+at /;

async function login(url: string, email: string, password: string): Promise<number> {
  const res = await fetch(`${url}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password }),
  });
  return res.status;
}

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('an embedded DATA_DIR is opened by one process at a time', () => {
  let dataDir: string;
  let env: Record<string, string>;
  const running: ServeProcess[] = [];

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'keel-lock-'));
    env = cliEnv(dataDir, { LOG_LEVEL: 'info', ADMIN_EMAIL: 'lock-admin@example.com', ADMIN_PASSWORD: PASSWORD });
  });
  afterEach(async () => {
    while (running.length) await running.pop()!.stop('SIGKILL');
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it('refuses a second serve, admin create and migrate with one line naming the holder; a SIGKILLed holder is replaced', async () => {
    const first = await startServe(env);
    running.push(first);
    expect(await login(first.url, 'lock-admin@example.com', PASSWORD)).toBe(200);
    const holderLine = new RegExp(`^keel: cannot open DATA_DIR: .+ is in use by another Keel process \\(pid ${first.pid}, keel serve, since [^)]+\\); `);

    // A second server on another port: refused before it listens.
    const second = await runCli(['serve'], { ...env, PORT: '0' });
    expect(second.code).toBe(1);
    expect(oneLine(second.stderr)).toHaveLength(1);
    expect(second.stderr).toMatch(holderLine);
    expect(second.stderr).toMatch(/stop that process first, or give this one its own DATA_DIR\n$/);
    expect(second.stderr).not.toMatch(noStack);
    expect(second.stdout).not.toMatch(/Keel is listening/);

    // admin create: refused, with what to do instead; the password is never echoed.
    const admin = await runCli(['admin', 'create', '--email', 'second-admin@example.com'], env, `${OTHER_PASSWORD}\n`);
    expect(admin.code).toBe(1);
    expect(admin.stdout).toBe('');
    expect(oneLine(admin.stderr)).toHaveLength(1);
    expect(admin.stderr).toMatch(holderLine);
    expect(admin.stderr).toMatch(/stop the server and run keel admin create again, or restart the server with ADMIN_EMAIL and ADMIN_PASSWORD set/);
    expect(admin.stderr + admin.stdout).not.toContain(OTHER_PASSWORD);
    expect(admin.stderr).not.toMatch(noStack);

    // migrate: refused too.
    const migrate = await runCli(['migrate'], env);
    expect(migrate.code).toBe(1);
    expect(oneLine(migrate.stderr)).toHaveLength(1);
    expect(migrate.stderr).toMatch(holderLine);
    expect(migrate.stderr).toMatch(/a running server applies pending migrations itself when it starts; stop it to run keel migrate/);

    // The first server is untouched and still answers; the refused admin does not exist.
    expect(await login(first.url, 'lock-admin@example.com', PASSWORD)).toBe(200);
    expect(await login(first.url, 'second-admin@example.com', OTHER_PASSWORD)).toBe(401);

    // A crash (SIGKILL) leaves the lock file behind; the next start recognises it as stale.
    const lockFile = pgliteLockFor(pgliteDirFor(dataDir));
    expect((JSON.parse(readFileSync(lockFile, 'utf8')) as LockHolder).pid).toBe(first.pid);
    expect(await first.stop('SIGKILL')).toBeNull();
    running.pop();
    expect(existsSync(lockFile)).toBe(true);

    const third = await startServe(env);
    running.push(third);
    expect((JSON.parse(readFileSync(lockFile, 'utf8')) as LockHolder).pid).toBe(third.pid);
    expect(await login(third.url, 'lock-admin@example.com', PASSWORD)).toBe(200);
    expect(await third.stop('SIGTERM')).toBe(0);
    running.pop();
    // A clean stop frees the directory.
    expect(existsSync(lockFile)).toBe(false);

    // Now the stopped directory can be administered.
    const later = await runCli(['admin', 'create', '--email', 'second-admin@example.com'], env, `${OTHER_PASSWORD}\n`);
    expect(later.stderr).toBe('');
    expect(later.code).toBe(0);
    const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
    try {
      const rows = await database.query<{ email: string }>('select email from users where is_platform_admin order by email');
      expect(rows.map((r) => r.email)).toEqual(['lock-admin@example.com', 'second-admin@example.com']);
    } finally {
      await database.close();
    }
  }, 240_000);
});

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('the data-directory lock', () => {
  let dir: string;
  let lockFile: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'keel-lockfile-'));
    lockFile = join(dir, 'pglite.lock');
  });
  afterEach(() => rmSync(lockFile, { force: true }));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** The pid of a process that has exited. */
  async function deadPid(): Promise<number> {
    const child = spawn(process.execPath, ['-e', '']);
    await new Promise((resolve) => child.on('exit', resolve));
    return child.pid!;
  }

  function writeHolder(holder: Partial<LockHolder>): void {
    const full: LockHolder = { pid: 1, startTime: null, hostname: hostname(), command: 'keel serve', since: '2026-01-01T00:00:00.000Z', nonce: 'stale-nonce', ...holder };
    writeFileSync(lockFile, JSON.stringify(full));
  }

  it('is refused while held in this process, and free again after release', async () => {
    const lock = await lockDataDir(lockFile, dir, 'keel serve');
    await expect(lockDataDir(lockFile, dir, 'keel migrate')).rejects.toThrow(DataDirLockedError);
    await expect(lockDataDir(lockFile, dir, 'keel migrate')).rejects.toThrow(`in use by another Keel process (pid ${process.pid}, keel serve`);
    lock.release();
    expect(existsSync(lockFile)).toBe(false);
    (await lockDataDir(lockFile, dir, 'keel migrate')).release();
  });

  it('takes over the lock of a process that is gone', async () => {
    writeHolder({ pid: await deadPid() });
    const lock = await lockDataDir(lockFile, dir, 'keel serve');
    expect((JSON.parse(readFileSync(lockFile, 'utf8')) as LockHolder).pid).toBe(process.pid);
    lock.release();
  });

  it('takes over a lock whose pid now belongs to another process (start time differs)', async () => {
    const mine = processStartTime('self');
    expect(mine).toMatch(/^\d+$/);
    writeHolder({ pid: process.pid, startTime: String(Number(mine) - 1) });
    const lock = await lockDataDir(lockFile, dir, 'keel serve');
    expect((JSON.parse(readFileSync(lockFile, 'utf8')) as LockHolder).nonce).toBe(lock.holder.nonce);
    lock.release();
  });

  it('counts a live holder with the same start time, or one on another host, as live', async () => {
    writeHolder({ pid: process.ppid, startTime: processStartTime(process.ppid) });
    await expect(lockDataDir(lockFile, dir, 'keel serve')).rejects.toThrow(`(pid ${process.ppid}, keel serve`);
    writeHolder({ pid: await deadPid(), hostname: 'another-host.example' });
    await expect(lockDataDir(lockFile, dir, 'keel serve')).rejects.toThrow(/on host another-host\.example/);
    expect((JSON.parse(readFileSync(lockFile, 'utf8')) as LockHolder).nonce).toBe('stale-nonce');
  });

  it('lets exactly one of several processes recovering one stale lock at once have it', async () => {
    const script = [
      "import { lockDataDir } from './src/platform/db/data-dir-lock.ts';",
      'const go = Number(process.env.GO_AT); while (Date.now() < go) {}',
      'try {',
      "  await lockDataDir(process.env.LOCK_FILE, process.env.LOCK_DIR, 'racer');",
      "  process.stdout.write('won\\n');",
      "  process.stdin.on('end', () => process.exit(0)).resume();",
      "} catch (err) { process.stdout.write(err.name === 'DataDirLockedError' ? 'locked\\n' : `error ${err.message}\\n`); process.exit(0); }",
    ].join('\n');
    for (let round = 0; round < 3; round++) {
      writeHolder({ pid: await deadPid(), nonce: `stale-${round}` });
      const goAt = String(Date.now() + 1500);
      const racers = Array.from({ length: 4 }, () =>
        spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
          cwd: ROOT,
          env: { ...process.env, GO_AT: goAt, LOCK_FILE: lockFile, LOCK_DIR: dir },
          stdio: ['pipe', 'pipe', 'inherit'],
        }),
      );
      const answers = await Promise.all(
        racers.map(
          (child) =>
            new Promise<string>((resolve) => {
              let out = '';
              child.stdout.on('data', (c: Buffer) => {
                out += c.toString('utf8');
                if (out.includes('\n')) resolve(out.trim());
              });
              child.on('exit', () => resolve(out.trim()));
            }),
        ),
      );
      expect([...answers].sort()).toEqual(['locked', 'locked', 'locked', 'won']);
      const ended = racers.map((child) => (child.exitCode === null ? new Promise((resolve) => child.on('exit', resolve)) : Promise.resolve()));
      for (const child of racers) child.stdin.end();
      await Promise.all(ended);
      expect(existsSync(`${lockFile}.takeover`)).toBe(false);
    }
  }, 120_000);
});
