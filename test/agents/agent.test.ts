import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { Agent } from '../../agent/agent.js';
import { releaseDir } from '../../src/modules/agents/releases.js';
import { enrollmentKey, mfaAdmin } from './helpers.js';

/**
 * A "binary": a shell script that prints its version once started and stays up (or exits at once);
 * run with `--self-check` it answers `healthy` (docs/decisions.md "Agent health-checked updates").
 */
const script = (version: string, ok = true) =>
  `#!/bin/sh\n[ "$1" = "--self-check" ] && { echo healthy; exit 0; }\n` + (ok ? `echo "started ${version}"\nexec sleep 300\n` : `echo "cannot start ${version}" >&2\nexit 3\n`);

describe.skipIf(!backendAvailable() || process.platform !== 'linux')(`the reference agent (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  let arch = 0;
  const agents: Agent[] = [];
  const dirs: string[] = [];
  beforeAll(async () => {
    // The agent talks to PUBLIC_URL, the base of the download URLs Keel hands out.
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', BINARY_SOURCE: 'local', AGENT_AUTO_PROMOTE: 'false', AGENT_UPLOAD_LIMIT_BYTES: '65536' }, publicUrlFromPort: true });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
  });
  afterEach(async () => {
    for (const a of agents.splice(0)) await a.shutdown();
  });
  afterAll(async () => {
    await app?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** Uploads a build (multipart) and answers the registration. */
  async function upload(version: string, body: string, a: string): Promise<any> {
    const form = new FormData();
    for (const [k, v] of Object.entries({ version, component: 'agent', os: 'linux', arch: a })) form.set(k, v);
    form.set('file', new Blob([body]), 'agent');
    const res = await fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip }, body: form });
    expect(res.status).toBe(201);
    return res.json();
  }

  const promote = async (version: string) => {
    const res = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version, allowDowngrade: true } });
    expect(res.status).toBe(200);
  };

  /** An enrolled agent on version 1.0.0 of a fresh platform, its binary running (no soak: test/agents/health-check.test.ts has it). */
  async function agentOn(opts: Partial<ConstructorParameters<typeof Agent>[0]> = {}): Promise<{ agent: Agent; bin: string; arch: string; dir: string }> {
    const a = `ag${++arch}`;
    const dir = mkdtempSync(join(tmpdir(), 'keel-agent-'));
    dirs.push(dir);
    const bin = join(dir, 'agent-bin');
    writeFileSync(bin, script('1.0.0'));
    chmodSync(bin, 0o755);
    const agent = new Agent({ server: app.publicUrl, enrollmentKey: key, stateDir: join(dir, 'state'), binaryPath: bin, initialVersion: '1.0.0', hostname: `ref-${a}`, os: 'linux', arch: a, soakMs: 0, ...opts });
    agents.push(agent);
    await agent.enroll();
    expect(await agent.start()).toBe(true);
    return { agent, bin, arch: a, dir };
  }

  const device = async (id: string) => (await app.api('GET', `/devices/${id}`, { token: w.tokens.orgAdmin })).body;
  const rolloutOf = async (version: string) => (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === version)?.rollout;

  it('applies an offered update on real files: download, SHA-256 check, backup, replace, restart, report the new version at once', async () => {
    const said: string[] = [];
    const { agent, bin, arch: a } = await agentOn({ log: (m) => said.push(m) });
    // The person who installed it sees that it enrolled.
    expect(said).toContain(`enrolled as device ${agent.deviceId} (ref-${a}, linux/${a}, agent 1.0.0)`);
    const registered = await upload('1.1.0', script('1.1.0'), a);
    expect(registered.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(registered.url).toContain(`/api/v1/agent-versions/1.1.0/download/agent/linux/${a}`);
    await promote('1.1.0');
    const oldPid = agent.pid;
    const { outcome, answer } = await agent.tick();
    expect(outcome).toBe('succeeded');
    expect(answer.update).toBeNull();
    expect(readFileSync(bin, 'utf8')).toBe(script('1.1.0'));
    expect(readFileSync(`${bin}.bak`, 'utf8')).toBe(script('1.0.0'));
    expect(agent.running).toBe(true);
    expect(agent.pid).not.toBe(oldPid);
    // Reported at once (the heartbeat after the update, no interval waited).
    expect(await device(agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.1.0' } });
    expect(await rolloutOf('1.1.0')).toMatchObject({ succeeded: 1, failed: 0 });
    expect(said).toContain('updated agent 1.0.0 -> 1.1.0');
  });

  it('a corrupted download (wrong SHA-256) is refused by the agent and reported failed; nothing replaced', async () => {
    const { agent, bin, arch: a } = await agentOn();
    const reg = await upload('1.2.0', script('1.2.0'), a);
    // The stored file is corrupted on the server: what the agent downloads no longer matches.
    const stored = join(releaseDir(app.server.keel), reg.sha256);
    writeFileSync(stored, script('1.2.0').replace('started', 'tampered'));
    await promote('1.2.0');
    const { outcome } = await agent.tick();
    expect(outcome).toBe('failed');
    expect(readFileSync(bin, 'utf8')).toBe(script('1.0.0'));
    expect(existsSync(`${bin}.bak`)).toBe(false);
    expect(agent.running).toBe(true);
    expect(await device(agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.0.0' } });
    // One failure of one report is below AGENT_HALT_MIN_REPORTS (5): counted, not halted; failing, never
    // complete (docs/decisions.md "Honest rollouts"), and the device waits for a retry.
    expect(await rolloutOf('1.2.0')).toMatchObject({ status: 'failing', succeeded: 0, failed: 1, blocked: 1 });
  });

  it('a new binary that exits at once is rolled back to the backup, restarted, and reported rolled_back', async () => {
    const { agent, bin, arch: a } = await agentOn();
    await upload('1.3.0', script('1.3.0', false), a);
    await promote('1.3.0');
    const { outcome } = await agent.tick();
    expect(outcome).toBe('rolled_back');
    expect(readFileSync(bin, 'utf8')).toBe(script('1.0.0'));
    expect(agent.running).toBe(true);
    expect(agent.version).toBe('1.0.0');
    expect(await device(agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.0.0' } });
    expect(await rolloutOf('1.3.0')).toMatchObject({ status: 'failing', failed: 1, blocked: 1 });
    // The reference agent's next heartbeat is not offered 1.3.0 again (no rollback loop).
    const next = await agent.tick();
    expect(next.answer.update).toBeNull();
    expect(agent.version).toBe('1.0.0');
  });

  it('auto-update off survives an agent restart: the answer carries it and the agent does not update', async () => {
    const first = await agentOn();
    await upload('1.4.0', script('1.4.0'), first.arch);
    await promote('1.4.0');
    expect((await app.api('POST', `/devices/${first.agent.deviceId}/auto-update`, { token: w.tokens.orgAdmin, body: { enabled: false } })).status).toBe(200);
    await first.agent.shutdown();
    // A new process with the same state directory: it knows nothing but its identity.
    const restarted = new Agent({ server: app.publicUrl, stateDir: join(first.dir, 'state'), binaryPath: first.bin, initialVersion: '1.0.0', hostname: 'x', os: 'linux', arch: first.arch });
    agents.push(restarted);
    expect(restarted.deviceId).toBe(first.agent.deviceId);
    const { answer, outcome } = await restarted.tick();
    expect(answer.autoUpdate).toBe(false);
    expect(outcome).toBe('none');
    expect(readFileSync(first.bin, 'utf8')).toBe(script('1.0.0'));
  });

  it('a file-lock error is retried on the next heartbeat', async () => {
    let locked = 1;
    const { agent, bin, arch: a } = await agentOn({
      replaceBinary: (from, to) => {
        if (locked-- > 0) throw Object.assign(new Error('resource busy'), { code: 'EBUSY' });
        rmSync(to, { force: true });
        renameSync(from, to);
        chmodSync(to, 0o755);
      },
    });
    await upload('1.5.0', script('1.5.0'), a);
    await promote('1.5.0');
    expect((await agent.tick()).outcome).toBe('locked');
    expect(readFileSync(bin, 'utf8')).toBe(script('1.0.0'));
    expect((await device(agent.deviceId!)).status).toBe('updating');
    expect((await agent.tick()).outcome).toBe('succeeded');
    expect(readFileSync(bin, 'utf8')).toBe(script('1.5.0'));
    expect(await device(agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.5.0' } });
  });

  it('watchdog mode restarts a crashed binary, and restores the backup when the binary no longer starts', async () => {
    const { agent, bin } = await agentOn({ watchdog: true });
    // Resolves once a new process of the good binary runs (the poll only paces the check).
    const restarted = (before: number | undefined) =>
      new Promise<void>((resolve) => {
        const poll = setInterval(() => {
          if (agent.running && agent.pid !== before && readFileSync(bin, 'utf8') === script('1.0.0')) {
            clearInterval(poll);
            resolve();
          }
        }, 20);
      });
    let pid = agent.pid;
    process.kill(pid!, 'SIGKILL');
    await restarted(pid);
    // A broken binary on disk with a good backup: the watchdog starts the backup.
    writeFileSync(`${bin}.bak`, script('1.0.0'));
    rmSync(bin);
    writeFileSync(bin, script('9.9.9', false), { mode: 0o755 });
    pid = agent.pid;
    process.kill(pid!, 'SIGKILL');
    await restarted(pid);
    expect(readFileSync(bin, 'utf8')).toBe(script('1.0.0'));
    expect(readdirSync(join(bin, '..')).sort()).toEqual(['agent-bin', 'agent-bin.bak', 'state']);
  });

  it('uploads have their own body limit (AGENT_UPLOAD_LIMIT_BYTES): over it is 413; other routes keep the JSON limit', async () => {
    const form = new FormData();
    for (const [k, v] of Object.entries({ version: '1.7.0', component: 'agent', os: 'linux', arch: 'big' })) form.set(k, v);
    form.set('file', new Blob([Buffer.alloc(70_000, 1)]), 'agent');
    const res = await fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip }, body: form });
    expect(res.status).toBe(413);
    // Above the JSON limit of other routes (1 MiB would not matter here) but a multipart body elsewhere is 415.
    const elsewhere = await fetch(`${app.url}/api/v1/agents/heartbeat`, { method: 'POST', headers: { 'x-forwarded-for': app.ip }, body: new FormData() });
    expect(elsewhere.status).toBe(415);
  });

  it('a malformed upload is a 4xx, never a 500', async () => {
    const post = (type: string, body: string) => fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip, 'content-type': type }, body });
    expect((await post('multipart/form-data; boundary=zz', '--zz\r\nContent-Disposition: form-data; name="version"\r\n\r\n1.0')).status).toBeLessThan(500);
    const missing = await post('multipart/form-data; boundary=zz', '--zz\r\nContent-Disposition: form-data; name="version"\r\n\r\n1.0.0\r\n--zz--\r\n');
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { code: string }).code).toBe('validation_failed');
    expect((await post('text/plain', 'hello')).status).toBe(415);
  });

  it('downloads need a device token', async () => {
    const a = `dl${++arch}`;
    const reg = await upload('1.6.0', script('1.6.0'), a);
    const path = new URL(reg.url).pathname;
    expect((await app.request('GET', path)).status).toBe(401);
    expect((await app.request('GET', path, { token: admin })).status).toBe(401);
  });
});
