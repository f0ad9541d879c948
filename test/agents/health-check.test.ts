/**
 * Health-checked updates of the reference agent against a real Keel (docs/decisions.md "Agent
 * health-checked updates"): a new build must start, pass its self-check and reach Keel within the
 * deadline, then stay healthy for the soak; otherwise the previous binary is put back, runs again,
 * and the rollback is reported with its reason, counted as a failure of the rollout, and the version
 * is not offered to that device again until update-now retries it. Builds are signed with the
 * release key the agents pinned at enrolment. The agents' time is a clock the tests move by hand.
 */
import { generateKeyPairSync, createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Agent, type AgentClock, type AgentOptions } from '../../agent/agent.js';
import { signBuild } from '../../src/modules/agents/signing.js';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { enrollmentKey, mfaAdmin } from './helpers.js';
import { startKeelProxy, type KeelProxy } from './keel-proxy.js';

/** A clock whose time moves only when the test says so; due timers fire in order. */
class ManualClock implements AgentClock {
  #now = 0;
  #next = 1;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  now(): number {
    return this.#now;
  }
  setTimeout(fn: () => void, ms: number): number {
    const id = this.#next++;
    this.#timers.set(id, { at: this.#now + ms, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }
  advance(ms: number): void {
    const until = this.#now + ms;
    for (;;) {
      const due = [...this.#timers.entries()].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.#timers.delete(due[0]);
      this.#now = Math.max(this.#now, due[1].at);
      due[1].fn();
    }
    this.#now = until;
  }
}

type Kind = 'healthy' | 'exits' | 'unhealthy';
/**
 * A build: a shell script. Run with `--self-check` it answers `healthy` (or `unhealthy: <reason>`,
 * exit 1); run plainly it records its pid and version in `<file>.running`, prints its first line and
 * stays up (or exits at once with code 3).
 */
const build = (version: string, kind: Kind = 'healthy') =>
  `#!/bin/sh\nif [ "$1" = "--self-check" ]; then\n${kind === 'unhealthy' ? '  echo "unhealthy: cannot open /etc/keel/agent.conf"\n  exit 1' : '  echo healthy\n  exit 0'}\nfi\n` +
  (kind === 'exits' ? `echo "cannot start ${version}" >&2\nexit 3\n` : `echo "$$ ${version}" > "$0.running"\necho "started ${version}"\nexec sleep 300\n`);

const sha256 = (b: string) => createHash('sha256').update(b).digest('hex');

/** Resolves once `ready()` holds (the poll only paces the check). */
const until = (ready: () => boolean) =>
  new Promise<void>((resolve) => {
    const poll = setInterval(() => {
      if (ready()) {
        clearInterval(poll);
        resolve();
      }
    }, 10);
  });

describe.skipIf(!backendAvailable() || process.platform !== 'linux')(`health-checked updates of the reference agent (${backend})`, () => {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const releaseKey = publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
  let app: TestApp;
  let w: World;
  let admin: string;
  let key: string;
  let proxy: KeelProxy;
  let n = 0;
  const agents: Agent[] = [];
  const dirs: string[] = [];

  beforeAll(async () => {
    app = await startTestApp({
      // Two reports are enough to judge a rollout here: one rollback is `failing`, two halt it.
      env: { LOGIN_LIMIT: '1000', BINARY_SOURCE: 'local', AGENT_AUTO_PROMOTE: 'false', AGENT_RELEASE_PUBLIC_KEYS: releaseKey, AGENT_HALT_MIN_REPORTS: '2' },
      publicUrlFromPort: true,
    });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    proxy = await startKeelProxy(app);
  });
  afterEach(async () => {
    proxy.refuse = null;
    for (const a of agents.splice(0)) await a.shutdown();
  });
  afterAll(async () => {
    await proxy?.close();
    await app?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** Uploads a build for linux/`arch`, signed with the release key, and promotes it to the whole platform. */
  async function release(version: string, body: string, arch: string): Promise<void> {
    const form = new FormData();
    for (const [k, v] of Object.entries({ version, component: 'agent', os: 'linux', arch })) form.set(k, v);
    form.set('signature', signBuild(privateKey, { version, component: 'agent', os: 'linux', arch, sha256: sha256(body), size: Buffer.byteLength(body) }));
    form.set('file', new Blob([body]), 'agent');
    const res = await fetch(`${app.url}/api/v1/agent-versions`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'x-forwarded-for': app.ip }, body: form });
    expect(res.status).toBe(201);
    const promoted = await app.api('POST', '/agent-versions/promote', { token: admin, body: { version, allowDowngrade: true } });
    expect(promoted.status).toBe(200);
  }

  interface Running {
    agent: Agent;
    bin: string;
    dir: string;
    said: string[];
  }

  /** An enrolled agent running build 1.0.0 on linux/`arch`; its time is `clock`. */
  async function agentOn(arch: string, opts: Partial<AgentOptions> = {}): Promise<Running> {
    const dir = mkdtempSync(join(tmpdir(), 'keel-health-'));
    dirs.push(dir);
    const bin = join(dir, 'agent-bin');
    writeFileSync(bin, build('1.0.0'));
    chmodSync(bin, 0o755);
    const said: string[] = [];
    const agent = new Agent({
      server: app.publicUrl, enrollmentKey: key, stateDir: join(dir, 'state'), binaryPath: bin, initialVersion: '1.0.0', hostname: `health-${++n}`,
      os: 'linux', arch, clock: new ManualClock(), log: (m) => said.push(m), ...opts,
    });
    agents.push(agent);
    await agent.enroll();
    expect(agent.releaseKeys).toEqual([releaseKey]);
    expect(await agent.start()).toBe(true);
    return { agent, bin, dir, said };
  }

  /** The previous binary is on disk again and it is what runs now. */
  function expectPrevious(a: Running): void {
    expect(readFileSync(a.bin, 'utf8')).toBe(build('1.0.0'));
    expect(a.agent.running).toBe(true);
    expect(readFileSync(`${a.bin}.running`, 'utf8')).toBe(`${a.agent.pid} 1.0.0\n`);
    expect(a.agent.version).toBe('1.0.0');
  }

  const device = async (id: string) => (await app.api('GET', `/devices/${id}`, { token: w.tokens.orgAdmin })).body;
  const history = async (id: string): Promise<any[]> => (await app.api('GET', `/devices/${id}/update-history?limit=50`, { token: w.tokens.orgAdmin })).body.data;
  const rolloutOf = async (version: string) => (await app.api('GET', '/agent-versions?limit=100', { token: admin })).body.data.find((v: any) => v.version === version)?.rollout;
  const rollback = async (id: string) => (await history(id)).find((e) => e.state === 'rolled_back');

  it('a build that exits at start is rolled back and reported; not offered again until update-now retries it; failures halt the rollout at the threshold', async () => {
    const one = await agentOn('hc1');
    const two = await agentOn('hc1');
    await release('2.0.0', build('2.0.0', 'exits'), 'hc1');
    const { outcome, answer } = await one.agent.tick();
    expect(outcome).toBe('rolled_back');
    expectPrevious(one);
    expect(await rollback(one.agent.deviceId!)).toMatchObject({ component: 'agent', fromVersion: '1.0.0', toVersion: '2.0.0', error: 'exited at start (exit code 3)' });
    expect(await device(one.agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.0.0' } });
    // One rolled-back report of one: a failure, below the threshold of two reports.
    expect(await rolloutOf('2.0.0')).toMatchObject({ status: 'failing', succeeded: 0, failed: 1, blocked: 1 });
    // The heartbeat right after the rollback, and the next ones, are not offered 2.0.0 again.
    expect(answer.update).toBeNull();
    expect(await one.agent.tick()).toMatchObject({ outcome: 'none', answer: { update: null } });
    // Update-now is the retry: the next heartbeat is offered it again.
    expect((await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [one.agent.deviceId] } })).status).toBe(202);
    expect((await one.agent.heartbeat()).update).toMatchObject({ component: 'agent', version: '2.0.0' });
    expect((await history(one.agent.deviceId!)).map((e) => e.state).slice(0, 2)).toEqual(['offered', 'retried']);
    // The second device's rollback: two failures of two reports halt the platform's rollout.
    expect((await two.agent.tick()).outcome).toBe('rolled_back');
    expectPrevious(two);
    expect(await rolloutOf('2.0.0')).toMatchObject({ status: 'halted', failed: 2 });
  });

  it('a build that fails its self-check is rolled back with its reason; Keel never saw it run', async () => {
    const a = await agentOn('hc2');
    await release('3.0.0', build('3.0.0', 'unhealthy'), 'hc2');
    const { outcome } = await a.agent.tick();
    expect(outcome).toBe('rolled_back');
    expectPrevious(a);
    expect(await rollback(a.agent.deviceId!)).toMatchObject({ fromVersion: '1.0.0', toVersion: '3.0.0', error: 'self-check failed: cannot open /etc/keel/agent.conf' });
    expect((await history(a.agent.deviceId!)).map((e) => e.state)).not.toContain('succeeded');
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '1.0.0' } });
    expect(await rolloutOf('3.0.0')).toMatchObject({ status: 'failing', failed: 1, blocked: 1 });
    expect(await a.agent.tick()).toMatchObject({ outcome: 'none', answer: { update: null } });
  });

  it('a build that crashes during the soak is rolled back; the watchdog stands down during the check and watches the restored binary after it', async () => {
    const clock = new ManualClock();
    const a = await agentOn('hc3', { watchdog: true, clock });
    await release('4.0.0', build('4.0.0'), 'hc3');
    const ticking = a.agent.tick();
    await until(() => a.agent.healthPhase === 'soak');
    // It started, passed its self-check and reached Keel with the new version.
    expect(readFileSync(`${a.bin}.running`, 'utf8')).toBe(`${a.agent.pid} 4.0.0\n`);
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '4.0.0' } });
    process.kill(a.agent.pid!, 'SIGKILL');
    const { outcome, answer } = await ticking;
    expect(outcome).toBe('rolled_back');
    expectPrevious(a);
    expect(a.said.filter((m) => m.includes('restarting it'))).toEqual([]);
    expect(await rollback(a.agent.deviceId!)).toMatchObject({ fromVersion: '1.0.0', toVersion: '4.0.0', error: 'crashed during soak (signal SIGKILL)' });
    // The heartbeat after the rollback told Keel the version that runs again.
    expect(answer.update).toBeNull();
    expect(await device(a.agent.deviceId!)).toMatchObject({ status: 'online', components: { agent: '1.0.0' } });
    expect(await rolloutOf('4.0.0')).toMatchObject({ status: 'failing', succeeded: 0, failed: 1 });
    // After the check the watchdog is back: the restored binary crashing is restarted.
    const pid = a.agent.pid;
    process.kill(pid!, 'SIGKILL');
    await until(() => a.agent.running && a.agent.pid !== pid && existsSync(`${a.bin}.running`) && readFileSync(`${a.bin}.running`, 'utf8') === `${a.agent.pid} 1.0.0\n`);
    expect(a.said.filter((m) => m.includes('restarting it'))).toHaveLength(1);
  });

  it('a build whose heartbeats do not reach Keel within the deadline is rolled back', async () => {
    const clock = new ManualClock();
    const a = await agentOn('hc4', { clock, server: proxy.url });
    await release('5.0.0', build('5.0.0'), 'hc4');
    let refused = 0;
    // Heartbeats that report 5.0.0 meet a broken gateway; the others pass.
    proxy.refuse = (path, body) => (path === '/api/v1/agents/heartbeat' && body?.components?.agent === '5.0.0' && ++refused > 0 ? 502 : null);
    const ticking = a.agent.tick();
    await until(() => a.agent.healthPhase === 'reach' && refused > 0);
    clock.advance(150_000);
    const { outcome } = await ticking;
    expect(outcome).toBe('rolled_back');
    expectPrevious(a);
    expect((await rollback(a.agent.deviceId!)).error).toMatch(/^did not reach Keel within 150 s \(/);
    expect(await rolloutOf('5.0.0')).toMatchObject({ status: 'failing', failed: 1 });
  });

  it('a healthy build is reported succeeded only after the soak', async () => {
    const clock = new ManualClock();
    const a = await agentOn('hc5', { clock });
    await release('6.0.0', build('6.0.0'), 'hc5');
    const ticking = a.agent.tick();
    await until(() => a.agent.healthPhase === 'soak');
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '6.0.0' } });
    expect((await history(a.agent.deviceId!)).map((e) => e.state)).not.toContain('succeeded');
    expect(await rolloutOf('6.0.0')).toMatchObject({ succeeded: 0, failed: 0 });
    clock.advance(60_000);
    const { outcome } = await ticking;
    expect(outcome).toBe('succeeded');
    expect(readFileSync(a.bin, 'utf8')).toBe(build('6.0.0'));
    expect(readFileSync(`${a.bin}.bak`, 'utf8')).toBe(build('1.0.0'));
    expect(readFileSync(`${a.bin}.running`, 'utf8')).toBe(`${a.agent.pid} 6.0.0\n`);
    expect(a.agent.version).toBe('6.0.0');
    expect((await history(a.agent.deviceId!))[0]).toMatchObject({ state: 'succeeded', fromVersion: '1.0.0', toVersion: '6.0.0' });
    expect(await rolloutOf('6.0.0')).toMatchObject({ succeeded: 1, failed: 0 });
    expect(a.said).toContain('updated agent 1.0.0 -> 6.0.0');
  });

  it('an agent stopped during the check puts the previous binary back; started again, it reports the rollback', async () => {
    const clock = new ManualClock();
    const a = await agentOn('hc6', { clock });
    await release('7.0.0', build('7.0.0'), 'hc6');
    const ticking = a.agent.tick();
    await until(() => a.agent.healthPhase === 'soak');
    await a.agent.shutdown();
    expect((await ticking).outcome).toBe('rolled_back');
    expect(readFileSync(a.bin, 'utf8')).toBe(build('1.0.0'));
    expect(a.agent.running).toBe(false);
    const again = new Agent({ server: app.publicUrl, stateDir: join(a.dir, 'state'), binaryPath: a.bin, initialVersion: '1.0.0', hostname: 'x', os: 'linux', arch: 'hc6', clock });
    agents.push(again);
    expect(await again.tick()).toMatchObject({ outcome: 'none', answer: { update: null } });
    expect(await rollback(a.agent.deviceId!)).toMatchObject({ fromVersion: '1.0.0', toVersion: '7.0.0', error: 'interrupted: the agent stopped during the health check' });
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '1.0.0' } });
  });

  it('a version that stops starting after its update succeeded: the watchdog puts the backup back, the agent reports the version that runs and the rollback', async () => {
    const clock = new ManualClock();
    const a = await agentOn('hc8', { watchdog: true, clock });
    await release('9.0.0', build('9.0.0'), 'hc8');
    const ticking = a.agent.tick();
    await until(() => a.agent.healthPhase === 'soak');
    clock.advance(60_000);
    expect((await ticking).outcome).toBe('succeeded');
    expect(a.agent.version).toBe('9.0.0');
    // Later, 9.0.0 no longer starts (what it depends on went away): it crashes, and restarting it fails.
    writeFileSync(a.bin, build('9.0.0', 'exits'));
    process.kill(a.agent.pid!, 'SIGKILL');
    await until(() => a.agent.running && existsSync(`${a.bin}.running`) && readFileSync(`${a.bin}.running`, 'utf8') === `${a.agent.pid} 1.0.0\n`);
    expect(a.said).toContain('binary does not start: restoring the backup');
    // What runs is 1.0.0, and that is what the agent says, now and after a restart from its state.
    expect(a.agent.version).toBe('1.0.0');
    expect(JSON.parse(readFileSync(join(a.dir, 'state', 'state.json'), 'utf8'))).toMatchObject({ version: '1.0.0' });
    const { answer } = await a.agent.tick();
    expect(await device(a.agent.deviceId!)).toMatchObject({ components: { agent: '1.0.0' } });
    // Keel heard the rollback: counted as a failure, and 9.0.0 is not offered to this device again.
    expect(await rollback(a.agent.deviceId!)).toMatchObject({ fromVersion: '1.0.0', toVersion: '9.0.0', error: 'the watchdog restored 1.0.0: 9.0.0 no longer starts' });
    expect(await rolloutOf('9.0.0')).toMatchObject({ failed: 1, blocked: 1 });
    expect(answer.update).toBeNull();
  });

  it('a rollback report Keel could not take is sent again before the next heartbeat', async () => {
    const a = await agentOn('hc7', { server: proxy.url });
    await release('8.0.0', build('8.0.0', 'unhealthy'), 'hc7');
    proxy.refuse = (path, body) => (path === '/api/v1/agents/update-report' && body?.state === 'rolled_back' ? 503 : null);
    await expect(a.agent.tick()).rejects.toThrow(/rollback report deferred: 503/);
    expectPrevious(a);
    expect(await rollback(a.agent.deviceId!)).toBeUndefined();
    proxy.refuse = null;
    expect((await a.agent.tick()).outcome).toBe('none');
    expect(await rollback(a.agent.deviceId!)).toMatchObject({ toVersion: '8.0.0', error: 'self-check failed: cannot open /etc/keel/agent.conf' });
  });
});
