/**
 * The update channel seen from the reference agent (docs/security.md "Update channel: the reference
 * agent"): it verifies the release signature itself with the keys it pinned at enrolment, changes
 * those keys only through a statement a pinned key signed, streams downloads under the offered size,
 * sends its device token to Keel's exact origin only, keeps each component in its own file, and
 * retries a deferred enrolment after Retry-After. The agent talks to a real Keel through a loopback
 * proxy (test/agents/keel-proxy.ts) that plays the man in the middle where a test says so; release
 * hosts are loopback servers. `keel release …` is run as an operator runs it.
 */
import { generateKeyPairSync, createHash, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Agent, heartbeatSeconds, retryAfterMs, sameOrigin, ENROLL_RETRY_AFTER_MAX_MS, type AgentOptions } from '../../agent/agent.js';
import { canonicalEntry, keyIdOf, keyListMessage } from '../../agent/release-signature.js';
import { keyId, keyListStatement, manifestEntry, parseReleaseKey, signBuild, signText, verifyBuildSignature } from '../../src/modules/agents/signing.js';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { cliEnv, runCli } from '../helpers/cli.js';
import { enrollmentKey, mfaAdmin } from '../agents/helpers.js';
import { startKeelProxy, type KeelProxy } from '../agents/keel-proxy.js';

/** A "binary": a shell script that prints its version once started and stays up; `--self-check` answers `healthy`. */
const script = (version: string) => `#!/bin/sh\n[ "$1" = "--self-check" ] && { echo healthy; exit 0; }\necho "started ${version}"\nexec sleep 300\n`;
const sha256 = (b: string | Buffer) => createHash('sha256').update(b).digest('hex');

