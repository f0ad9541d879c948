import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createRequire } from 'node:module';
import { AppError, platformError } from './http/errors.js';
import { activeTracer, childSpan, endWhenSettled } from './tracing/index.js';

/**
 * Argon2id on a pool of worker threads of its own, one per core up to 4 (docs/decisions.md
 * "Cost on the request path…", Password hashing threads).
 *
 * @node-rs/argon2's async functions run on libuv's shared pool (4 threads). On a machine with fewer
 * cores than that, four 19 MiB hashes take turns on the cores and evict each other's memory: on 2
 * cores, verifies/s rose from ~130 to ~145 with one hashing thread per core. And every other user of
 * libuv's pool (DNS lookups for webhooks and SMTP, file system, WebCrypto) waited behind a queue of
 * hashes during a wave of logins. Here each worker runs the library's synchronous functions. The
 * backlog waits here, in order; each worker holds up to WORKER_JOBS (one hashing, the next ready), so
 * a worker starts its next hash without waiting for the main thread.
 *
 * While the API is saturated (`hashesYieldTo`), hashing yields to it: one hash at a time, each
 * followed by a pause (YIELD_PAUSE_PER_HASH) (docs/decisions.md "Speed: embedded backend and floods",
 * Hashing yields to a saturated API).
 */

