/**
 * The reference agent: enrols, heartbeats with jitter, and applies an offered update as
 * docs/specification.md "Agents and updates" says, on real files:
 *
 *   report `started` → check the offer's release signature against the keys pinned at enrolment →
 *   download to a temp file beside the target, hashing as it goes and aborting past the offered
 *   size → size and SHA-256 check (any refusal: report `failed` with the reason, nothing replaced,
 *   the old binary keeps running) → back up the current binary (`<binary>.bak`) → replace it (on
 *   Linux the old file is removed before the new one is moved in: a running executable cannot be
 *   opened for writing) → restart it → the new binary must start (print a line on stdout before
 *   exiting) → report `succeeded` and heartbeat at once, without jitter. A binary that fails to
 *   start is rolled back to the backup, restarted, and reported `rolled_back`. A file-lock error
 *   (EBUSY, ETXTBSY, EPERM, EACCES) keeps the offer and retries it on the next heartbeat.
 *
 * Each component has its own file: `agent` is the managed binary; `helper` and `watchdog` are
 * replaced (with a backup) at their own paths and not restarted here. An offer for a component the
 * agent does not manage is refused.
 *
 * Release keys: the enrolment answer's `releaseKeys` are pinned in the state file; the set changes
 * only through a heartbeat `releaseKeys` statement signed by a pinned key. An agent enrolled without
 * keys (a development Keel) checks size and SHA-256 only.
 *
 * Watchdog mode (`watchdog: true`) restarts the binary when it exits, and restores the backup when
 * the binary no longer starts (after a failed update or a crash).
 *
 * The managed "binary" is any executable; it signals that it started by writing a line to stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, unlinkSync, writeFileSync, writeSync, chmodSync, renameSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { canonicalEntry, isRawKey, keyIdOf, keyListMessage, signerOf } from './release-signature.js';

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
  /**
   * The other components this agent manages, each at its own path (default: the component's name
   * beside the managed binary) with the version installed at first start. An offer for a component
   * not listed here is refused.
   */
  components?: Partial<Record<'helper' | 'watchdog', { path?: string; initialVersion: string }>>;
  /**
   * Moves the verified download (`from`) onto a component's file (`to`); tests inject a lock error.
   * Default: remove, then rename (Linux), or rename over it.
   */
  replaceBinary?: (from: string, to: string) => void;
  /** Waits between enrolment attempts (tests move Keel's clock instead of waiting). */
  sleep?: (ms: number) => Promise<void>;
}

/** A heartbeat answered 429 (per-device limit) or 503 (overloaded): the next one waits `retryAfterSeconds` (Keel's Retry-After). */
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
/** The longest wait a Retry-After may ask for (a larger value, or a date further ahead, waits this long). */
export const ENROLL_RETRY_AFTER_MAX_MS = 3_600_000;
/** Enrolment answers that end the attempts: the key or the request is wrong, and asking again will not change it. */
const DEFINITIVE_REFUSALS = new Set([400, 401, 403, 404, 410, 422]);

/**
 * The wait a Retry-After header asks for, in ms (delta-seconds or an HTTP date), capped at
 * `ENROLL_RETRY_AFTER_MAX_MS`; null when absent or unreadable.
 */
export function retryAfterMs(header: string | null, now = Date.now()): number | null {
  if (header === null) return null;
  const value = header.trim();
  let ms: number;
  if (/^\d+$/.test(value)) ms = Number(value) * 1000;
  else {
    const at = Date.parse(value);
    if (!Number.isFinite(at)) return null;
    ms = Math.max(0, at - now);
  }
  return Math.min(ms, ENROLL_RETRY_AFTER_MAX_MS);
}

/**
 * The interval a heartbeat answer asks for, kept within 1 s to an hour (Keel's longest interval plus
 * its jitter): a forged or broken answer can neither spin the agent against Keel nor silence it.
 */
