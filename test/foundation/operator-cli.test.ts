/**
 * First run and the command line, as an operator meets them: each mistake gives one
 * clear line on stderr (no stack trace) and the right exit code, help goes to stdout, and a fresh
 * start without an administrator says how to make one. The real CLI in child processes on temp
 * DATA_DIRs (embedded database).
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { startTestApp } from '../helpers/app.js';
import { openDatabase, pgliteDirFor } from '../../src/platform/db/client.js';
import { cliEnv, migratedDataDir, runCli, runInTerminal, startServe, terminalAvailable, type CliResult } from '../helpers/cli.js';

const STRONG = 'quiet-lantern-orbit-7-tundra';
const noStack = /\bat .+:\d+:\d+|\n\s+at /;

/** Exactly one line on stderr, matching `pattern`; nothing that looks like a stack trace. */
function expectOneLine(res: CliResult, code: number, pattern: RegExp): void {
  const shown = `exit ${res.code}\nstderr:\n${res.stderr}\nstdout:\n${res.stdout.slice(-2000)}`;
  expect(res.code, shown).toBe(code);
  const lines = res.stderr.trimEnd().split('\n');
  expect(lines, shown).toHaveLength(1);
  expect(lines[0], shown).toMatch(/^keel: /);
  expect(lines[0], shown).toMatch(pattern);
  expect(res.stderr, shown).not.toMatch(noStack);
}

