/**
 * The reference agent (issue 16): enrols, heartbeats with jitter, and applies an offered update as
 * SPEC 8 says, on real files:
 *
 *   report `started` → download → SHA-256 check (mismatch: report `failed`, nothing replaced) →
 *   back up the current binary (`<binary>.bak`) → replace it (on Linux the old file is removed before
 *   the new one is written: a running executable cannot be opened for writing) → restart it → the new
 *   binary must start (print a line on stdout before exiting) → report `succeeded` and heartbeat at
 *   once, without jitter. A binary that fails to start is rolled back to the backup, restarted, and
 *   reported `rolled_back`. A file-lock error (EBUSY, ETXTBSY, EPERM, EACCES) keeps the offer and
 *   retries it on the next heartbeat.
 *
 * Watchdog mode (`watchdog: true`) restarts the binary when it exits, and restores the backup when
 * the binary no longer starts (after a failed update or a crash).
 *
 * The managed "binary" is any executable; it signals that it started by writing a line to stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync, chmodSync, renameSync } from 'node:fs';
import { join } from 'node:path';

export interface AgentOptions {
  /** Keel's base URL (without /api/v1). */
  server: string;
  /** Organisation enrolment key (first start only). */
  enrollmentKey?: string;
  /** Where the agent keeps its identity and installed version (`state.json`). */
  stateDir: string;
  /** The managed binary. */
  binaryPath: string;
  /** Version of the binary at first start. */
  initialVersion: string;
  hostname: string;
  os: string;
  arch: string;
  /** Restart the binary when it exits; restore the backup when it no longer starts. */
  watchdog?: boolean;
  /** How long a started binary has to print its first line (ms). */
  startTimeoutMs?: number;
  log?: (message: string) => void;
  /** Replaces the binary's file (tests inject a lock error); default: remove, then write (Linux) or write and rename. */
  writeBinary?: (path: string, data: Buffer) => void;
  /** Waits between enrolment attempts (tests move Keel's clock instead of waiting). */
  sleep?: (ms: number) => Promise<void>;
}

/** A heartbeat answered 429: the next one waits `retryAfterSeconds` (Keel's Retry-After). */
export class HeartbeatDeferred extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(`heartbeat deferred for ${retryAfterSeconds} s`);
  }
}

/** Enrolment refused for now (429 with Retry-After, a 5xx, no answer): `run()` tries again after `retryAfterMs`. */
export class EnrollDeferred extends Error {
  override name = 'EnrollDeferred';
  constructor(
    message: string,
    readonly retryAfterMs: number | null,
  ) {
    super(message);
  }
}

/** Waits between enrolment attempts when Keel names no time: 5 s doubling to 5 minutes. */
const ENROLL_BACKOFF_MS = { first: 5_000, max: 300_000 };

interface ApiAnswer {
  status: number;
  body: unknown;
  retryAfter: string | null;
}

interface State {
  deviceId: string;
  deviceToken: string;
  version: string;
}

export interface Offer {
  component: string;
  version: string;
  url: string;
  sha256: string;
  size: number;
}

export interface HeartbeatAnswer {
  nextHeartbeatSeconds: number;
  autoUpdate: boolean;
  update: Offer | null;
}

const LOCK_CODES = new Set(['EBUSY', 'ETXTBSY', 'EPERM', 'EACCES']);

export class Agent {
  readonly #o: Required<Omit<AgentOptions, 'enrollmentKey' | 'writeBinary'>> & Pick<AgentOptions, 'enrollmentKey' | 'writeBinary'>;
  #state: State | null = null;
  #child: ChildProcess | null = null;
  #stopping = false;
  #timer: NodeJS.Timeout | null = null;
  /** An offer whose file replacement hit a lock: retried on the next heartbeat. */
  pending: Offer | null = null;
  /** The last heartbeat answer (tests read it). */
  lastAnswer: HeartbeatAnswer | null = null;