interface Pair {
  private: KeyObject;
  pem: string;
  /** Base64 of the raw 32 bytes. */
  pub: string;
}
function keyPair(): Pair {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return { private: privateKey, pem: privateKey.export({ format: 'pem', type: 'pkcs8' }) as string, pub: publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64') };
}

/** A release host on loopback: serves `files`, records each request's path and Authorization header. */
interface ReleaseHost {
  server: Server;
  url: string;
  files: Map<string, Buffer | ((req: IncomingMessage, res: ServerResponse) => void)>;
  requests: { path: string; authorization: string | undefined }[];
}

function listen(server: Server, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
}

describe.skipIf(!backendAvailable() || process.platform !== 'linux')(`the reference agent verifies what it runs (${backend})`, () => {
  const K1 = keyPair(); // pinned at enrolment, signs builds and the key list
  const K2 = keyPair(); // the second configured key (rotation)
  const K3 = keyPair(); // nobody's: an attacker's key
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  let proxy: KeelProxy;
  let host: ReleaseHost;
  let n = 0;
  const agents: Agent[] = [];
  const dirs: string[] = [];

  beforeAll(async () => {
    app = await startTestApp({
      env: {
        LOGIN_LIMIT: '1000', BINARY_SOURCE: 'local', AGENT_AUTO_PROMOTE: 'false',
        AGENT_RELEASE_PUBLIC_KEYS: `${K1.pub},${K2.pub}`,
        AGENT_RELEASE_KEYS_SIGNATURE: signText(K1.private, keyListStatement([K1.pub, K2.pub])),
      },
      publicUrlFromPort: true,
    });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    // The proxy (the agent's server) on port P and the release host on port P·10+d: the release host's
    // URL then starts with the agent's server URL (`http://127.0.0.1:2345` / `http://127.0.0.1:23451/…`).
    const releaseServer = createServer((req, res) => {
      host.requests.push({ path: req.url ?? '', authorization: req.headers.authorization });
      const file = host.files.get(req.url ?? '');
      if (typeof file === 'function') return file(req, res);
      if (!file) return void res.writeHead(404).end();
      res.writeHead(200, { 'content-length': String(file.length) }).end(file);
    });
    for (let attempt = 0; attempt < 50 && !host; attempt++) {
      const p = 1100 + Math.floor(Math.random() * 5400);
      let candidate: KeelProxy;
      try {
        candidate = await startKeelProxy(app, p);
      } catch {
        continue;
      }
      for (let d = 0; d < 10; d++) {
        if (await listen(releaseServer, p * 10 + d)) {
          proxy = candidate;
          host = { server: releaseServer, url: `http://127.0.0.1:${p * 10 + d}`, files: new Map(), requests: [] };
          break;
        }
      }
      if (!host) await candidate.close();
    }
    if (!host) throw new Error('no free port pair on loopback');
  });
  afterEach(async () => {
    proxy.onHeartbeat = null;
    proxy.onDownload = null;
    for (const a of agents.splice(0)) await a.shutdown();
  });
  afterAll(async () => {
    await proxy?.close();
    await new Promise<void>((resolve) => (host ? host.server.close(() => resolve()) : resolve()));
    await app?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** Uploads a build signed by `signer` (multipart) and answers the registration. */
  async function upload(version: string, body: string, arch: string, opts: { component?: string; signer?: Pair | null } = {}): Promise<Response> {
    const component = opts.component ?? 'agent';
    const form = new FormData();
    for (const [k, v] of Object.entries({ version, component, os: 'linux', arch })) form.set(k, v);
    const signer = opts.signer === undefined ? K1 : opts.signer;
    if (signer) form.set('signature', signBuild(signer.private, { version, component, os: 'linux', arch, sha256: sha256(body), size: Buffer.byteLength(body) }));
    form.set('file', new Blob([body]), 'agent');
    return fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip }, body: form });
  }

  /** Registers a build on the release host (JSON), signed by K1 over the given size and SHA-256. */
  async function registerRemote(version: string, arch: string, path: string, b: { sha256: string; size: number }): Promise<void> {
    const build = { version, component: 'agent', os: 'linux', arch, sha256: b.sha256, size: b.size };
    const res = await app.api('POST', '/agent-versions', { token: admin, body: { ...build, url: `${host.url}${path}`, signature: signBuild(K1.private, build) } });
    expect(res.status).toBe(201);
  }

  const promote = async (version: string, component = 'agent') => {
    const res = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version, component, allowDowngrade: true } });
    expect(res.status).toBe(200);
  };

  /**
   * An enrolled agent on version 1.0.0 of a platform of its own, its binary running. `pinned`
   * replaces the keys in its state file (an agent enrolled before a rotation).
   */
  async function agentOn(opts: Partial<AgentOptions> = {}, pinned?: string[]): Promise<{ agent: Agent; bin: string; arch: string; dir: string }> {
    const arch = `av${++n}`;
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-verify-'));
    dirs.push(dir);
    const bin = join(dir, 'agent-bin');
    writeFileSync(bin, script('1.0.0'));
    chmodSync(bin, 0o755);
    const options: AgentOptions = { server: proxy.url, enrollmentKey: key, stateDir: join(dir, 'state'), binaryPath: bin, initialVersion: '1.0.0', hostname: `verify-${arch}`, os: 'linux', arch, soakMs: 0, ...opts };
    let agent = new Agent(options);
    await agent.enroll();
    if (pinned) {
      const file = join(dir, 'state', 'state.json');
      writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), releaseKeys: pinned }));
      agent = new Agent(options);
    }
    agents.push(agent);
    expect(await agent.start()).toBe(true);
    return { agent, bin, arch, dir };
  }

  /** The update reports the proxy saw from the agent of this directory, in order. */
  const reportsOf = (dir: string) => {
    const { deviceToken } = JSON.parse(readFileSync(join(dir, 'state', 'state.json'), 'utf8')) as { deviceToken: string };
    return proxy.reports.filter((r) => r.deviceToken === deviceToken).map((r) => r.body);
  };
  const device = async (id: string) => (await app.api('GET', `/devices/${id}`, { token: w.tokens.orgAdmin })).body;

  /** The refusal every test expects: failed with a reason, the old binary on disk and still running. */
  async function expectRefused(a: { agent: Agent; bin: string; dir: string }, outcome: string, reason: RegExp, pid: number | undefined): Promise<void> {
    expect(outcome).toBe('failed');
    expect(readFileSync(a.bin, 'utf8')).toBe(script('1.0.0'));
    expect(existsSync(`${a.bin}.bak`)).toBe(false);
    expect(existsSync(`${a.bin}.download`)).toBe(false);
    expect(a.agent.running).toBe(true);
    expect(a.agent.pid).toBe(pid);
    expect(a.agent.version).toBe('1.0.0');
    const reports = reportsOf(a.dir);
    expect(reports.at(-1)).toMatchObject({ state: 'failed', fromVersion: '1.0.0', error: expect.stringMatching(reason) });
    expect(await device(a.agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.0.0' } });
  }

  it('pins the keys of the enrolment answer; an offer signed by a pinned key installs (the download from Keel carries the token)', async () => {
    const a = await agentOn();
    expect(a.agent.releaseKeys).toEqual([K1.pub, K2.pub].sort());
    expect((await upload('2.0.0', script('2.0.0'), a.arch)).status).toBe(201);
    await promote('2.0.0');
    const downloads = proxy.downloads.length;
    const { outcome } = await a.agent.tick();
    expect(outcome).toBe('succeeded');
    expect(readFileSync(a.bin, 'utf8')).toBe(script('2.0.0'));
    expect(a.agent.running).toBe(true);
    expect(proxy.downloads.slice(downloads)).toEqual([{ path: expect.stringContaining(`/download/agent/linux/${a.arch}`), authorized: true }]);
    expect(reportsOf(a.dir).at(-1)).toMatchObject({ state: 'succeeded', toVersion: '2.0.0' });
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '2.0.0' } });
  });

  // Keel only stores builds a configured key signed, so these offers are forged in transit.
  const forgeries: { name: string; forge: (offer: any, arch: string) => void; reason: RegExp }[] = [
    { name: 'no signature', forge: (o) => ((o.signature = null), (o.keyId = null)), reason: /^signature missing/ },
    { name: 'a signature of another build (another version)', forge: (o, arch) => (o.signature = signBuild(K1.private, { ...o, version: '9.9.9', os: 'linux', arch })), reason: /^signature invalid/ },
    { name: 'a signature of the build for another platform', forge: (o) => (o.signature = signBuild(K1.private, { ...o, os: 'linux', arch: 'amd64' })), reason: /^signature invalid/ },
    { name: 'a signature by an unknown key (named)', forge: (o, arch) => ((o.signature = signBuild(K3.private, { ...o, os: 'linux', arch })), (o.keyId = keyIdOf(K3.pub))), reason: new RegExp(`^signature by an unknown key ${keyIdOf(K3.pub)}`) },
    { name: 'a signature by an unknown key (claiming a pinned key id)', forge: (o, arch) => (o.signature = signBuild(K3.private, { ...o, os: 'linux', arch })), reason: /^signature invalid/ },
  ];
  it.each(forgeries)('refuses an offer with $name before downloading: old binary kept and running, failed reported', async ({ forge, reason }) => {
    const a = await agentOn();
    expect((await upload('2.1.0', script('2.1.0'), a.arch)).status).toBe(201);
    await promote('2.1.0');
    proxy.onHeartbeat = (answer) => {
      if (answer.update) forge(answer.update, a.arch);
      return answer;
    };
    const downloads = proxy.downloads.length;
    const pid = a.agent.pid;
    const { outcome } = await a.agent.tick();
    await expectRefused(a, outcome, reason, pid);
    expect(proxy.downloads.length).toBe(downloads);
  });

  it('man in the middle: tampered bytes of the right size are refused (checksum), old binary kept and running, failed reported', async () => {
    const a = await agentOn();
    expect((await upload('2.2.0', script('2.2.0'), a.arch)).status).toBe(201);
    await promote('2.2.0');
    proxy.onDownload = (body) => Buffer.from(body.toString('utf8').replace('2.2.0', '6.6.6'));
    const pid = a.agent.pid;
    const { outcome } = await a.agent.tick();
    await expectRefused(a, outcome, /^checksum mismatch/, pid);
  });

  it('rotation: a key list signed by a pinned key adds a key; one signed by an unknown key is ignored', async () => {
    // Keel's statement lists K1 and K2, signed by K1.
    const before = await agentOn({}, [K1.pub]);
    await before.agent.heartbeat();
    expect(before.agent.releaseKeys).toEqual([K1.pub, K2.pub].sort());
    // After a restart the new set is still pinned (the state file).
    expect(new Agent({ server: proxy.url, stateDir: join(before.dir, 'state'), binaryPath: before.bin, initialVersion: '1.0.0', hostname: 'x', os: 'linux', arch: before.arch }).releaseKeys).toEqual([K1.pub, K2.pub].sort());

    const stranger = await agentOn({}, [K3.pub]);
    await stranger.agent.heartbeat();
    expect(stranger.agent.releaseKeys).toEqual([K3.pub]);

    // A forged statement adding the attacker's key, signed by that key, changes nothing.
    const pinned = await agentOn({}, [K1.pub]);
    proxy.onHeartbeat = (answer) => ({ ...answer, releaseKeys: { keys: [K1.pub, K3.pub].sort(), signature: signText(K3.private, keyListStatement([K1.pub, K3.pub])) } });
    await pinned.agent.heartbeat();
    expect(pinned.agent.releaseKeys).toEqual([K1.pub]);
    // The drop phase: a list without K1, signed by K1 (pinned), replaces the set.
    proxy.onHeartbeat = (answer) => ({ ...answer, releaseKeys: { keys: [K2.pub], signature: signText(K1.private, keyListStatement([K2.pub])) } });
    await pinned.agent.heartbeat();
    expect(pinned.agent.releaseKeys).toEqual([K2.pub]);
  });

  it('the token goes to Keel\'s exact origin only: parsed origins decide', () => {
    const server = 'https://keel.example.com';
    for (const other of [
      'https://keel.example.com.attacker.net/agent',
      'https://keel.example.com@attacker.net/agent',
      'https://keel.example.com:8443/agent',
      'http://keel.example.com/agent',
      'https://attacker.net/https://keel.example.com/agent',
      'not a url',
      'file:///etc/passwd',
    ]) {
      expect(sameOrigin(other, server), other).toBe(false);
    }
    expect(sameOrigin('https://keel.example.com/api/v1/agent-versions/1.0.0/download/agent/linux/amd64', server)).toBe(true);
    expect(sameOrigin('https://KEEL.example.com:443/x', server)).toBe(true);
  });

  it('a heartbeat answer cannot spin or silence the agent: the interval it asks for is kept within 1 s to an hour', () => {
    expect([0, -5, 0.001, 60, 3_600, 1e12, Number.NaN, '5', null].map(heartbeatSeconds)).toEqual([1, 1, 1, 60, 3_600, 3_660, 60, 60, 60]);
  });

  it('the agent\'s canonical forms are Keel\'s (entry, key id, key-list statement)', () => {
    const build = { version: '1.2.3-rc.1', component: 'helper', os: 'linux', arch: 'arm64', sha256: 'AB'.repeat(32), size: 12345 };
    expect(canonicalEntry(build)).toBe(manifestEntry(build));
    expect(keyIdOf(K1.pub)).toBe(keyId(K1.pub));
    expect(keyListMessage([K2.pub, K1.pub, K2.pub])).toBe(keyListStatement([K2.pub, K1.pub, K2.pub]));
  });

  it('a download on another origin whose URL starts with the server URL gets no Authorization header', async () => {
    const a = await agentOn();
    expect(host.url.startsWith(proxy.url)).toBe(true); // the prefix check would have sent the token here
    const body = Buffer.from(script('3.0.0'));
    host.files.set(`/3.0.0/${a.arch}`, body);
    await registerRemote('3.0.0', a.arch, `/3.0.0/${a.arch}`, { sha256: sha256(body), size: body.length });
    await promote('3.0.0');
    const { outcome } = await a.agent.tick();
    expect(outcome).toBe('succeeded');
    const seen = host.requests.filter((r) => r.path === `/3.0.0/${a.arch}`);
    expect(seen).toHaveLength(1);
    expect(seen[0]?.authorization).toBeUndefined();
  });

  it('a download larger than offered is aborted while streaming: the host sees the socket closed, the file never passes the offered size', async () => {
    const a = await agentOn();
    const offered = Buffer.from(script('3.1.0'));
    const total = 32 * 1024 * 1024;
    let written = 0;
    let largest = 0;
    let closedAt = -1;
    const closed = new Promise<void>((resolve) => {
      host.files.set(`/3.1.0/${a.arch}`, (_req, res) => {
        res.writeHead(200); // chunked: no length announced
        res.on('close', () => {
          closedAt = written;
          resolve();
        });
        const chunk = Buffer.alloc(64 * 1024, 0x41);
        const pump = (): void => {
          while (written < total && !res.destroyed) {
            written += chunk.length;
            // What the agent has on disk so far (it writes into <binary>.download).
            if (existsSync(`${a.bin}.download`)) largest = Math.max(largest, statSync(`${a.bin}.download`).size);
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          if (written >= total) res.end();
        };
        pump();
      });
    });
    await registerRemote('3.1.0', a.arch, `/3.1.0/${a.arch}`, { sha256: sha256(offered), size: offered.length });
    await promote('3.1.0');
    const pid = a.agent.pid;
    const { outcome } = await a.agent.tick();
    await closed;
    expect(closedAt).toBeGreaterThan(0);
    expect(closedAt).toBeLessThan(total);
    expect(largest).toBeLessThanOrEqual(offered.length);
    await expectRefused(a, outcome, /^size mismatch: the download goes past the offered/, pid);
  });

  it('each component has its own file: a helper update leaves the agent binary and its process alone', async () => {
    const a = await agentOn({ components: { helper: { initialVersion: '1.0.0' } } });
    const helperPath = join(a.dir, 'helper');
    expect(a.agent.pathOf('helper')).toBe(helperPath);
    expect(a.agent.pathOf('agent')).toBe(a.bin);
    writeFileSync(helperPath, 'helper 1.0.0\n');
    expect((await upload('4.0.0', 'helper 4.0.0\n', a.arch, { component: 'helper' })).status).toBe(201);
    await promote('4.0.0', 'helper');
    const pid = a.agent.pid;
    const { outcome } = await a.agent.tick();
    expect(outcome).toBe('succeeded');
    expect(readFileSync(helperPath, 'utf8')).toBe('helper 4.0.0\n');
    expect(readFileSync(`${helperPath}.bak`, 'utf8')).toBe('helper 1.0.0\n');
    expect(readFileSync(a.bin, 'utf8')).toBe(script('1.0.0'));
    expect(a.agent.pid).toBe(pid);
    expect(a.agent.running).toBe(true);
    expect(a.agent.versionOf('helper')).toBe('4.0.0');
    expect(reportsOf(a.dir).at(-1)).toMatchObject({ component: 'helper', state: 'succeeded', fromVersion: '1.0.0', toVersion: '4.0.0' });
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '1.0.0', helper: '4.0.0' } });
    // Two components on one path are refused at construction.
    expect(() => new Agent({ server: proxy.url, stateDir: join(a.dir, 's2'), binaryPath: a.bin, initialVersion: '1.0.0', hostname: 'x', os: 'linux', arch: 'x', components: { helper: { path: a.bin, initialVersion: '1.0.0' } } })).toThrow(/path of its own/);
  });

  it('enrolment deferred (429 with a Retry-After date, 503 asking for a day, 408) is retried after the wait asked for, bounded; then it enrols; a 403 stops at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-verify-'));
    dirs.push(dir);
    proxy.enrollAnswers.push(
      { status: 429, headers: { 'retry-after': new Date(Date.now() + 30_000).toUTCString() } },
      { status: 503, headers: { 'retry-after': '86400' } },
      { status: 408 },
    );
    const waits: number[] = [];
    const agent = new Agent({ server: proxy.url, enrollmentKey: key, stateDir: join(dir, 'a'), binaryPath: join(dir, 'a-bin'), initialVersion: '1.0.0', hostname: 'patient', os: 'linux', arch: 'amd64', sleep: (ms) => {
      waits.push(ms);
      return Promise.resolve();
    } });
    await agent.enrollWithRetry();
    expect(agent.deviceId).toMatch(/^[0-9a-f-]{36}$/);
    expect(agent.releaseKeys).toEqual([K1.pub, K2.pub].sort());
    expect(waits).toHaveLength(3);
    // The date is whole seconds: 28-30 s ahead when read, plus up to 10% jitter.
    expect(waits[0]).toBeGreaterThanOrEqual(28_000);
    expect(waits[0]).toBeLessThanOrEqual(33_000);
    expect(waits[1]).toBeGreaterThanOrEqual(ENROLL_RETRY_AFTER_MAX_MS);
    expect(waits[1]).toBeLessThanOrEqual(ENROLL_RETRY_AFTER_MAX_MS * 1.1);
    expect(waits[2]).toBeGreaterThanOrEqual(5_000);
    expect(waits[2]).toBeLessThanOrEqual(5_500);

    proxy.enrollAnswers.push({ status: 403, body: { error: 'forbidden', code: 'forbidden' } });
    const refused = new Agent({ server: proxy.url, enrollmentKey: key, stateDir: join(dir, 'b'), binaryPath: join(dir, 'b-bin'), initialVersion: '1.0.0', hostname: 'refused', os: 'linux', arch: 'amd64', sleep: () => Promise.reject(new Error('a definitive refusal must not be retried')) });
    await expect(refused.enrollWithRetry()).rejects.toThrow('enrolment refused: 403');
    expect(refused.deviceId).toBeNull();

    expect(retryAfterMs('120')).toBe(120_000);
    expect(retryAfterMs('soon')).toBeNull();
    expect(retryAfterMs(null)).toBeNull();
    expect(retryAfterMs(new Date(Date.UTC(2000, 0, 1)).toUTCString())).toBe(0);
  });

  describe('keel release (the operator\'s signing commands)', () => {
    let work: string;
    beforeAll(() => {
      work = mkdtempSync(join(tmpdir(), 'keel-release-cli-'));
      dirs.push(work);
      writeFileSync(join(work, 'k1.pem'), K1.pem, { mode: 0o600 });
    });

    it('keygen writes a PKCS#8 key with mode 0600 and prints its public key; never overwrites', async () => {
      const out = join(work, 'new.pem');
      const res = await runCli(['release', 'keygen', '--out', out], cliEnv(join(work, 'data')));
      expect(res).toMatchObject({ code: 0, stderr: '' });
      expect(statSync(out).mode & 0o777).toBe(0o600);
      const pem = readFileSync(out, 'utf8');
      expect(pem).toContain('BEGIN PRIVATE KEY');
      const printed = res.stdout.trim();
      expect(parseReleaseKey(printed).base64).toBe(printed);
      // The printed key is the file's: a signature by the file verifies with it.
      const build = { version: '1.0.0', component: 'agent', os: 'linux', arch: 'amd64', sha256: 'a'.repeat(64), size: 1 };
      expect(verifyBuildSignature([parseReleaseKey(printed)], build, signBuild(pem, build))).not.toBeNull();
      const again = await runCli(['release', 'keygen', '--out', out], cliEnv(join(work, 'data')));
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/^keel: cannot write --out .*EEXIST/);
      expect(readFileSync(out, 'utf8')).toBe(pem);
    });

    it('sign-keys prints the key-list statement\'s signature; a wrong command line exits 2, a key that is not Ed25519 exits 1', async () => {
      const res = await runCli(['release', 'sign-keys', '--key', join(work, 'k1.pem'), '--keys', `${K2.pub},${K1.pub}`], cliEnv(join(work, 'data')));
      expect(res.code).toBe(0);
      expect(res.stdout).toBe(`${signText(K1.private, keyListStatement([K1.pub, K2.pub]))}\n`);
      const bad = await runCli(['release', 'sign', '--key', join(work, 'k1.pem')], cliEnv(join(work, 'data')));
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/^keel: release sign: --file, --version, --component, --os, --arch are required/);
      writeFileSync(join(work, 'rsa.pem'), generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'pem', type: 'pkcs8' }));
      const rsa = await runCli(['release', 'sign-keys', '--key', join(work, 'rsa.pem'), '--keys', K1.pub], cliEnv(join(work, 'data')));
      expect(rsa).toMatchObject({ code: 1, stdout: '' });
      expect(rsa.stderr).toMatch(/^keel: the key file .* holds a rsa key, not Ed25519\n$/);
    });

    it('end to end: the signature `keel release sign` prints is what Keel requires and what the agent installs', async () => {
      const a = await agentOn();
      const binary = join(work, 'agent-5.0.0');
      writeFileSync(binary, script('5.0.0'));
      const res = await runCli(['release', 'sign', '--key', join(work, 'k1.pem'), '--file', binary, '--version', '5.0.0', '--component', 'agent', '--os', 'linux', '--arch', a.arch], cliEnv(join(work, 'data')));
      expect(res).toMatchObject({ code: 0, stderr: '' });
      const signature = res.stdout.trim();
      const build = { version: '5.0.0', component: 'agent', os: 'linux', arch: a.arch, sha256: sha256(script('5.0.0')), size: Buffer.byteLength(script('5.0.0')) };
      expect(verifyBuildSignature([parseReleaseKey(K1.pub)], build, signature)?.id).toBe(keyIdOf(K1.pub));
      expect(manifestEntry(build)).toBe(JSON.stringify({ arch: a.arch, component: 'agent', os: 'linux', sha256: build.sha256, size: build.size, version: '5.0.0' }));
      // Without a signature Keel refuses the build; with the command's signature it registers it.
      const unsigned = await upload('5.0.0', script('5.0.0'), a.arch, { signer: null });
      expect(unsigned.status).toBe(400);
      expect(((await unsigned.json()) as { code: string }).code).toBe('release_signature_invalid');
      const form = new FormData();
      for (const [k, v] of Object.entries({ version: '5.0.0', component: 'agent', os: 'linux', arch: a.arch, signature })) form.set(k, v);
      form.set('file', new Blob([script('5.0.0')]), 'agent');
      const signed = await fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip }, body: form });
      expect(signed.status).toBe(201);
      await promote('5.0.0');
      expect((await a.agent.tick()).outcome).toBe('succeeded');
      expect(readFileSync(a.bin, 'utf8')).toBe(script('5.0.0'));
    });
  });
});