async function platformAdmins(dataDir: string): Promise<string[]> {
  const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
  try {
    const [table] = await database.query<{ t: string | null }>("select to_regclass('users')::text as t");
    if (!table?.t) return []; // never migrated: the command stopped before
    return (await database.query<{ email: string }>('select email from users where is_platform_admin order by email')).map((r) => r.email);
  } finally {
    await database.close();
  }
}

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('keel command line: messages and exit codes', () => {
  const dirs: string[] = [];
  const freshDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'keel-opcli-'));
    dirs.push(dir);
    return dir;
  };
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('prints the usage on stdout with exit code 0 for --help, -h and help', async () => {
    for (const args of [['--help'], ['-h'], ['help'], ['admin', 'create', '--help']]) {
      const res = await runCli(args, cliEnv(freshDir()));
      expect(res.code).toBe(0);
      expect(res.stderr).toBe('');
      expect(res.stdout).toMatch(/^Usage: keel <command>/);
      expect(res.stdout).toContain('admin create --email <email>');
    }
  });

  it('names an unknown command, then the usage, with exit code 2', async () => {
    const res = await runCli(['frobnicate'], cliEnv(freshDir()));
    expect(res.code).toBe(2);
    expect(res.stdout).toBe('');
    const [first, blank, usage] = res.stderr.split('\n');
    expect(first).toBe('keel: unknown command "frobnicate"');
    expect(blank).toBe('');
    expect(usage).toBe('Usage: keel <command> [options]');

    const none = await runCli([], cliEnv(freshDir()));
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/^keel: no command given\n\nUsage: keel/);

    const sub = await runCli(['admin', 'delete'], cliEnv(freshDir()));
    expect(sub.code).toBe(2);
    expect(sub.stderr).toMatch(/^keel: unknown admin subcommand "delete"\n/);

    const extra = await runCli(['migrate', '--force'], cliEnv(freshDir()));
    expect(extra.code).toBe(2);
    expect(extra.stderr).toMatch(/^keel: unknown option "--force" for migrate\n/);
  });

  it('refuses admin create with an --email that is not an email address, before touching the data directory', async () => {
    const dir = freshDir();
    const res = await runCli(['admin', 'create', '--email', 'notanemail'], cliEnv(dir), `${STRONG}\n`);
    expect(res.code).toBe(2);
    expect(res.stderr.split('\n')[0]).toBe('keel: admin create: --email "notanemail" is not an email address');
    expect(readdirSync(dir)).toEqual([]);

    // A password is never taken from the command line.
    const pw = await runCli(['admin', 'create', '--email', 'a@example.com', '--password', STRONG], cliEnv(dir));
    expect(pw.code).toBe(2);
    expect(pw.stderr.split('\n')[0]).toBe('keel: unknown option "--password" for admin create');
    expect(pw.stderr).not.toContain(STRONG);
  });

  it('refuses ADMIN_EMAIL without ADMIN_PASSWORD and the other way round, naming the missing one', async () => {
    const noPassword = await runCli(['serve'], cliEnv(freshDir(), { ADMIN_EMAIL: 'first@example.com' }));
    expectOneLine(noPassword, 1, /^keel: Invalid configuration: ADMIN_PASSWORD is required when ADMIN_EMAIL is set/);
    const noEmail = await runCli(['serve'], cliEnv(freshDir(), { ADMIN_PASSWORD: STRONG }));
    expectOneLine(noEmail, 1, /^keel: Invalid configuration: ADMIN_EMAIL is required when ADMIN_PASSWORD is set/);
    expect(noEmail.stderr).not.toContain(STRONG);
  });

  it('checks the configuration for every command as serve does (JWT_SECRET, keys, TRUST_PROXY)', async () => {
    for (const args of [['migrate'], ['serve'], ['worker'], ['admin', 'create', '--email', 'a@example.com']]) {
      const res = await runCli(args, cliEnv(freshDir(), { JWT_SECRET: 'short' }), `${STRONG}\n`);
      expectOneLine(res, 1, /^keel: Invalid configuration: JWT_SECRET must be at least 32 characters$/);
    }
    const key = await runCli(['migrate'], cliEnv(freshDir(), { APP_ENCRYPTION_KEY: 'not-a-key' }));
    expectOneLine(key, 1, /APP_ENCRYPTION_KEY must be 32 bytes/);
    expect(key.stderr).not.toContain('not-a-key');
    const trust = await runCli(['serve'], cliEnv(freshDir(), { TRUST_PROXY: 'everyone' }));
    expectOneLine(trust, 1, /^keel: Invalid configuration: TRUST_PROXY must be a comma-separated list of proxy IP addresses.*\(got "everyone"\)$/);
    const mixed = await runCli(['migrate'], cliEnv(freshDir(), { TRUST_PROXY: '10.0.0.1,all' }));
    expectOneLine(mixed, 1, /TRUST_PROXY .*\(got "all"\)$/);
  });

  it('accepts TRUST_PROXY as IPv4 and IPv6 addresses; a public URL defaults to the port', () => {
    expect(loadConfig({ TRUST_PROXY: '127.0.0.1, ::1,10.1.2.3' }).TRUST_PROXY).toBe('127.0.0.1, ::1,10.1.2.3');
    expect(() => loadConfig({ TRUST_PROXY: '10.0.0.0/8' })).toThrow(ConfigError);
    expect(loadConfig({ PORT: '8080' })).toMatchObject({ publicUrl: 'http://localhost:8080', publicUrlFromListenPort: true });
    expect(loadConfig({ PORT: '8080', PUBLIC_URL: 'https://id.example.com/' })).toMatchObject({
      publicUrl: 'https://id.example.com',
      publicUrlFromListenPort: false,
    });
  });

  it('warns about a setting that looks like one of Keel’s (a typo would otherwise be ignored in silence)', async () => {
    const res = await runCli(['migrate'], cliEnv(await migratedDataDir(), { LOG_LEVEL: 'warn', SMTP_ULR: 'smtp://127.0.0.1:2525', ALLOW_INSECURE_TARGET: 'true' }));
    expect(res.code, res.stderr).toBe(0);
    const warnings = res.stdout.split('\n').filter((l) => l.includes('is not a Keel setting')).map((l) => JSON.parse(l) as { msg: string; level: number });
    expect(warnings.map((w) => w.msg)).toEqual([
      'ALLOW_INSECURE_TARGET is not a Keel setting and is ignored: did you mean ALLOW_INSECURE_TARGETS?',
      'SMTP_ULR is not a Keel setting and is ignored: did you mean SMTP_URL?',
    ]);
    expect(warnings.every((w) => w.level === 40)).toBe(true);
    expect(res.stdout).not.toContain('smtp://127.0.0.1:2525'); // a value is never echoed (it may be a secret)
  });

  it('takes the public URL from the port actually listened on when none is configured', async () => {
    const app = await startTestApp();
    try {
      const expected = `http://localhost:${app.server.port}`;
      // The base of email links, passkeys' origin and the API document's server.
      expect(app.server.keel.config.publicUrl).toBe(expected);
    } finally {
      await app.close();
    }
    const configured = await startTestApp({ env: { PUBLIC_URL: 'https://id.example.com' } });
    try {
      expect(configured.server.keel.config.publicUrl).toBe('https://id.example.com');
    } finally {
      await configured.close();
    }
  });

  it('stops with one line naming ADMIN_PASSWORD when it is too weak, and creates nobody', async () => {
    for (const weak of ['admin', 'password123']) {
      const dir = await migratedDataDir();
      const res = await runCli(['serve'], cliEnv(dir, { ADMIN_EMAIL: 'first@example.com', ADMIN_PASSWORD: weak, PORT: '0' }));
      expectOneLine(res, 1, /^keel: Invalid configuration: ADMIN_PASSWORD (must be at least 8 characters|is too weak)/);
      expect(res.stderr.replace('ADMIN_PASSWORD', '').toLowerCase()).not.toContain(weak);
      expect(await platformAdmins(dir)).toEqual([]);
    }
  }, 120_000);

  it('prints one line without the query, its values (a password hash) or a stack when the database refuses a write', async () => {
    const dir = await migratedDataDir();
    const database = await openDatabase({ pgliteDir: pgliteDirFor(dir) });
    try {
      // Any new platform administrator now breaks a constraint: the insert fails after the password was hashed.
      await database.query('alter table users add constraint keel_test_no_admins check (not is_platform_admin)');
    } finally {
      await database.close();
    }
    const res = await runCli(['admin', 'create', '--email', 'blocked@example.com'], cliEnv(dir), `${STRONG}\n`);
    expectOneLine(res, 1, /^keel: unexpected error: .*violates check constraint "keel_test_no_admins" \(23514\)$/);
    expect(res.stderr).not.toMatch(/insert into|argon2|params|blocked@example\.com|Failing row/i);
    expect(res.stderr).not.toContain(STRONG);

    // A file where the data directory should be: one line too.
    const file = join(freshDir(), 'not-a-dir');
    writeFileSync(file, '');
    const notDir = await runCli(['migrate'], cliEnv(file));
    expectOneLine(notDir, 1, /^keel: unexpected error: Error: E(EXIST|NOTDIR)/);
  }, 90_000);

  it('prints one line, no stack trace, when the port is taken; log lines written before are not lost', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const res = await runCli(['serve'], cliEnv(await migratedDataDir(), { PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' }));
      expectOneLine(res, 1, new RegExp(`^keel: cannot listen on 127\\.0\\.0\\.1:${port}: another process already listens there; stop it, or set PORT to a free port$`));
      // Written to the buffered log before the failure, flushed on the way out.
      expect(res.stdout).toMatch(/"msg":"No platform administrator exists yet/);
    } finally {
      blocker.close();
    }
  }, 90_000);

  it('prints one line, no stack trace, when HOST does not resolve', async () => {
    const res = await runCli(['serve'], cliEnv(await migratedDataDir(), { PORT: '0', HOST: 'no-such-host.invalid' }));
    expectOneLine(res, 1, /^keel: cannot listen on no-such-host\.invalid:0: HOST "no-such-host\.invalid" does not resolve to an address/);
  }, 90_000);

  describe('a fresh installation', () => {
    let dir: string;
    beforeAll(() => {
      dir = freshDir();
    });

    it('says on first start that no administrator exists and how to create one; not once one exists', async () => {
      const env = cliEnv(dir, { LOG_LEVEL: 'info' });
      const first = await startServe(env);
      expect(await first.stop()).toBe(0);
      const hints = first
        .stdout()
        .split('\n')
        .filter((l) => l.includes('No platform administrator exists yet'));
      expect(hints).toHaveLength(1);
      expect(hints[0]).toContain('npx keel admin create --email you@example.com');
      expect(hints[0]).toContain('ADMIN_EMAIL and ADMIN_PASSWORD');
      expect(JSON.parse(hints[0]!)).toMatchObject({ level: 40 });

      const created = await runCli(['admin', 'create', '--email', 'root@example.com'], env, `${STRONG}\n`);
      expect(created.code).toBe(0);
      const again = await startServe(env);
      expect(await again.stop()).toBe(0);
      expect(again.stdout()).toMatch(/Keel is listening/);
      expect(again.stdout()).not.toContain('No platform administrator exists yet');
    }, 180_000);
  });

  describe.skipIf(!terminalAvailable())('the hidden password prompt (on a terminal)', () => {
    let dir: string;
    beforeAll(async () => {
      dir = await migratedDataDir();
    });

    it('asks twice without echo, and refuses two different answers', async () => {
      const env = cliEnv(dir);
      const mismatch = await runInTerminal(['admin', 'create', '--email', 'tty@example.com'], env, [
        { waitFor: /Password: $/, send: `${STRONG}\r` },
        { waitFor: /Repeat the password: $/, send: `${STRONG}-typo\r` },
      ]);
      expect(mismatch.code).toBe(1);
      expect(mismatch.output).toContain('keel: the two passwords do not match; nothing was created');
      expect(mismatch.output).not.toContain(STRONG);
      expect(await platformAdmins(dir)).toEqual([]);

      const match = await runInTerminal(['admin', 'create', '--email', 'tty@example.com'], env, [
        { waitFor: /Password: $/, send: `${STRONG}\r` },
        { waitFor: /Repeat the password: $/, send: `${STRONG}\r` },
      ]);
      expect(match.code).toBe(0);
      expect(match.output).toMatch(/Created platform administrator tty@example\.com \([0-9a-f-]{36}\)/);
      expect(match.output).not.toContain(STRONG);
      expect(await platformAdmins(dir)).toEqual(['tty@example.com']);
    }, 120_000);
  });
});
