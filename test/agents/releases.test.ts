import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { createUser, login } from '../helpers/fixtures.js';
import { loadConfig } from '../../src/config.js';
import { agentTargets } from '../../src/modules/agents/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { raceTest, together } from '../helpers/race.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote } from './helpers.js';
import { signBuild } from '../../src/modules/agents/signing.js';

/** A release host on loopback: serves whatever the test puts in `files`. */
async function releaseHost(): Promise<{ url: string; files: Map<string, string>; close: () => Promise<void> }> {
  const files = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    const body = files.get(req.url ?? '');
    if (body === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, files, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const keys = generateKeyPairSync('ed25519');
const rawPublic = (keys.publicKey.export({ format: 'der', type: 'spki' })).subarray(12).toString('base64');
const other = generateKeyPairSync('ed25519');

/** Each asset signed with the release key (signing.ts), as the release host publishes it. */
const signed = (version: string, a: { component: string; os: string; arch: string; url: string; sha256: string; size: number }) => ({ ...a, signature: signBuild(keys.privateKey, { ...a, version }) });
const manifest = JSON.stringify({
  releases: [
    { version: '2.1.0', assets: [signed('2.1.0', { component: 'agent', os: 'linux', arch: 'amd64', url: 'v2.1.0/agent-linux-amd64', sha256: 'b'.repeat(64), size: 10 }), signed('2.1.0', { component: 'watchdog', os: 'linux', arch: 'amd64', url: 'v2.1.0/watchdog-linux-amd64', sha256: 'c'.repeat(64), size: 10 })] },
    { version: '2.2.0-rc.1', assets: [signed('2.2.0-rc.1', { component: 'agent', os: 'linux', arch: 'amd64', url: 'v2.2.0-rc.1/agent', sha256: 'd'.repeat(64), size: 10 })] },
    { version: '2.0.0', assets: [signed('2.0.0', { component: 'agent', os: 'linux', arch: 'amd64', url: 'v2.0.0/agent', sha256: 'e'.repeat(64), size: 10 })] },
  ],
});

describe.skipIf(!backendAvailable())(`releases and promotion (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let host: Awaited<ReturnType<typeof releaseHost>>;
  beforeAll(async () => {
    host = await releaseHost();
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false', AGENT_RELEASE_URL: host.url, AGENT_RELEASE_PUBLIC_KEY: rawPublic } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
  });
  afterAll(async () => {
    await app?.close();
    await host?.close();
  });

  it('registering and promoting need a platform administrator with a second factor (403 mfa_required); audited', async () => {
    const unsigned = { version: '1.0.0', component: 'agent', os: 'linux', arch: 'arm64', url: 'https://releases.example.com/a', sha256: 'a'.repeat(64), size: 5 };
    const body = { ...unsigned, signature: signBuild(keys.privateKey, unsigned) };
    expect((await app.api('POST', '/agent-versions', { token: w.tokens.partnerFull, body })).status).toBe(403);
    // A platform administrator whose session has no second factor.
    const plain = (await login(app, await createUser(app, { platformAdmin: true }))).accessToken;
    const refused = await app.api('POST', '/agent-versions', { token: plain, body });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('mfa_required');
    const reg = await app.api('POST', '/agent-versions', { token: admin, body });
    expect(reg.status).toBe(201);
    expect(reg.body).toMatchObject({ version: '1.0.0', component: 'agent', os: 'linux', arch: 'arm64', sha256: 'a'.repeat(64), promoted: [], autoPromote: { status: 'off', reason: null }, signed: true });
    const noMfa = await app.api('POST', '/agent-versions/promote', { token: plain, body: { version: '1.0.0' } });
    expect(noMfa.status).toBe(403);
    expect(noMfa.body.code).toBe('mfa_required');
    expect((await app.api('POST', '/agent-versions/promote', { token: w.tokens.partnerFull, body: { version: '1.0.0' } })).status).toBe(403);
    // A platform with enrolled devices that the version lacks is named.
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    await enroll(app, key, { os: 'windows', arch: 'amd64' });
    const ok = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.0.0' } });
    expect(ok.status).toBe(200);
    expect(ok.body.promoted).toEqual(['agent:linux/arm64']);
    expect(ok.body.missing).toContain('agent:windows/amd64');
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '9.9.9' } })).status).toBe(404);
    const audit = await app.server.keel.db.select().from(auditLogs).where(eq(auditLogs.targetId, '1.0.0'));
    expect(audit.map((a) => a.action).sort()).toEqual(['agent.version.promote', 'agent.version.register']);
  });

  it('never a downgrade unless allowDowngrade', async () => {
    for (const version of ['1.1.0', '1.2.0']) await registerRemote(app, admin, { version, arch: 'dg' }, keys.privateKey);
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.2.0' } })).status).toBe(200);
    const down = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.1.0' } });
    expect(down.status).toBe(409);
    expect(down.body.code).toBe('downgrade_refused');
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '1.1.0', allowDowngrade: true } })).status).toBe(200);
    const list = await app.api('GET', '/agent-versions?limit=100', { token: w.tokens.orgAdmin });
    expect(list.status).toBe(200);
    expect(list.body.pagination).toEqual({ page: 1, limit: 100, total: list.body.data.length });
    const v110 = list.body.data.find((v: any) => v.version === '1.1.0' && v.component === 'agent');
    expect(v110.target).toEqual(['agent:linux/dg']);
    // No device on linux/dg has updated: at 100 % the rollout is still active, never complete (docs/decisions.md "Honest rollouts").
    expect(v110.rollout).toMatchObject({ percent: 100, status: 'active', pending: 0, blocked: 0 });
    expect(list.body.data.find((v: any) => v.version === '1.2.0').target).toEqual([]);
  });

  raceTest('10 parallel promotes of different versions leave exactly one target per (component, os, arch)', async () => {
    const versions = Array.from({ length: 10 }, (_, i) => `5.0.${i}`);
    for (const version of versions) {
      await registerRemote(app, admin, { version, arch: 'race' }, keys.privateKey);
      await registerRemote(app, admin, { version, arch: 'race', component: 'watchdog' }, keys.privateKey);
    }
    const answers = await together(10, (i) => app.api('POST', '/agent-versions/promote', { token: admin, body: { version: versions[i] } }));
    for (const a of answers) expect([200, 409]).toContain(a.status);
    const winners = answers.filter((a) => a.status === 200);
    expect(winners.length).toBeGreaterThanOrEqual(1);
    const rows = await app.server.keel.db.select().from(agentTargets).where(eq(agentTargets.arch, 'race'));
    expect(rows.map((r) => r.component).sort()).toEqual(['agent', 'watchdog']);
    // Both components were set by the same promote: one version, one of the winners'.
    expect(new Set(rows.map((r) => r.version)).size).toBe(1);
    // Never a silent downgrade: the target is the highest version any promote was told succeeded.
    const highest = winners.map((a) => a.body.version as string).sort((x, y) => Number(x.split('.')[2]) - Number(y.split('.')[2])).pop();
    expect(rows[0]!.version).toBe(highest);
  });

  it('sync-remote: a signed manifest registers every asset of the latest stable release (never an -rc unless named)', async () => {
    host.files.set('/manifest.json', manifest);
    host.files.set('/manifest.json.sig', sign(null, Buffer.from(manifest), keys.privateKey).toString('base64'));
    expect((await app.api('POST', '/agent-versions/sync-remote', { token: w.tokens.partnerFull })).status).toBe(403);
    const res = await app.api('POST', '/agent-versions/sync-remote', { token: admin });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ version: '2.1.0', synced: ['agent:linux/amd64', 'watchdog:linux/amd64'], promoted: [], autoPromote: { status: 'off', reason: null } });
    const rc = await app.api('POST', '/agent-versions/sync-remote?version=2.2.0-rc.1', { token: admin });
    expect(rc.body).toMatchObject({ version: '2.2.0-rc.1', synced: ['agent:linux/amd64'] });
    const list = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data;
    const synced = list.find((v: any) => v.version === '2.1.0' && v.component === 'agent');
    expect(synced.builds[0].url).toBe(`${host.url}/v2.1.0/agent-linux-amd64`);
    expect(list.find((v: any) => v.version === '2.2.0-rc.1').prerelease).toBe(true);
    expect((await app.api('POST', '/agent-versions/sync-remote?version=7.7.7', { token: admin })).status).toBe(404);
  });

  it('sync-remote refuses an unsigned or wrongly signed manifest (502 manifest_signature_invalid), registering nothing', async () => {
    const tampered = manifest.replace('2.1.0', '2.1.1');
    host.files.set('/manifest.json', tampered);
    host.files.set('/manifest.json.sig', sign(null, Buffer.from(manifest), keys.privateKey).toString('base64'));
    const wrong = await app.api('POST', '/agent-versions/sync-remote', { token: admin });
    expect(wrong.status).toBe(502);
    expect(wrong.body.code).toBe('manifest_signature_invalid');
    host.files.set('/manifest.json.sig', sign(null, Buffer.from(tampered), other.privateKey).toString('base64'));
    expect((await app.api('POST', '/agent-versions/sync-remote', { token: admin })).body.code).toBe('manifest_signature_invalid');
    host.files.delete('/manifest.json.sig');
    const unsigned = await app.api('POST', '/agent-versions/sync-remote', { token: admin });
    expect(unsigned.status).toBe(502);
    expect(unsigned.body.code).toBe('manifest_signature_invalid');
    const list = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data;
    expect(list.find((v: any) => v.version === '2.1.1')).toBeUndefined();
  });

  it('no public key: sync is refused whatever NODE_ENV says; production refuses to start with a release host and no key', async () => {
    const keyless = await startTestApp({ env: { AGENT_RELEASE_URL: host.url } });
    try {
      const w2 = await createWorld(keyless);
      const token = await mfaAdmin(keyless, w2);
      host.files.set('/manifest.json', manifest);
      const res = await keyless.api('POST', '/agent-versions/sync-remote', { token });
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('release_key_missing');
    } finally {
      await keyless.close();
    }
    const production = { NODE_ENV: 'production', APP_ENCRYPTION_KEY: 'a'.repeat(64), JWT_SECRET: 'j'.repeat(40), AGENT_RELEASE_URL: 'https://releases.example.com' };
    expect(() => loadConfig(production)).toThrow(/AGENT_RELEASE_PUBLIC_KEY is required/);
    expect(() => loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEYS: rawPublic })).toThrow(/AGENT_RELEASE_PUBLIC_KEY is required/);
    expect(() => loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEY: rawPublic })).toThrow(/AGENT_RELEASE_PUBLIC_KEYS is required/);
    expect(() => loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEY: rawPublic, AGENT_RELEASE_PUBLIC_KEYS: rawPublic })).not.toThrow();
  });

  it('a 10% rollout is widened by /rollout (never narrowed)', async () => {
    await registerRemote(app, admin, { version: '3.0.0', arch: 'wide' }, keys.privateKey);
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '3.0.0', rollout: { percent: 10 } } })).status).toBe(200);
    const widen = await app.api('POST', '/agent-versions/rollout', { token: admin, body: { component: 'agent', percent: 100 } });
    expect(widen.status).toBe(200);
    expect(widen.body.updated).toContain('agent:linux/wide');
    const narrow = await app.api('POST', '/agent-versions/rollout', { token: admin, body: { component: 'agent', percent: 50 } });
    expect(narrow.status).toBe(409);
  });

  it('heartbeat offers a synced remote build with its release-host URL', async () => {
    const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const d = await enroll(app, key, { arch: 'single' });
    await registerRemote(app, admin, { version: '4.0.0', arch: 'single', sha256: createHash('sha256').update('x').digest('hex') }, keys.privateKey);
    await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '4.0.0', component: 'agent', allowDowngrade: true } });
    expect((await heartbeat(app, d)).body.update).toMatchObject({ version: '4.0.0', url: 'https://releases.example.com/4.0.0/agent' });
  });
});