export function heartbeatSeconds(asked: unknown): number {
  if (typeof asked !== 'number' || !Number.isFinite(asked)) return 60;
  return Math.min(Math.max(asked, 1), 3_660);
}

/**
 * Whether the device token may go with a request to `url`: only to Keel's own origin (scheme, host
 * and port compared parsed, so `https://keel.example.com.attacker.net` is another origin).
 */
export function sameOrigin(url: string, server: string): boolean {
  try {
    const origin = new URL(url).origin;
    return origin !== 'null' && origin === new URL(server).origin;
  } catch {
    return false;
  }
}

interface ApiAnswer {
  status: number;
  body: unknown;
  retryAfter: string | null;
}

interface State {
  deviceId: string;
  deviceToken: string;
  /** The agent component's installed version. */
  version: string;
  /** Installed versions of the other managed components. */
  components?: Record<string, string>;
  /** Release keys pinned at enrolment (base64 of the raw 32 bytes); absent or empty: none. */
  releaseKeys?: string[];
}

export interface Offer {
  component: string;
  version: string;
  url: string;
  sha256: string;
  size: number;
  /** Base64 Ed25519 signature of the canonical manifest entry (docs/decisions.md). */
  signature?: string | null;
  /** The signing key's id (first 8 hex of SHA-256 of the raw key). */
  keyId?: string | null;
}

/** A key-list statement: the release keys to pin, signed by a key already pinned. */
export interface KeyStatement {
  keys: string[];
  signature: string;
}

export interface HeartbeatAnswer {
  nextHeartbeatSeconds: number;
  autoUpdate: boolean;
  update: Offer | null;
  releaseKeys?: KeyStatement | null;
}

type Outcome = 'succeeded' | 'failed' | 'rolled_back' | 'locked';

const LOCK_CODES = new Set(['EBUSY', 'ETXTBSY', 'EPERM', 'EACCES']);

export class Agent {
  readonly #o: Required<Omit<AgentOptions, 'enrollmentKey' | 'replaceBinary'>> & Pick<AgentOptions, 'enrollmentKey' | 'replaceBinary'>;
  #state: State | null = null;
  #child: ChildProcess | null = null;
  #stopping = false;
  #timer: NodeJS.Timeout | null = null;
  /** An offer whose file replacement hit a lock: retried on the next heartbeat. */
  pending: Offer | null = null;
  /** The last heartbeat answer (tests read it). */
  lastAnswer: HeartbeatAnswer | null = null;