  constructor(options: AgentOptions) {
    this.#o = { watchdog: false, startTimeoutMs: 10_000, log: () => undefined, sleep: (ms) => new Promise((r) => setTimeout(r, ms)), ...options };
    mkdirSync(this.#o.stateDir, { recursive: true });
    const file = join(this.#o.stateDir, 'state.json');
    if (existsSync(file)) this.#state = JSON.parse(readFileSync(file, 'utf8')) as State;
  }

  get deviceId(): string | null {
    return this.#state?.deviceId ?? null;
  }

  get version(): string {
    return this.#state?.version ?? this.#o.initialVersion;
  }

  get running(): boolean {
    return this.#child !== null && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  #save(): void {
    writeFileSync(join(this.#o.stateDir, 'state.json'), JSON.stringify(this.#state), { mode: 0o600 });
  }

  async #api(path: string, body: unknown): Promise<ApiAnswer> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.#state) headers.authorization = `Bearer ${this.#state.deviceToken}`;
    const res = await fetch(`${this.#o.server}/api/v1${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? (JSON.parse(text) as unknown) : null;
    } catch {
      parsed = text; // a proxy's error page
    }
    return { status: res.status, body: parsed, retryAfter: res.headers.get('retry-after') };
  }

  /**
   * One enrolment attempt; the identity is kept in the state directory across restarts. Throws
   * `EnrollDeferred` when trying later may work (429, 5xx, Keel unreachable), an Error otherwise
   * (a wrong or revoked key: 401, 404).
   */
  async enroll(): Promise<void> {
    if (this.#state) return;
    if (!this.#o.enrollmentKey) throw new Error('not enrolled and no enrollment key given');
    let res: ApiAnswer;
    try {
      res = await this.#api('/agents/enroll', {
        enrollmentKey: this.#o.enrollmentKey, hostname: this.#o.hostname, os: this.#o.os, arch: this.#o.arch, agentVersion: this.#o.initialVersion,
      });
    } catch (err) {
      throw new EnrollDeferred(`Keel unreachable: ${(err as Error).message}`, null);
    }
    if (res.status === 429 || res.status >= 500) {
      const seconds = Number(res.retryAfter);
      throw new EnrollDeferred(`enrolment refused for now: ${res.status}`, Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : null);
    }
    if (res.status !== 201) throw new Error(`enrolment refused: ${res.status}`);
    const enrolled = res.body as { deviceId: string; deviceToken: string };
    this.#state = { deviceId: enrolled.deviceId, deviceToken: enrolled.deviceToken, version: this.#o.initialVersion };
    this.#save();
  }

  /**
   * Enrols, trying again while Keel defers it: after Retry-After (with up to 10% jitter, so a fleet
   * installed at once spreads out), else after a backoff of 5 s doubling to 5 minutes.
   */
  async enrollWithRetry(): Promise<void> {
    let backoff = ENROLL_BACKOFF_MS.first;
    for (;;) {
      try {
        return await this.enroll();
      } catch (err) {
        if (!(err instanceof EnrollDeferred) || this.#stopping) throw err;
        const wait = (err.retryAfterMs ?? backoff) * (1 + Math.random() * 0.1);
        if (err.retryAfterMs === null) backoff = Math.min(backoff * 2, ENROLL_BACKOFF_MS.max);
        this.#o.log(`${err.message}: trying again in ${Math.round(wait / 1000)} s`);
        await this.#o.sleep(wait);
      }
    }
  }

  async heartbeat(): Promise<HeartbeatAnswer> {
    const res = await this.#api('/agents/heartbeat', { components: { agent: this.version } });
    if (res.status === 429) throw new HeartbeatDeferred(Math.max(1, Number(res.retryAfter) || 60));
    if (res.status !== 200) throw new Error(`heartbeat refused: ${res.status}`);
    const answer = res.body as HeartbeatAnswer;
    this.lastAnswer = answer;
    return answer;
  }

  async #report(offer: Offer, state: 'started' | 'succeeded' | 'failed' | 'rolled_back', error?: string): Promise<void> {
    await this.#api('/agents/update-report', { component: offer.component, fromVersion: this.version, toVersion: offer.version, state, ...(error ? { error } : {}) });
  }

  /**
   * One heartbeat and, when an update is offered (and auto-update is on), its application. Answers
   * what happened, for the loop and for tests.
   */
  async tick(): Promise<{ answer: HeartbeatAnswer; outcome: 'none' | 'succeeded' | 'failed' | 'rolled_back' | 'locked' }> {
    const answer = await this.heartbeat();
    const offer = answer.autoUpdate ? (this.pending ?? answer.update) : null;
    if (!offer) return { answer, outcome: 'none' };
    const outcome = await this.apply(offer);
    if (outcome === 'succeeded') return { answer: await this.heartbeat(), outcome }; // at once, no jitter
    return { answer, outcome };
  }

  /** Applies one offered update (SPEC 8). */
  async apply(offer: Offer): Promise<'succeeded' | 'failed' | 'rolled_back' | 'locked'> {
    const log = this.#o.log;
    if (!this.pending) await this.#report(offer, 'started');
    let data: Buffer;
    try {
      const headers: Record<string, string> = {};
      // Keel serves uploaded builds to device tokens; a release host's URL needs none.
      if (this.#state && offer.url.startsWith(this.#o.server)) headers.authorization = `Bearer ${this.#state.deviceToken}`;
      const res = await fetch(offer.url, { headers });
      if (res.status !== 200) throw new Error(`download answered ${res.status}`);
      data = Buffer.from(await res.arrayBuffer());
    } catch (err) {
      this.pending = null;
      await this.#report(offer, 'failed', `download failed: ${(err as Error).message}`);
      return 'failed';
    }
    const digest = createHash('sha256').update(data).digest('hex');
    if (digest !== offer.sha256.toLowerCase() || data.length !== offer.size) {
      this.pending = null;
      log(`update ${offer.version} refused: SHA-256 mismatch`);
      await this.#report(offer, 'failed', 'checksum mismatch: the download does not match the offered SHA-256');
      return 'failed';
    }
    const bin = this.#o.binaryPath;
    const backup = `${bin}.bak`;
    try {
      if (existsSync(bin)) copyFileSync(bin, backup);
      this.#write(bin, data);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (LOCK_CODES.has(code)) {
        log(`binary locked (${code}): retrying on the next heartbeat`);
        this.pending = offer;
        return 'locked';
      }
      this.pending = null;
      await this.#report(offer, 'failed', `replace failed: ${code}`);
      return 'failed';
    }
    this.pending = null;
    await this.stop();
    if (await this.start()) {
      this.#state = { ...(this.#state as State), version: offer.version };
      this.#save();
      await this.#report({ ...offer }, 'succeeded');
      return 'succeeded';
    }
    log(`update ${offer.version} did not start: rolling back`);
    this.#restore(backup);
    await this.start();
    await this.#report(offer, 'rolled_back', 'the new binary failed to start');
    return 'rolled_back';
  }

  #write(path: string, data: Buffer): void {
    if (this.#o.writeBinary) {
      this.#o.writeBinary(path, data);
      return;
    }
    if (process.platform === 'linux') {
      // Remove first: the running file's inode stays with its process; the new file is a new inode.
      rmSync(path, { force: true });
      writeFileSync(path, data, { mode: 0o755 });
    } else {
      const next = `${path}.new`;
      writeFileSync(next, data, { mode: 0o755 });
      renameSync(next, path);
    }
    chmodSync(path, 0o755);
  }

  #restore(backup: string): void {
    if (!existsSync(backup)) return;
    rmSync(this.#o.binaryPath, { force: true });
    copyFileSync(backup, this.#o.binaryPath);
    chmodSync(this.#o.binaryPath, 0o755);
  }

  /** Starts the binary; true once it printed its first line, false when it exits (or stays silent) first. */
  start(): Promise<boolean> {
    this.#stopping = false;
    return new Promise((resolve) => {
      let settled = false;
      let started = false;
      const child = spawn(this.#o.binaryPath, [], { stdio: ['ignore', 'pipe', 'ignore'] });
      this.#child = child;
      const done = (ok: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(ok);
      };
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        done(false);
      }, this.#o.startTimeoutMs);
      child.stdout.once('data', () => {
        started = true;
        done(true);
      });
      child.once('error', () => done(false));
      child.once('exit', () => {
        done(false);
        if (this.#child === child) this.#child = null;
        // Watchdog: a binary that had started and then exited (a crash) is started again.
        if (!this.#stopping && this.#o.watchdog && started) void this.#recover();
      });
    });
  }

  /** Watchdog: the binary exited on its own; start it again, or the backup if it no longer starts. */
  async #recover(): Promise<void> {
    if (await this.start()) return;
    this.#o.log('binary does not start: restoring the backup');
    this.#restore(`${this.#o.binaryPath}.bak`);
    await this.start();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const child = this.#child;
    this.#child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  }

  /** Runs: enrol, start the binary, heartbeat forever (interval from Keel, plus up to 5% jitter). */
  async run(): Promise<void> {
    await this.enrollWithRetry();
    if (existsSync(this.#o.binaryPath)) await this.start();
    const loop = async (): Promise<void> => {
      let next = 60;
      try {
        next = (await this.tick()).answer.nextHeartbeatSeconds;
      } catch (err) {
        this.#o.log(`heartbeat failed: ${(err as Error).message}`);
        // Keel's per-device limit: wait as long as it says (Retry-After).
        if (err instanceof HeartbeatDeferred) next = err.retryAfterSeconds;
      }
      if (this.#timer === null && this.#stopping) return;
      this.#timer = setTimeout(() => void loop(), next * 1000 * (1 + Math.random() * 0.05));
    };
    await loop();
  }

  async shutdown(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.stop();
  }
}

/** Removes a file if it is there (tests and the CLI clean up with it). */
export function removeIfPresent(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
