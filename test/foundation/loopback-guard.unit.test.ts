import dns from 'node:dns';
import { lookup } from 'node:dns/promises';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { takeLoopbackViolations } from '../setup/loopback-guard.js';
import { runCli, cliEnv } from '../helpers/cli.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

describe('the loopback guard (no test reaches off this machine)', () => {
  it('refuses a lookup of a public name and records it, without asking a resolver', async () => {
    await expect(lookup('example.com')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => dns.lookup('example.org', (e) => resolve(e)));
    expect(err?.code).toBe('ENOTFOUND');
    expect(takeLoopbackViolations()).toEqual([
      'a lookup of "example.com" (only loopback names may be resolved in tests)',
      'a lookup of "example.org" (only loopback names may be resolved in tests)',
    ]);
  });

  it('refuses a DNS query to the system resolver, and a dial of a non-loopback address', async () => {
    await expect(dns.promises.resolveTxt('example.com')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    const err = await new Promise<Error>((resolve) => connect({ host: '192.0.2.1', port: 9 }).once('error', resolve));
    expect(err.message).toMatch(/ENETUNREACH 192\.0\.2\.1/);
    const seen = takeLoopbackViolations();
    expect(seen).toHaveLength(2);
    expect(seen[0]).toMatch(/^a DNS query \(resolveTxt example\.com\) to /);
    expect(seen[1]).toBe('a connection to 192.0.2.1 (only loopback addresses may be reached in tests)');
  });

  it('lets loopback through, and answers .invalid names as not found without a violation', async () => {
    expect((await lookup('localhost')).address).toMatch(/^(127\.|::1)/);
    await expect(lookup('nowhere.invalid')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    const resolver = new dns.promises.Resolver();
    resolver.setServers(['127.0.0.1:1']);
    await expect(resolver.resolveTxt('nothing.invalid')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect(takeLoopbackViolations()).toEqual([]);
  });

  it('runs in the keel child processes the tests start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'keel-guard-'));
    const res = await runCli(['serve'], cliEnv(dir, { PORT: '0', HOST: 'example.com' }));
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('loopback guard: refused a lookup of "example.com"');
  });
});