  constructor(options: AgentOptions) {
    this.#o = { watchdog: false, startTimeoutMs: 10_000, log: () => undefined, sleep: (ms) => new Promise((r) => setTimeout(r, ms)), components: {}, ...options };
    const paths = [resolve(this.#o.binaryPath), ...Object.keys(this.#o.components).map((c) => resolve(this.pathOf(c) ?? ''))];
    if (new Set(paths).size !== paths.length) throw new Error('each component needs a path of its own');
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

  /** The installed version of a component, or undefined when this agent does not manage it. */
  versionOf(component: string): string | undefined {
    if (component === 'agent') return this.version;
    const managed = this.#o.components[component as 'helper' | 'watchdog'];
    return managed ? (this.#state?.components?.[component] ?? managed.initialVersion) : undefined;
  }

  /** The file of a component, or null when this agent does not manage it. */
  pathOf(component: string): string | null {
    if (component === 'agent') return this.#o.binaryPath;
    const managed = Object.hasOwn(this.#o.components, component) ? this.#o.components[component as 'helper' | 'watchdog'] : undefined;
    return managed ? (managed.path ?? join(dirname(this.#o.binaryPath), component)) : null;
  }

  /** The release keys pinned at enrolment (or by a later signed statement). */
  get releaseKeys(): string[] {
    return [...(this.#state?.releaseKeys ?? [])];
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
   * One enrolment attempt; the identity is kept in the state directory across restarts. Throws an
   * Error on a definitive refusal (400, 401, 403, 404, 410, 422: a wrong, revoked or expired key, a
   * request Keel will never take), `EnrollDeferred` on any other answer or none (429, 408, 5xx, a
   * proxy's error, Keel unreachable).
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
    if (DEFINITIVE_REFUSALS.has(res.status)) throw new Error(`enrolment refused: ${res.status}`);
    if (res.status !== 201) throw new EnrollDeferred(`enrolment refused for now: ${res.status}`, retryAfterMs(res.retryAfter));
    const enrolled = res.body as { deviceId: string; deviceToken: string; releaseKeys?: unknown };
    const keys = enrolled.releaseKeys ?? [];
    // Keys that cannot be read would leave the agent verifying nothing: refuse rather than pin fewer.
    if (!Array.isArray(keys) || !keys.every(isRawKey)) throw new Error('enrolment answer carries release keys this agent cannot read');
    this.#state = { deviceId: enrolled.deviceId, deviceToken: enrolled.deviceToken, version: this.#o.initialVersion, releaseKeys: [...new Set(keys)].sort() };
    this.#save();
    this.#o.log(`enrolled as device ${enrolled.deviceId} (${this.#o.hostname}, ${this.#o.os}/${this.#o.arch}, agent ${this.#o.initialVersion})`);
    if (keys.length > 0) this.#o.log(`pinned release keys ${this.releaseKeys.map(keyIdOf).join(', ')}`);
  }

  /**
   * Enrols, trying again while Keel defers it: after Retry-After (seconds or a date, at most an hour,
   * with up to 10% jitter, so a fleet installed at once spreads out), else after a backoff of 5 s
   * doubling to 5 minutes. Stops only on a definitive refusal (or `shutdown`).
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
    const components: Record<string, string> = { agent: this.version };
    for (const c of Object.keys(this.#o.components)) components[c] = this.versionOf(c) as string;
    const res = await this.#api('/agents/heartbeat', { components });
    // Too many heartbeats (429) or a Keel shedding device requests (503 overloaded): wait as told.
    if (res.status === 429 || res.status === 503) throw new HeartbeatDeferred(Math.max(1, Number(res.retryAfter) || 60));
    if (res.status !== 200) throw new Error(`heartbeat refused: ${res.status}`);
    const answer = res.body as HeartbeatAnswer;
    this.lastAnswer = answer;
    this.#considerKeys(answer.releaseKeys ?? null);
    return answer;
  }

  /**
   * A key-list statement replaces the pinned keys when one of them signed it (two-phase rotation:
   * the new key is added by a statement the old one signs, the old one dropped later). Anything else
   * is ignored and logged: unsigned, signed by an unknown key, an empty or unreadable list, or no key
   * pinned to check it with.
   */
  #considerKeys(statement: KeyStatement | null): void {
    if (!statement || !this.#state) return;
    const { keys, signature } = statement;
    const pinned = this.#state.releaseKeys ?? [];
    if (!Array.isArray(keys) || keys.length === 0 || !keys.every(isRawKey) || typeof signature !== 'string') {
      this.#o.log('release key statement ignored: not a readable, non-empty key list with a signature');
      return;
    }
    const next = [...new Set(keys)].sort();
    if (next.length === pinned.length && next.every((k, i) => k === pinned[i])) return;
    const signer = signerOf(pinned, keyListMessage(keys), signature);
    if (!signer) {
      this.#o.log(pinned.length ? 'release key statement ignored: not signed by a pinned key' : 'release key statement ignored: no key pinned at enrolment');
      return;
    }
    this.#state = { ...this.#state, releaseKeys: next };
    this.#save();
    this.#o.log(`release keys now ${next.map(keyIdOf).join(', ')} (statement signed by ${keyIdOf(signer)})`);
  }

  async #report(offer: Offer, state: 'started' | 'succeeded' | 'failed' | 'rolled_back', error?: string, fromVersion?: string): Promise<void> {
    const from = fromVersion ?? this.versionOf(offer.component) ?? 'unknown';
    await this.#api('/agents/update-report', { component: offer.component, fromVersion: from, toVersion: offer.version, state, ...(error ? { error: error.slice(0, 2000) } : {}) });
  }

  /** Why an offer is refused before anything is downloaded, or null. */
  #refusal(offer: Offer): string | null {
    if (this.pathOf(offer.component) === null) return `component ${JSON.stringify(offer.component.slice(0, 40))} is not managed by this agent`;
    if (!Number.isSafeInteger(offer.size) || offer.size < 0 || typeof offer.sha256 !== 'string' || !/^[0-9a-fA-F]{64}$/.test(offer.sha256)) {
      return 'malformed offer: size or SHA-256 unreadable';
    }
    const pinned = this.#state?.releaseKeys ?? [];
    if (pinned.length === 0) return null; // enrolled without keys: size and SHA-256 only
    if (typeof offer.signature !== 'string' || offer.signature === '') return 'signature missing: this agent pins release keys and the offer is unsigned';
    const keyId = typeof offer.keyId === 'string' && /^[0-9a-f]{8}$/.test(offer.keyId) ? offer.keyId : null;
    const candidates = offer.keyId == null ? pinned : pinned.filter((k) => keyIdOf(k) === keyId);
    if (candidates.length === 0) return `signature by an unknown key${keyId ? ` ${keyId}` : ''}: not one of the pinned release keys`;
    // The platform signed over is this agent's own: a build signed for another platform does not verify.
    const entry = canonicalEntry({ arch: this.#o.arch, component: offer.component, os: this.#o.os, sha256: offer.sha256, size: offer.size, version: offer.version });
    if (!signerOf(candidates, entry, offer.signature)) return 'signature invalid: the offer does not verify with the pinned release keys';
    return null;
  }

  /**
   * Downloads an offer to `dest`, hashing as it goes and aborting as soon as more than the offered
   * size arrives (the file never holds more). Answers why it is refused, or null.
   */
  async #download(offer: Offer, dest: string): Promise<string | null> {
    const headers: Record<string, string> = {};
    // Keel serves uploaded builds to device tokens; the token goes to Keel's own origin only, and a
    // redirect from there is not followed (a release host's URL needs no token).
    const authorized = this.#state !== null && sameOrigin(offer.url, this.#o.server);
    if (authorized) headers.authorization = `Bearer ${(this.#state as State).deviceToken}`;
    const abort = new AbortController();
    let res: Response;
    try {
      res = await fetch(offer.url, { headers, signal: abort.signal, redirect: authorized ? 'manual' : 'follow' });
    } catch (err) {
      return `download failed: ${(err as Error).message}`;
    }
    if (res.status !== 200 || !res.body) {
      abort.abort();
      return `download failed: answered ${res.status}`;
    }
    const announced = res.headers.get('content-length');
    if (announced !== null && Number(announced) > offer.size) {
      abort.abort();
      return `size mismatch: the download announces ${Number(announced)} bytes, the offer ${offer.size}`;
    }
    const hash = createHash('sha256');
    let received = 0;
    const fd = openSync(dest, 'w', 0o700);
    let over = false;
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        received += chunk.byteLength;
        if (received > offer.size) {
          over = true; // leaving the loop cancels the body; the abort below closes the connection
          break;
        }
        hash.update(chunk);
        writeSync(fd, chunk);
      }
    } catch (err) {
      if (!over) return `download failed: ${(err as Error).message}`;
    } finally {
      closeSync(fd);
      if (over) abort.abort();
    }
    if (over) return `size mismatch: the download goes past the offered ${offer.size} bytes`;
    if (received !== offer.size) return `size mismatch: ${received} bytes received, ${offer.size} offered`;
    if (hash.digest('hex') !== offer.sha256.toLowerCase()) return 'checksum mismatch: the download does not match the offered SHA-256';
    return null;
  }

  /**
   * One heartbeat and, when an update is offered (and auto-update is on), its application. Answers
   * what happened, for the loop and for tests.
   */
  async tick(): Promise<{ answer: HeartbeatAnswer; outcome: 'none' | Outcome }> {
    const answer = await this.heartbeat();
    const offer = answer.autoUpdate ? (this.pending ?? answer.update) : null;
    if (!offer) return { answer, outcome: 'none' };
    const outcome = await this.apply(offer);
    if (outcome === 'succeeded') return { answer: await this.heartbeat(), outcome }; // at once, no jitter
    return { answer, outcome };
  }

  /** Applies one offered update (docs/specification.md "Agents and updates"). */
  async apply(offer: Offer): Promise<Outcome> {
    const log = this.#o.log;
    const fromVersion = this.versionOf(offer.component);
    if (!this.pending) await this.#report(offer, 'started');
    const refuse = async (reason: string): Promise<'failed'> => {
      this.pending = null;
      log(`update ${offer.component} ${offer.version} refused: ${reason}`);
      await this.#report(offer, 'failed', reason, fromVersion);
      return 'failed';
    };
    const before = this.#refusal(offer);
    if (before) return refuse(before);
    const target = this.pathOf(offer.component) as string;
    const download = `${target}.download`;
    let refused: string | null;
    try {
      refused = await this.#download(offer, download);
    } catch (err) {
      refused = `download failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
    }
    if (refused) {
      rmSync(download, { force: true });
      return refuse(refused);
    }
    const backup = `${target}.bak`;
    try {
      if (existsSync(target)) copyFileSync(target, backup);
      this.#replace(download, target);
    } catch (err) {
      rmSync(download, { force: true });
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (LOCK_CODES.has(code)) {
        log(`${offer.component} binary locked (${code}): retrying on the next heartbeat`);
        this.pending = offer;
        return 'locked';
      }
      return refuse(`replace failed: ${code}`);
    }
    this.pending = null;
    if (offer.component !== 'agent') {
      // A helper or watchdog: its own file replaced; this agent does not run it.
      this.#state = { ...(this.#state as State), components: { ...this.#state?.components, [offer.component]: offer.version } };
      this.#save();
      await this.#report(offer, 'succeeded', undefined, fromVersion);
      log(`updated ${offer.component} ${fromVersion ?? '?'} -> ${offer.version}`);
      return 'succeeded';
    }
    await this.stop();
    if (await this.start()) {
      this.#state = { ...(this.#state as State), version: offer.version };
      this.#save();
      await this.#report(offer, 'succeeded', undefined, fromVersion);
      log(`updated agent ${fromVersion ?? '?'} -> ${offer.version}`);
      return 'succeeded';
    }
    log(`update ${offer.version} did not start: rolling back`);
    this.#restore(backup);
    await this.start();
    await this.#report(offer, 'rolled_back', 'the new binary failed to start');
    return 'rolled_back';
  }

  #replace(from: string, to: string): void {
    if (this.#o.replaceBinary) {
      this.#o.replaceBinary(from, to);
      return;
    }
    chmodSync(from, 0o755);
    // Linux: remove first; the running file's inode stays with its process, the new file is a new inode.
    if (process.platform === 'linux') rmSync(to, { force: true });
    renameSync(from, to);
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
      let spread = 0.05;
      try {
        next = heartbeatSeconds((await this.tick()).answer.nextHeartbeatSeconds);
      } catch (err) {
        this.#o.log(`heartbeat failed: ${(err as Error).message}`);
        // Keel's per-device limit or its overload shedding: wait as long as it says (Retry-After), with
        // a wider jitter so a fleet turned away together does not come back together.
        if (err instanceof HeartbeatDeferred) {
          next = err.retryAfterSeconds;
          spread = 0.5;
        }
      }
      if (this.#timer === null && this.#stopping) return;
      this.#timer = setTimeout(() => void loop(), next * 1000 * (1 + Math.random() * spread));
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
