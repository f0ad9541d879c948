/**
 * `npx keel-agent --help` prints how to run the agent instead of running it: no state directory is
 * made in the folder it was typed in, and an unknown argument is exit code 2 with the usage.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

describe.skipIf(process.env.KEEL_TEST_DB !== 'pglite')('keel-agent command line', () => {
  const cwd = mkdtempSync(join(tmpdir(), 'keel-agent-cli-'));
  afterAll(() => rmSync(cwd, { recursive: true, force: true }));
  const run = (...args: string[]) => runWith({}, ...args);
  const runWith = (env: Record<string, string>, ...args: string[]) =>
    spawnSync(process.execPath, [join(ROOT, 'bin/keel-agent.js'), ...args], { cwd, encoding: 'utf8', env: { ...process.env, KEEL_URL: 'http://127.0.0.1:9', ...env } });

  it('--help prints the usage and its settings, runs nothing and writes nothing', () => {
    for (const arg of ['--help', '-h', 'help']) {
      const res = run(arg);
      expect(res.status, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/^Usage: keel-agent/);
      expect(res.stdout).toContain('KEEL_ENROLLMENT_KEY');
      expect(res.stdout).toContain('KEEL_AGENT_HEALTHY_WITHIN_SECONDS');
      expect(res.stdout).toContain('KEEL_AGENT_SOAK_SECONDS');
      expect(res.stderr).toBe('');
    }
    expect(readdirSync(cwd)).toEqual([]);
  });

  it('an unknown argument is exit code 2 with the usage on stderr', () => {
    const res = run('--url=http://x');
    expect(res.status).toBe(2);
    expect(res.stderr).toMatch(/^keel-agent: unexpected argument "--url=http:\/\/x" \(settings are environment variables\)\n\nUsage: keel-agent/);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it('a health-check deadline that is not a whole number of seconds is exit code 2, before any state is written', () => {
    for (const env of [{ KEEL_AGENT_SOAK_SECONDS: 'soon' }, { KEEL_AGENT_SOAK_SECONDS: '-1' }, { KEEL_AGENT_HEALTHY_WITHIN_SECONDS: '0' }]) {
      const res = runWith(env);
      expect(res.status).toBe(2);
      expect(res.stderr).toMatch(/^keel-agent: KEEL_AGENT_(SOAK|HEALTHY_WITHIN)_SECONDS must be a whole number of seconds, at least [01]\n$/);
    }
    expect(readdirSync(cwd)).toEqual([]);
  });
});
