/**
 * The reference agent: enrols, heartbeats with jitter, and applies an offered update as
 * docs/specification.md "Agents and updates" says, on real files:
 *
 *   report `started` → check the offer's release signature against the keys pinned at enrolment →
 *   download to a temp file beside the target, hashing as it goes and aborting past the offered
 *   size → size and SHA-256 check (any refusal: report `failed` with the reason, nothing replaced,
 *   the old binary keeps running) → back up the current binary (`<binary>.bak`) → replace it (on
 *   Linux the old file is removed before the new one is moved in: a running executable cannot be
 *   opened for writing) → restart it → health check (below) → report `succeeded` and heartbeat at
 *   once, without jitter. A build that fails its health check is rolled back to the backup,
 *   restarted, and reported `rolled_back` with the reason. A file-lock error (EBUSY, ETXTBSY, EPERM,
 *   EACCES) keeps the offer and retries it on the next heartbeat.
 *
 * Health check of a new agent binary (docs/decisions.md "Agent health-checked updates"): within
 * `healthyWithinMs` (default 150 s) it must start (print a line on stdout), pass its self-check
 * (`<binary> --self-check` prints a line `healthy` and exits 0; `unhealthy: <reason>` otherwise),
 * and reach Keel (a heartbeat reporting the new version answered 200); then it must stay healthy
 * for `soakMs` (default 60 s: it keeps running and the heartbeats keep being answered). Time comes
 * from the injectable `clock`, so tests move it instead of waiting.
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
 * the binary no longer starts (after a failed update or a crash). During a health check it stands
 * down: the check owns the new binary and its rollback.
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
  /** How long a new agent binary has to start, pass its self-check and reach Keel (ms; default 150 s). */
  healthyWithinMs?: number;
  /** How long it must then stay healthy before the update is reported `succeeded` (ms; default 60 s; 0: no soak). */
  soakMs?: number;
  /** The time of start timeouts and health checks (default: the system's; tests move their own). */
  clock?: AgentClock;
}

/** The agent's time: `now` and one-shot timers. */
export interface AgentClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: AgentClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Health-check defaults (docs/decisions.md "Agent health-checked updates"). */
export const HEALTHY_WITHIN_MS = 150_000;
export const SOAK_MS = 60_000;
/** During a health check: the pause between heartbeats, and the longest wait for one answer. */
const HEALTH_HEARTBEAT_MS = 15_000;

/** The phases of a health check (tests watch them). */
export type HealthPhase = 'start' | 'self-check' | 'reach' | 'soak';

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
  /**
   * A health check under way (the new binary is on disk, the backup holds `fromVersion`): a restart
   * finds it and rolls back. With `reason`: rolled back, the report not yet taken by Keel.
   */
  checking?: { version: string; fromVersion: string; reason?: string };
  /**
   * The agent version in `<binary>.bak` (the one before the last update that succeeded): when the
   * watchdog has to put the backup back, this is the version that runs again.
   */
  backupVersion?: string;
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

/** How a process ended, for a reason: `exit code 3`, `signal SIGKILL`. */
const endOf = (code: number | null, signal: NodeJS.Signals | null) => (signal ? `signal ${signal}` : `exit code ${code ?? '?'}`);
/** Text a binary printed, made safe for a log line and a report: printable, one line, at most 200 characters. */
const printable = (text: string) => text.replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;

export class Agent {
  readonly #o: Required<Omit<AgentOptions, 'enrollmentKey' | 'replaceBinary'>> & Pick<AgentOptions, 'enrollmentKey' | 'replaceBinary'>;
  #state: State | null = null;
  #child: ChildProcess | null = null;
  /** Resolves with how the running child ended (`exit code 3`), once it does. */
  #childEnd: Promise<string> | null = null;
  #stopping = false;
  #shuttingDown = false;
  #timer: NodeJS.Timeout | null = null;
  /** The phase of the health check under way (the watchdog stands down meanwhile), or null. */
  #phase: HealthPhase | null = null;
  /** Ends the health check under way (shutdown). */
  #interrupt: ((reason: string) => void) | null = null;
  /** The apply under way, which a shutdown waits for. */
  #applying: Promise<unknown> | null = null;
  /** An offer whose file replacement hit a lock: retried on the next heartbeat. */
  pending: Offer | null = null;
  /** The last heartbeat answer (tests read it). */
  lastAnswer: HeartbeatAnswer | null = null;

