/**
 * The update channel's release writes and signatures (docs/security.md "Update channel: release
 * writes and signatures"). A build reaches every device of every tenant: every write that changes
 * what devices are offered obeys one rule (a platform administrator's session verified with a second
 * factor; never an API key), and with release keys configured every build must carry a valid
 * Ed25519 signature over its canonical manifest entry, which the heartbeat hands to the agent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createHash, generateKeyPairSync, sign, verify, createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { createTenant, createUser, login } from '../helpers/fixtures.js';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { agentReleases, agentTargets } from '../../src/modules/agents/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { keyId, keyListStatement, signBuild } from '../../src/modules/agents/signing.js';
import { registerRemote } from '../../src/modules/agents/releases.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin } from '../agents/helpers.js';

const API = '/api/v1';
const keyA = generateKeyPairSync('ed25519');
const keyB = generateKeyPairSync('ed25519');
const stranger = generateKeyPairSync('ed25519');
const raw = (k: typeof keyA) => k.publicKey.export({ format: 'der', type: 'spki' }).subarray(12);
const b64 = (k: typeof keyA) => raw(k).toString('base64');
const statement = keyListStatement([b64(keyA), b64(keyB)]);
const statementSig = sign(null, Buffer.from(statement), keyA.privateKey).toString('base64');

/** A release host on loopback serving what the test puts in `files`. */
async function releaseHost(): Promise<{ url: string; files: Map<string, string>; close: () => Promise<void> }> {
  const files = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    const body = files.get(req.url ?? '');
    if (body === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, files, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const remote = (version: string, arch: string, extra: Record<string, unknown> = {}) => ({
  version, component: 'agent', os: 'linux', arch, url: `https://releases.example.com/${version}/agent-${arch}`, sha256: createHash('sha256').update(`${version}/${arch}`).digest('hex'), size: 4, ...extra,
});
const signedRemote = (version: string, arch: string, key = keyA) => {
  const b = remote(version, arch);
  return { ...b, signature: signBuild(key.privateKey, b) };
};

describe.skipIf(!backendAvailable())(`the release channel (${backend})`, () => {
  let app: TestApp;
  let host: Awaited<ReturnType<typeof releaseHost>>;
  let w: World;
  let admin: string;
  let plain: string;
  let keyAll: string;
  let keyAudit: string;
  beforeAll(async () => {
    host = await releaseHost();
    app = await startTestApp({
      env: {
        LOGIN_LIMIT: '1000', BINARY_SOURCE: 'local', AGENT_AUTO_PROMOTE: 'true', AGENT_RELEASE_URL: host.url,
        AGENT_RELEASE_PUBLIC_KEYS: `${b64(keyA)},${keyB.publicKey.export({ format: 'pem', type: 'spki' }).toString().replace(/\n/g, '\\n')}`,
        AGENT_RELEASE_PUBLIC_KEY: b64(keyA), AGENT_RELEASE_KEYS_SIGNATURE: statementSig,
      },
    });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    // A second platform administrator whose session has no second factor.
    plain = (await login(app, await createUser(app, { platformAdmin: true }))).accessToken;
    const key = async (permissions: { resource: string; action: string }[]) => {
      const res = await app.api('POST', '/api-keys', { token: admin, body: { name: `key ${permissions.length}`, permissions } });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return res.body.key as string;
    };
    keyAll = await key([{ resource: '*', action: '*' }]);
    keyAudit = await key([{ resource: 'audit', action: 'read' }]);
  });
  afterAll(async () => {
    await app?.close();
    await host?.close();
  });

  const releases = () => app.server.keel.db.select().from(agentReleases);
  const targets = () => app.server.keel.db.select().from(agentTargets);
  const upload = (token: string, fields: Record<string, string>, body = 'bin!') => {
    const form = new FormData();
    for (const [k, v] of Object.entries(fields)) form.set(k, v);
    form.set('file', new Blob([body]), 'agent');
    return fetch(`${app.url}${API}/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-forwarded-for': app.ip }, body: form });
  };

  /** Every write of the route table under /agent-versions (a new release route is covered without editing this list). */
  function releaseWrites(): { method: string; path: string }[] {
    const seen = new Set<string>();
    for (const r of buildApp(app.server.keel).routes) {
      if (r.method === 'GET' || r.method === 'ALL' || !r.path.startsWith(`${API}/agent-versions`)) continue;
      seen.add(`${r.method} ${r.path.slice(API.length)}`);
    }
    return [...seen].map((k) => ({ method: k.split(' ')[0]!, path: k.split(' ')[1]!.replace(/:[A-Za-z]+/g, 'x') }));
  }

  it('every release write refuses an API key with *:*, a password-only platform administrator and a partner administrator (403), writing nothing', async () => {
    const routes = releaseWrites();
    expect(routes.map((r) => `${r.method} ${r.path}`)).toEqual(expect.arrayContaining(['POST /agent-versions', 'POST /agent-versions/promote', 'POST /agent-versions/sync-remote', 'POST /agent-versions/rollout', 'POST /agent-versions/rollout/resume']));
    const before = { releases: (await releases()).length, targets: JSON.stringify(await targets()) };
    // A body each route would accept from a permitted caller (a new route gets {}): the refusal is the rule's, not validation's.
    const bodies: Record<string, unknown> = { '/agent-versions': signedRemote('9.0.0', 'deny'), '/agent-versions/promote': { version: '9.0.0' }, '/agent-versions/rollout': { percent: 100 } };
    for (const r of routes) {
      for (const [who, token, code] of [['api key *:*', keyAll, 'user_required'], ['password-only admin', plain, 'mfa_required'], ['partner admin', w.tokens.partnerFull, null]] as const) {
        const res = await app.api(r.method, r.path, { token, body: bodies[r.path] ?? {} });
        expect(res.status, `${who} ${r.method} ${r.path}: ${JSON.stringify(res.body)}`).toBe(403);
        if (code) expect(res.body.code, `${who} ${r.method} ${r.path}`).toBe(code);
      }
    }
    expect((await releases()).length).toBe(before.releases);
    expect(JSON.stringify(await targets())).toBe(before.targets);
    const refused = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'agent.release.refused'), eq(auditLogs.result, 'failure')));
    expect(refused.length).toBeGreaterThanOrEqual(routes.length * 2);
  });

  it('the finding: an administrator\'s audit:read key cannot upload, register or sync; a password-only session cannot register (no auto-promote); another partner\'s device is offered nothing', async () => {
    const other = await createTenant(app);
    const device = await enroll(app, await enrollmentKey(app, (await login(app, other.orgAdmin)).accessToken, other.orgId), { arch: 'evil' });
    const evil = { version: '2.1.0', component: 'agent', os: 'linux', arch: 'evil', url: `${host.url}/internal-evil-binary`, sha256: 'e'.repeat(64), size: 4 };
    const up = await upload(keyAudit, { version: '2.1.0', component: 'agent', os: 'linux', arch: 'evil' });
    expect(up.status).toBe(403);
    expect(((await up.json()) as { code: string }).code).toBe('user_required');
    const reg = await app.api('POST', '/agent-versions', { token: keyAudit, body: evil });
    expect([reg.status, reg.body.code]).toEqual([403, 'user_required']);
    const sync = await app.api('POST', '/agent-versions/sync-remote', { token: keyAudit });
    expect([sync.status, sync.body.code]).toEqual([403, 'user_required']);
    const session = await app.api('POST', '/agent-versions', { token: plain, body: { ...evil, signature: signBuild(keyA.privateKey, evil) } });
    expect([session.status, session.body.code]).toEqual([403, 'mfa_required']);
    expect((await releases()).filter((r) => r.arch === 'evil')).toEqual([]);
    expect((await targets()).filter((t) => t.arch === 'evil')).toEqual([]);
    expect((await heartbeat(app, device)).body.update).toBeNull();
  });

  it('auto-promote decides again: a caller who could not promote registers without promoting (autoPromote skipped, audited)', async () => {
    const info = { actor: { type: 'user' as const, id: w.platformAdmin.id } };
    const res = await registerRemote(app.server.keel, { ...signedRemote('6.0.0', 'ap'), component: 'agent' }, info, { kind: 'user', sessionId: 'password-only', mfa: false });
    expect(res).toMatchObject({ promoted: [], autoPromote: { status: 'skipped', reason: 'mfa_required' } });
    expect((await targets()).filter((t) => t.arch === 'ap')).toEqual([]);
    const skipped = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'agent.version.promote'), eq(auditLogs.result, 'failure'), eq(auditLogs.targetId, '6.0.0')));
    expect(skipped.length).toBe(1);
  });

  it('with keys configured: unsigned, wrong key, tampered size or sha256: 400 release_signature_invalid, nothing written, audited; the rotation key: 201 with its keyId', async () => {
    for (const [what, body] of [
      ['unsigned', remote('3.0.0', 'sig')],
      ['wrong key', signedRemote('3.0.0', 'sig', stranger)],
      ['tampered size', { ...signedRemote('3.0.0', 'sig'), size: 5 }],
      ['tampered sha256', { ...signedRemote('3.0.0', 'sig'), sha256: 'f'.repeat(64) }],
      ['not base64', { ...remote('3.0.0', 'sig'), signature: '!!' }],
    ] as const) {
      const res = await app.api('POST', '/agent-versions', { token: admin, body });
      expect([res.status, res.body.code], what).toEqual([400, 'release_signature_invalid']);
    }
    expect((await releases()).filter((r) => r.arch === 'sig')).toEqual([]);
    const failures = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'agent.version.register'), eq(auditLogs.result, 'failure'), eq(auditLogs.targetId, '3.0.0')));
    expect(failures.length).toBe(5);
    const ok = await app.api('POST', '/agent-versions', { token: admin, body: signedRemote('3.0.0', 'sig', keyB) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(201);
    expect(ok.body).toMatchObject({ signed: true, keyId: keyId(raw(keyB)), promoted: ['agent:linux/sig'], autoPromote: { status: 'promoted', reason: null } });
    const list = (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data;
    expect(list.find((v: any) => v.version === '3.0.0').builds[0]).toMatchObject({ signed: true, keyId: keyId(raw(keyB)) });
  });

  it('an upload carries its signature as a multipart field; an unsigned upload is refused before the file is stored', async () => {
    const dir = join(app.server.keel.config.DATA_DIR, 'agent-releases');
    const before = existsSync(dir) ? readdirSync(dir).length : 0;
    const fields = { version: '3.1.0', component: 'agent', os: 'linux', arch: 'upl' };
    const unsigned = await upload(admin, fields, 'upload-bytes');
    expect(unsigned.status).toBe(400);
    expect(((await unsigned.json()) as { code: string }).code).toBe('release_signature_invalid');
    expect(existsSync(dir) ? readdirSync(dir).length : 0).toBe(before);
    const sha256 = createHash('sha256').update('upload-bytes').digest('hex');
    const signature = signBuild(keyA.privateKey, { ...fields, sha256, size: 'upload-bytes'.length });
    const ok = await upload(admin, { ...fields, signature }, 'upload-bytes');
    expect(ok.status).toBe(201);
    expect(await ok.json()).toMatchObject({ sha256, signed: true, keyId: keyId(raw(keyA)) });
  });

  it('sync-remote: an asset without a valid signature is refused (400 release_signature_invalid), registering nothing of the release', async () => {
    const good = { component: 'agent', os: 'linux', arch: 'syn', url: 'v4/agent', sha256: 'a'.repeat(64), size: 10 };
    const bad = { component: 'watchdog', os: 'linux', arch: 'syn', url: 'v4/watchdog', sha256: 'b'.repeat(64), size: 10 };
    const publish = (assets: unknown[]) => {
      const manifest = JSON.stringify({ releases: [{ version: '4.0.0', assets }] });
      host.files.set('/manifest.json', manifest);
      host.files.set('/manifest.json.sig', sign(null, Buffer.from(manifest), keyA.privateKey).toString('base64'));
    };
    publish([{ ...good, signature: signBuild(keyA.privateKey, { ...good, version: '4.0.0' }) }, bad]);
    const res = await app.api('POST', '/agent-versions/sync-remote', { token: admin });
    expect([res.status, res.body.code]).toEqual([400, 'release_signature_invalid']);
    expect((await releases()).filter((r) => r.arch === 'syn')).toEqual([]);
    publish([{ ...good, signature: signBuild(keyA.privateKey, { ...good, version: '4.0.0' }) }, { ...bad, signature: signBuild(keyB.privateKey, { ...bad, version: '4.0.0' }) }]);
    const ok = await app.api('POST', '/agent-versions/sync-remote', { token: admin });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.synced).toEqual(['agent:linux/syn', 'watchdog:linux/syn']);
  });

  it('the enrolment answer pins the release keys; the heartbeat offer carries the signature and key id, and the signed key list', async () => {
    const enrolled = await app.api('POST', '/agents/enroll', { body: { enrollmentKey: await enrollmentKey(app, w.tokens.orgAdmin, w.orgId), hostname: 'pin-1', os: 'linux', arch: 'hb', agentVersion: '1.0.0' } });
    expect(enrolled.status).toBe(201);
    expect(enrolled.body.releaseKeys).toEqual([b64(keyA), b64(keyB)].sort());
    const build = signedRemote('5.0.0', 'hb', keyB);
    expect((await app.api('POST', '/agent-versions', { token: admin, body: build })).status).toBe(201);
    const hb = await heartbeat(app, enrolled.body);
    expect(hb.body.update).toEqual({ component: 'agent', version: '5.0.0', url: build.url, sha256: build.sha256, size: 4, signature: build.signature, keyId: keyId(raw(keyB)) });
    expect(hb.body.releaseKeys).toEqual({ keys: [b64(keyA), b64(keyB)].sort(), signature: statementSig });
    // What an agent checks: the list's statement verifies with a key it already pins.
    const pinned = createPublicKey(keyA.publicKey.export({ format: 'pem', type: 'spki' }));
    expect(verify(null, Buffer.from(keyListStatement(hb.body.releaseKeys.keys)), pinned, Buffer.from(hb.body.releaseKeys.signature, 'base64'))).toBe(true);
  });

  it('NODE_ENV=production refuses to start without AGENT_RELEASE_PUBLIC_KEYS; bad keys are refused at start', () => {
    const production = { NODE_ENV: 'production', APP_ENCRYPTION_KEY: 'a'.repeat(64), JWT_SECRET: 'j'.repeat(40) };
    expect(() => loadConfig(production)).toThrow(/AGENT_RELEASE_PUBLIC_KEYS is required/);
    expect(() => loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEYS: 'bm90IGEga2V5' })).toThrow(/AGENT_RELEASE_PUBLIC_KEYS must be/);
    expect(() => loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEYS: b64(keyA), AGENT_RELEASE_KEYS_SIGNATURE: 'short' })).toThrow(/AGENT_RELEASE_KEYS_SIGNATURE/);
    expect(loadConfig({ ...production, AGENT_RELEASE_PUBLIC_KEYS: `${b64(keyA)}, ${b64(keyB)}`, AGENT_RELEASE_KEYS_SIGNATURE: statementSig }).production).toBe(true);
  });
});
