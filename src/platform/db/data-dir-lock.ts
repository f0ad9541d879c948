import { linkSync, mkdirSync, readFileSync, rmdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';

/*
 * One process at a time on an embedded (PGlite) data directory (docs/decisions.md "Operating Keel: data directory, CLI, start-up, access log").
 *
 * PGlite is PostgreSQL in one process with no shared memory between processes: two processes on
 * one directory each believe they own it and corrupt it for good. Node has no OS file lock
 * (flock/fcntl), so the lock is a file, `<pglite dir>.lock`, holding the holder's pid, the
 * process's start time (from /proc, so a pid reused after a crash is told apart), its host and
 * command. It is created atomically (written under a temporary name, then hard-linked into place,
 * which fails if the lock exists) and removed on close and on exit. A lock whose process is gone
 * (SIGKILL, a power cut) is stale: it is taken over under a takeover mutex (a directory, created
 * atomically) after checking again that it is still the same stale lock, so two processes
 * recovering at once cannot both win, and a live holder's lock is never removed.
 * A holder on another host (a shared volume) cannot be judged from here and counts as live.
 */

export interface LockHolder {
  pid: number;
  /** Field 22 of /proc/<pid>/stat (clock ticks since boot); null where /proc is missing. */
  startTime: string | null;
  hostname: string;
  /** What the holder runs, e.g. `keel serve`. */
  command: string;
  /** ISO time the lock was taken. */
  since: string;
  /** Tells this lock apart from any other, so an owner removes only its own. */
  nonce: string;
}

export class DataDirLockedError extends Error {
  override name = 'DataDirLockedError';
  constructor(
    readonly dataDir: string,
    readonly holder: LockHolder | null,
  ) {
    super(`${dataDir} is in use by ${describeHolder(holder)}`);
  }
}

function describeHolder(holder: LockHolder | null): string {
  if (!holder) return 'another process (its lock file is being written)';
  const where = holder.hostname === hostname() ? '' : ` on host ${holder.hostname}`;
  return `another Keel process (pid ${holder.pid}${where}, ${holder.command}, since ${holder.since})`;
}

/** Start time of a process from /proc/<pid>/stat, or null (no /proc, or no such process). */
export function processStartTime(pid: number | 'self'): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19] ?? null;
  } catch {
    return null;
  }
}

function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether the process that wrote `holder` may still be running (a holder on another host always may). */
export function holderAlive(holder: LockHolder): boolean {
  if (holder.hostname !== hostname()) return true;
  if (!Number.isInteger(holder.pid) || holder.pid <= 0 || !pidExists(holder.pid)) return false;
  if (holder.startTime === null) return true;
  const now = processStartTime(holder.pid);
  return now === null || now === holder.startTime;
}

function readHolder(path: string): LockHolder | null | 'missing' {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw err;
  }
  try {
    const parsed = JSON.parse(text) as LockHolder;
    return typeof parsed.pid === 'number' && typeof parsed.nonce === 'string' ? parsed : null;
  } catch {
    return null;
  }
}

function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

/** Creates the lock file with `content` only if none exists; false when one does. */
function createExclusive(path: string, content: string, nonce: string): boolean {
  const temp = `${path}.${process.pid}.${nonce}.tmp`;
  writeFileSync(temp, content, { mode: 0o644 });
  try {
    linkSync(temp, path);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
  } finally {
    try {
      unlinkSync(temp);
    } catch {
      // already gone
    }
  }
  // A file system without hard links: exclusive create (a reader may briefly see an empty file).
  try {
    writeFileSync(path, content, { flag: 'wx', mode: 0o644 });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A takeover abandoned by a crash between its two steps is older than this and may be cleared. */
const TAKEOVER_ABANDONED_MS = 10_000;

/** Removes the stale lock `judged` if it is still the lock file, under the takeover mutex. */
async function removeStale(path: string, judged: LockHolder | null): Promise<void> {
  const mutex = `${path}.takeover`;
  for (let i = 0; ; i++) {
    try {
      mkdirSync(mutex);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (ageMs(mutex) > TAKEOVER_ABANDONED_MS) {
        try {
          rmdirSync(mutex);
        } catch {
          // another process cleared it first
        }
      } else if (i > 400) {
        throw new Error(`${path}: another process is taking over a stale lock; try again`, { cause: err });
      } else {
        await pause(25);
      }
    }
  }
  try {
    const current = readHolder(path);
    const same = current === 'missing' ? false : current === null ? judged === null : judged !== null && current.nonce === judged.nonce;
    if (same) unlinkSync(path);
  } finally {
    rmdirSync(mutex);
  }
}

export interface DataDirLock {
  path: string;
  holder: LockHolder;
  /** Removes the lock file if it is still this lock's. Idempotent. */
  release(): void;
}

const held = new Set<DataDirLock>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // process.exit() and a normal end run 'exit' handlers; SIGKILL does not, which stale detection covers.
  process.on('exit', () => {
    for (const lock of held) lock.release();
  });
}

/**
 * Takes the lock `path` for this process, or throws DataDirLockedError naming the live holder.
 * `dataDir` is only used in the error message.
 */
export async function lockDataDir(path: string, dataDir: string, command: string): Promise<DataDirLock> {
  const nonce = randomBytes(8).toString('hex');
  const holder: LockHolder = {
    pid: process.pid,
    startTime: processStartTime('self'),
    hostname: hostname(),
    command,
    since: new Date().toISOString(),
    nonce,
  };
  const content = `${JSON.stringify(holder)}\n`;
  for (let attempt = 0; ; attempt++) {
    if (createExclusive(path, content, nonce)) break;
    const current = readHolder(path);
    if (current === 'missing') continue; // released between our two steps
    if (current === null) {
      // Unreadable: being written right now (no hard links), or left half-written long ago.
      if (ageMs(path) < 5_000) {
        if (attempt > 40) throw new DataDirLockedError(dataDir, null);
        await pause(50);
        continue;
      }
    } else if (holderAlive(current)) {
      throw new DataDirLockedError(dataDir, current);
    }
    if (attempt > 20) throw new Error(`${path}: could not take over a stale lock`);
    await removeStale(path, current);
  }
  installExitHook();
  const lock: DataDirLock = {
    path,
    holder,
    release() {
      if (!held.delete(lock)) return;
      const current = readHolder(path);
      if (current !== 'missing' && current !== null && current.nonce === nonce) {
        try {
          unlinkSync(path);
        } catch {
          // already gone
        }
      }
    },
  };
  held.add(lock);
  return lock;
}