interface Job {
  id: number;
  request: Request;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

interface PoolWorker {
  worker: Worker;
  pending: Map<number, Job>;
  /** Takes the worker out of the pool and fails its jobs in hand (once). */
  fail: (err: Error) => void;
}

type Request = { op: 'hash'; password: string } | { op: 'verify'; hash: string; password: string } | { op: 'hold'; gate: SharedArrayBuffer };

const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { hashSync, verifySync } = require(workerData.argon2);
if (workerData.nice > 0) {
  // Linux: setpriority on a thread id sets that thread's nice value alone (HASH_THREAD_NICE).
  try {
    const tid = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
    require('node:os').setPriority(tid, workerData.nice);
  } catch {}
}
parentPort.on('message', ({ id, op, hash, password, gate }) => {
  if (op === 'hold') {
    // Tests: occupy this thread like a hash that does not end until the gate opens.
    Atomics.wait(new Int32Array(gate), 0, 0);
    parentPort.postMessage({ id, value: true });
    return;
  }
  const started = performance.now();
  try {
    const value = op === 'hash' ? hashSync(password) : verifySync(hash, password);
    parentPort.postMessage({ id, value, ms: performance.now() - started });
  } catch (err) {
    parentPort.postMessage({ id, error: String((err && err.message) || err), ms: performance.now() - started });
  }
});
`;

/**
 * One per core, at most 4 (what libuv's pool gave hashing before): Node 20 counts the host's cores,
 * not a container's CPU quota, and each hash holds 19 MiB, so a small container on a large host
 * must not start dozens. Several Keel processes on one machine each have their own pool.
 */
export const HASH_THREADS = Math.min(4, Math.max(1, availableParallelism()));

/**
 * A worker died with jobs in hand. Unlike an error the library reports (a malformed hash), this says
 * nothing about the password: callers must not count it as a wrong one.
 */
export class HashWorkerLost extends Error {
  constructor(reason: string) {
    super(`argon2 worker lost: ${reason}`);
    this.name = 'HashWorkerLost';
  }
}

/** Hashes in hand per hashing thread before new ones are refused, unless HASH_QUEUE_MAX says otherwise. */
export const HASH_QUEUE_PER_THREAD = 16;

/** Seconds a refused caller is told to wait (`Retry-After`): a full queue drains in about a second on 2 cores. */
export const HASH_RETRY_AFTER_SECONDS = 1;

/**
 * The hash queue is full: the request is refused at once (503 `overloaded`, `Retry-After`) instead of
 * waiting behind seconds of hashes (docs/decisions.md "Production readiness"). Like HashWorkerLost it
 * says nothing about the password: callers must not count it as a wrong one.
 */
export class HashQueueFull extends AppError {
  constructor() {
    const { status, code, message, details, headers } = platformError('overloaded', { headers: { 'Retry-After': String(HASH_RETRY_AFTER_SECONDS) } });
    super(status, code, message, details, headers);
  }
}

const workers: PoolWorker[] = [];
let queueMax = HASH_THREADS * HASH_QUEUE_PER_THREAD;
let threadNice = 0;

/**
 * The nice value of hashing threads started from now on (HASH_THREAD_NICE, Linux; 0 leaves them as
 * the process): above 0 the event loop (reads, heartbeats) gets a core before a hash does when
 * both wait, and the hashes still use every idle core.
 */
export function setHashThreadNice(nice: number): void {
  threadNice = nice;
}
let inHand = 0;
let refused = 0;

/**
 * The most hashes this process holds at once (queued or running, all threads together); beyond it
 * `argon2Hash`/`argon2Verify` reject with HashQueueFull. One pool per process: the last Keel built
 * sets it (HASH_QUEUE_MAX; 0 or undefined for HASH_THREADS × HASH_QUEUE_PER_THREAD).
 */
export function setHashQueueMax(max: number | undefined): void {
  queueMax = max && max > 0 ? max : HASH_THREADS * HASH_QUEUE_PER_THREAD;
}

/** Hashes queued or running now (the `keel_hash_queue_depth` gauge). */
export function hashQueueDepth(): number {
  return inHand;
}

/** Hashes refused since the process started (`keel_hash_refused_total`). */
export function hashRefusals(): number {
  return refused;
}

/** The bound in force (`keel_hash_queue_capacity`). */
export function hashQueueMax(): number {
  return queueMax;
}

/** Throws HashQueueFull when a new hash would be refused: lets a login say so before its database work. */
export function assertHashCapacity(): void {
  if (inHand >= queueMax) {
    refused++;
    throw new HashQueueFull();
  }
}
let early: HashQueueFull | undefined;

/**
 * The refusal of a request that would hash while the queue is full, or null: asked before the request
 * is read (platform/http/admission.ts), so a refused login costs no body read and no new error object.
 */
export function hashAdmission(): AppError | null {
  if (inHand < queueMax) return null;
  refused++;
  return (early ??= new HashQueueFull());
}
let argon2Path: string | undefined;
let nextId = 0;

/** Jobs one worker holds at once while the API is not saturated: one hashing, the next ready. */
export const WORKER_JOBS = 2;

/**
 * While yielding, each hash is followed by a pause this many times as long as it took: hashing takes at
 * most a quarter of one core. Measured (bench/README "Hashing yields to a saturated API"): reads beside
 * a flood of logins kept 0.47-0.70 of their rate at a pause of 1, 0.53-0.58 at 2, 0.69-0.88 at 3.
 */
export const YIELD_PAUSE_PER_HASH = 3;

/** Hashes admitted and not yet given to a worker, oldest first. */
const waiting: Job[] = [];
/** Asked before each hash starts: any true means the API is saturated and hashing yields to it. */
const yieldsTo = new Set<() => boolean>();
/** While yielding, the next hash starts no earlier than this (`performance.now()`). */
let nextStartAt = 0;
let paced: NodeJS.Timeout | undefined;

/**
 * Hashing yields while `saturated()` answers true (a Keel passes its `requests.saturated`): one hash
 * at a time, then a pause YIELD_PAUSE_PER_HASH times as long as that hash took, so hashing takes at
 * most a quarter of one core and the event loop (with the clients beside it) keeps the rest.
 * Otherwise every thread hashes at full speed. A flood of logins then costs the API's reads and
 * heartbeats a bounded share, and the logins still admitted are answered (more slowly). Returns the
 * function that ends it (the Keel's close).
 */
export function hashesYieldTo(saturated: () => boolean): () => void {
  yieldsTo.add(saturated);
  return () => {
    yieldsTo.delete(saturated);
    dispatch();
  };
}

function yielding(): boolean {
  for (const saturated of yieldsTo) if (saturated()) return true;
  return false;
}

function start(): PoolWorker {
  // Resolved with the first hash, not at import (start-up).
  argon2Path ??= createRequire(import.meta.url).resolve('@node-rs/argon2');
  const worker = new Worker(WORKER, { eval: true, workerData: { argon2: argon2Path, nice: threadNice } });
  const entry: PoolWorker = { worker, pending: new Map(), fail: () => undefined };
  // The pool never keeps a process alive on its own.
  worker.unref();
  worker.on('message', (msg: { id: number; value?: unknown; error?: string; ms?: number }) => {
    const job = entry.pending.get(msg.id);
    if (!job) return;
    entry.pending.delete(msg.id);
    if (msg.ms !== undefined) nextStartAt = performance.now() + msg.ms * YIELD_PAUSE_PER_HASH;
    if (msg.error !== undefined) job.reject(new Error(msg.error));
    else job.resolve(msg.value);
    dispatch();
  });
  entry.fail = (err: Error) => {
    const at = workers.indexOf(entry);
    if (at >= 0) workers.splice(at, 1);
    for (const job of entry.pending.values()) job.reject(err);
    entry.pending.clear();
    // What waits here is not lost with the worker: new workers take it.
    if (waiting.length > 0) queueMicrotask(dispatch);
  };
  worker.on('error', (err) => entry.fail(new HashWorkerLost(err.message)));
  worker.on('exit', (code) => entry.fail(new HashWorkerLost(`exited with code ${code}`)));
  return entry;
}

function leastBusy(): PoolWorker {
  while (workers.length < HASH_THREADS) workers.push(start());
  let target = workers[0] as PoolWorker;
  for (const w of workers) if (w.pending.size < target.pending.size) target = w;
  return target;
}

function post(target: PoolWorker, job: Job): void {
  target.pending.set(job.id, job);
  target.worker.postMessage({ id: job.id, ...job.request });
}

/** Gives waiting hashes to workers: up to WORKER_JOBS each, or one at a time, paced, while yielding. */
function dispatch(): void {
  while (waiting.length > 0) {
    const target = leastBusy();
    if (yielding()) {
      if (workers.some((w) => w.pending.size > 0)) return; // its answer dispatches again
      const wait = nextStartAt - performance.now();
      if (wait > 0) {
        paced ??= setTimeout(() => {
          paced = undefined;
          dispatch();
        }, Math.ceil(wait)).unref();
        return;
      }
    } else if (target.pending.size >= WORKER_JOBS) return;
    post(target, waiting.shift() as Job);
  }
}

/**
 * Admits a job (or refuses it: the queue bound) and queues it in order; `now` gives it to the least
 * busy worker at once, whatever the load (a test's hold stands for a hash already running).
 */
function run(request: Request, now = false): Promise<unknown> {
  if (inHand >= queueMax) {
    refused++;
    return Promise.reject(new HashQueueFull());
  }
  inHand++;
  return new Promise((resolve, reject) => {
    let settled = false;
    const done = (): boolean => {
      if (settled) return false;
      settled = true;
      inHand--;
      return true;
    };
    const job: Job = { id: nextId++, request, resolve: (value) => done() && resolve(value), reject: (err) => done() && reject(err) };
    if (now) post(leastBusy(), job);
    else {
      waiting.push(job);
      dispatch();
    }
  });
}

/** An Argon2id hash with the library's defaults (OWASP's 19 MiB, t=2, p=1). */
export function argon2Hash(password: string): Promise<string> {
  const span = activeTracer ? childSpan('argon2 hash', { 'keel.hash.op': 'hash' }) : null;
  const work = run({ op: 'hash', password }) as Promise<string>;
  return span ? endWhenSettled(span, work) : work;
}

/** True when `password` matches `hash`; rejects for a malformed hash. */
export function argon2Verify(hash: string, password: string): Promise<boolean> {
  // A span of the hashing (docs/deploy.md "Tracing"): its name and duration, never the password or hash.
  const span = activeTracer ? childSpan('argon2 verify', { 'keel.hash.op': 'verify' }) : null;
  const work = run({ op: 'verify', hash, password }) as Promise<boolean>;
  return span ? endWhenSettled(span, work) : work;
}

/** How many hashes each worker holds now, running or next (tests); the rest wait in order here. */
export function hashPoolLoad(): number[] {
  return workers.map((w) => w.pending.size);
}

/**
 * Tests: puts `count` jobs in the pool that occupy their threads (and places in the queue) like
 * hashes that never end, until the answered function is called; resolves once they have ended.
 * With every thread held, what the queue admits and refuses no longer depends on timing.
 */
export function holdHashWorkers(count = HASH_THREADS): { release: () => Promise<void> } {
  const gate = new SharedArrayBuffer(4);
  const held = Array.from({ length: count }, () => run({ op: 'hold', gate }, true));
  return {
    release: async () => {
      const flag = new Int32Array(gate);
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
      await Promise.all(held);
    },
  };
}

/** Stops every worker; jobs in hand fail with HashWorkerLost and the next hash starts new workers (tests). */
export async function stopHashWorkers(): Promise<void> {
  const stopping = [...workers];
  for (const w of stopping) w.fail(new HashWorkerLost('stopped'));
  await Promise.all(stopping.map((w) => w.worker.terminate()));
}