  constructor(options: AgentOptions) {
    this.#o = {
      watchdog: false, startTimeoutMs: 10_000, log: () => undefined, sleep: (ms) => new Promise((r) => setTimeout(r, ms)), components: {},
      healthyWithinMs: HEALTHY_WITHIN_MS, soakMs: SOAK_MS, clock: systemClock, ...options,
    };
    if (!(this.#o.healthyWithinMs > 0) || !(this.#o.soakMs >= 0)) throw new Error('healthyWithinMs must be positive and soakMs not negative');
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

  /** The phase of the health check of a new binary under way, or null. */
  get healthPhase(): HealthPhase | null {
    return this.#phase;
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

  async heartbeat(agentVersion = this.version): Promise<HeartbeatAnswer> {
    const components: Record<string, string> = { agent: agentVersion };
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

  /** Sends an update report; answers Keel's status. */
  async #report(offer: Pick<Offer, 'component' | 'version'>, state: 'started' | 'succeeded' | 'failed' | 'rolled_back', error?: string, fromVersion?: string): Promise<number> {
    const from = fromVersion ?? this.versionOf(offer.component) ?? 'unknown';
    return (await this.#api('/agents/update-report', { component: offer.component, fromVersion: from, toVersion: offer.version, state, ...(error ? { error: error.slice(0, 2000) } : {}) })).status;
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
    await this.recoverInterrupted();
    const answer = await this.heartbeat();
    const offer = answer.autoUpdate ? (this.pending ?? answer.update) : null;
    if (!offer) return { answer, outcome: 'none' };
    const outcome = await this.apply(offer);
    // At once, no jitter: the version now installed (the new one, or the previous one again).
    if ((outcome === 'succeeded' || outcome === 'rolled_back') && !this.#shuttingDown) return { answer: await this.heartbeat(), outcome };
    return { answer, outcome };
  }

  /** Applies one offered update (docs/specification.md "Agents and updates"). */
  async apply(offer: Offer): Promise<Outcome> {
    const applying = this.#apply(offer);
    this.#applying = applying;
    try {
      return await applying;
    } finally {
      if (this.#applying === applying) this.#applying = null;
    }
  }

  async #apply(offer: Offer): Promise<Outcome> {
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
    // Recorded before the new binary runs: an agent killed during the check rolls back when it starts again.
    this.#state = { ...(this.#state as State), checking: { version: offer.version, fromVersion: fromVersion ?? this.version } };
    this.#save();
    const unhealthy = await this.#healthCheck(offer.version);
    if (unhealthy === null) {
      this.#phase = null;
      const { checking: _, ...rest } = this.#state;
      this.#state = { ...rest, version: offer.version, backupVersion: fromVersion ?? rest.version };
      this.#save();
      await this.#report(offer, 'succeeded', undefined, fromVersion);
      log(`updated agent ${fromVersion ?? '?'} -> ${offer.version}`);
      return 'succeeded';
    }
    log(`update ${offer.version} unhealthy (${unhealthy}): rolling back to ${fromVersion ?? '?'}`);
    await this.stop();
    this.#restore(backup);
    // A shutdown leaves `checking` in the state: the next start reports the rollback (`recoverInterrupted`).
    if (this.#shuttingDown) {
      this.#phase = null;
      return 'rolled_back';
    }
    await this.start();
    this.#phase = null;
    await this.#finishRollback(offer.version, unhealthy);
    return 'rolled_back';
  }

  /**
   * Reports a rollback (the previous binary is back) and then clears the health check from the
   * state; the reason is kept there until Keel took the report, so a report that could not be sent
   * goes with the next heartbeat.
   */
  async #finishRollback(version: string, reason: string): Promise<void> {
    const state = this.#state as State;
    const fromVersion = state.checking?.fromVersion ?? state.version;
    this.#state = { ...state, checking: { version, fromVersion, reason } };
    this.#save();
    const status = await this.#report({ component: 'agent', version }, 'rolled_back', reason, fromVersion);
    // Keel busy or away: kept and sent again; any other answer would not change by asking again.
    if (status === 408 || status === 429 || status >= 500) throw new Error(`rollback report deferred: ${status} (sent again before the next heartbeat)`);
    if (status !== 204) this.#o.log(`rollback report refused: ${status}`);
    const { checking: _, ...rest } = this.#state;
    this.#state = rest;
    this.#save();
  }

  /**
   * A health check left in the state: by an agent stopped or killed during it (the previous binary is
   * put back, the rollback reported), or a rollback whose report did not reach Keel (reported now).
   * `run()` calls it before starting the binary, `tick()` before each heartbeat.
   */
  async recoverInterrupted(): Promise<void> {
    const checking = this.#state?.checking;
    if (!checking || this.#phase !== null) return;
    if (checking.reason === undefined) {
      this.#o.log(`the health check of agent ${checking.version} was interrupted: rolling back to ${checking.fromVersion}`);
      this.#restore(`${this.#o.binaryPath}.bak`);
    }
    await this.#finishRollback(checking.version, checking.reason ?? 'interrupted: the agent stopped during the health check');
  }

  /**
   * The health check of a new agent binary (docs/decisions.md "Agent health-checked updates"): null
   * when it is healthy, else why not. Watches the binary from its start to the end of the soak.
   */
  async #healthCheck(version: string): Promise<string | null> {
    const { clock, healthyWithinMs, soakMs } = this.#o;
    const deadline = clock.now() + healthyWithinMs;
    const left = () => Math.max(0, deadline - clock.now());
    const interrupted = new Promise<string>((resolve) => (this.#interrupt = resolve));
    try {
      if (this.#shuttingDown) return 'interrupted: the agent stopped during the health check';
      this.#phase = 'start';
      const launched = await Promise.race([this.#launch(Math.min(this.#o.startTimeoutMs, healthyWithinMs)), interrupted]);
      if (typeof launched === 'string') return launched;
      if (!launched.ok) return launched.reason;
      const ended = (this.#childEnd as Promise<string>).then((how) => `exited at start (${how})`);
      this.#phase = 'self-check';
      const checked = await Promise.race([this.#selfCheck(left()), ended, interrupted]);
      if (checked !== null) return checked;
      this.#phase = 'reach';
      for (;;) {
        const reached = await this.#healthBeat(version, Math.min(HEALTH_HEARTBEAT_MS, left()), ended, interrupted);
        if (reached.outcome === 'ended') return reached.reason;
        if (reached.outcome === 'ok') {
          if (clock.now() <= deadline) break;
          return `did not reach Keel within ${seconds(healthyWithinMs)} (answered too late)`;
        }
        if (left() === 0) return `did not reach Keel within ${seconds(healthyWithinMs)} (${reached.reason})`;
        const waited = await this.#wait(Math.min(Math.max(HEALTH_HEARTBEAT_MS, reached.retryAfterMs), left()), ended, interrupted);
        if (waited !== null) return waited;
      }
      this.#phase = 'soak';
      this.#o.log(`agent ${version} is healthy: soaking for ${seconds(soakMs)}`);
      const crashed = (this.#childEnd as Promise<string>).then((how) => `crashed during soak (${how})`);
      const soakEnd = clock.now() + soakMs;
      while (clock.now() < soakEnd) {
        const waited = await this.#wait(Math.min(HEALTH_HEARTBEAT_MS, soakEnd - clock.now()), crashed, interrupted);
        if (waited !== null) return waited;
        const beat = await this.#healthBeat(version, HEALTH_HEARTBEAT_MS, crashed, interrupted);
        if (beat.outcome === 'ended') return beat.reason;
        // Keel deferring a heartbeat (429, 503) is Keel's load, not the build's fault.
        if (beat.outcome === 'failed' && !beat.deferred) return `lost Keel during soak (${beat.reason})`;
      }
      return this.running ? null : 'crashed during soak';
    } finally {
      this.#interrupt = null;
    }
  }

  /**
   * One heartbeat of a health check, reporting the new version: answered (`ok`), not (`failed`, with
   * why, and whether Keel deferred it), or the check ended meanwhile (`ended`: the binary exited, a
   * shutdown). No answer within `timeoutMs` is a failure.
   */
  async #healthBeat(version: string, timeoutMs: number, ...ends: Promise<string>[]): Promise<
    { outcome: 'ok' } | { outcome: 'failed'; reason: string; deferred: boolean; retryAfterMs: number } | { outcome: 'ended'; reason: string }
  > {
    const beat = this.heartbeat(version).then(
      () => ({ outcome: 'ok' as const }),
      (err: unknown) => ({
        outcome: 'failed' as const, reason: printable((err as Error).message), deferred: err instanceof HeartbeatDeferred,
        retryAfterMs: err instanceof HeartbeatDeferred ? err.retryAfterSeconds * 1000 : 0,
      }),
    );
    let handle: unknown;
    const timeout = new Promise<{ outcome: 'failed'; reason: string; deferred: false; retryAfterMs: 0 }>((resolve) => {
      handle = this.#o.clock.setTimeout(() => resolve({ outcome: 'failed', reason: `no answer within ${seconds(timeoutMs)}`, deferred: false, retryAfterMs: 0 }), timeoutMs);
    });
    try {
      return await Promise.race([beat, timeout, ...ends.map((e) => e.then((reason) => ({ outcome: 'ended' as const, reason })))]);
    } finally {
      this.#o.clock.clearTimeout(handle);
    }
  }

  /** Waits `ms` on the agent's clock: null when the time passed, else the reason one of `ends` gave first. */
  async #wait(ms: number, ...ends: Promise<string>[]): Promise<string | null> {
    let handle: unknown;
    const elapsed = new Promise<null>((resolve) => {
      handle = this.#o.clock.setTimeout(() => resolve(null), ms);
    });
    try {
      return await Promise.race([elapsed, ...ends]);
    } finally {
      this.#o.clock.clearTimeout(handle);
    }
  }

  /**
   * The self-check: `<binary> --self-check` must print a line `healthy` and exit 0 within `timeoutMs`.
   * Null when it passed, else `self-check failed: <its "unhealthy: " reason, or what it did>`.
   */
  #selfCheck(timeoutMs: number): Promise<string | null> {
    return new Promise((resolve) => {
      let out = '';
      let settled = false;
      const child = spawn(this.#o.binaryPath, ['--self-check'], { stdio: ['ignore', 'pipe', 'ignore'] });
      const done = (result: string | null) => {
        if (settled) return;
        settled = true;
        this.#o.clock.clearTimeout(timer);
        resolve(result === null ? null : `self-check failed: ${result}`);
      };
      const timer = this.#o.clock.setTimeout(() => {
        child.kill('SIGKILL');
        done(`no answer within ${seconds(timeoutMs)}`);
      }, timeoutMs);
      child.stdout.on('data', (chunk: Buffer) => {
        if (out.length < 4096) out += chunk.toString('utf8');
      });
      child.once('error', (err) => done(`could not run it (${(err as NodeJS.ErrnoException).code ?? err.message})`));
      child.once('close', (code, signal) => {
        const lines = out.split(/\r?\n/).map((l) => l.trim());
        const unhealthy = lines.find((l) => /^unhealthy:/i.test(l));
        if (code === 0 && !unhealthy && lines.includes('healthy')) return done(null);
        if (unhealthy) return done(printable(unhealthy.replace(/^unhealthy:\s*/i, '')) || `unhealthy (${endOf(code, signal)})`);
        done(code === 0 ? 'it did not print "healthy"' : `${endOf(code, signal)} without a reason`);
      });
    });
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

  /** Puts `backup` in place of the binary; false when there is no backup. */
  #restore(backup: string): boolean {
    if (!existsSync(backup)) return false;
    rmSync(this.#o.binaryPath, { force: true });
    copyFileSync(backup, this.#o.binaryPath);
    chmodSync(this.#o.binaryPath, 0o755);
    return true;
  }

  /** Starts the binary; true once it printed its first line, false when it exits (or stays silent) first. */
  async start(): Promise<boolean> {
    return (await this.#launch(this.#o.startTimeoutMs)).ok;
  }

  /** Starts the binary: ok once it printed its first line within `timeoutMs`, else why not. */
  #launch(timeoutMs: number): Promise<{ ok: true } | { ok: false; reason: string }> {
    this.#stopping = false;
    return new Promise((resolve) => {
      let settled = false;
      let started = false;
      const child = spawn(this.#o.binaryPath, [], { stdio: ['ignore', 'pipe', 'ignore'] });
      this.#child = child;
      this.#childEnd = new Promise((ended) => child.once('exit', (code, signal) => ended(endOf(code, signal))));
      const done = (result: { ok: true } | { ok: false; reason: string }) => {
        if (settled) return;
        settled = true;
        this.#o.clock.clearTimeout(timer);
        resolve(result);
      };
      const timer = this.#o.clock.setTimeout(() => {
        child.kill('SIGKILL');
        done({ ok: false, reason: `did not start within ${seconds(timeoutMs)} (no line on stdout)` });
      }, timeoutMs);
      child.stdout.once('data', () => {
        started = true;
        done({ ok: true });
      });
      child.once('error', (err) => done({ ok: false, reason: `could not be started (${(err as NodeJS.ErrnoException).code ?? err.message})` }));
      child.once('exit', (code, signal) => {
        done({ ok: false, reason: `exited at start (${endOf(code, signal)})` });
        if (this.#child === child) this.#child = null;
        // Watchdog: a binary that had started and then exited (a crash) is started again, except
        // during a health check, whose own rollback decides what runs next.
        if (!this.#stopping && this.#o.watchdog && started && this.#phase === null) {
          this.#o.log(`binary exited (${endOf(code, signal)}): restarting it`);
          void this.#recover();
        }
      });
    });
  }

  /**
   * Watchdog: the binary exited on its own; start it again, or the backup if it no longer starts.
   * A backup put back after an update that had succeeded runs the version before it: the state says
   * so (heartbeats report the version that runs), and the update is reported `rolled_back` before the
   * next heartbeat (through the state's `checking`, as a rollback whose report is still due), so Keel
   * counts the failure and does not offer that version to this device again until update-now.
   */
  async #recover(): Promise<void> {
    if (await this.start()) return;
    this.#o.log('binary does not start: restoring the backup');
    if (!this.#restore(`${this.#o.binaryPath}.bak`)) return;
    const state = this.#state;
    if (state?.backupVersion && state.backupVersion !== state.version) {
      const broken = state.version;
      const reason = `the watchdog restored ${state.backupVersion}: ${broken} no longer starts`;
      this.#o.log(`agent ${broken} no longer starts: ${state.backupVersion} runs again`);
      this.#state = { ...state, version: state.backupVersion, checking: { version: broken, fromVersion: state.backupVersion, reason } };
      this.#save();
    }
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
    await this.recoverInterrupted();
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

  /** Stops the loop and the binary; a health check under way ends with the previous binary back on disk. */
  async shutdown(): Promise<void> {
    this.#shuttingDown = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#interrupt?.('interrupted: the agent stopped during the health check');
    if (this.#phase !== null) await this.#applying?.catch(() => undefined);
    await this.stop();
  }
}

/** Removes a file if it is there (tests and the CLI clean up with it). */
export function removeIfPresent(path: string): void {
  if (existsSync(path)) unlinkSync(path);
}
