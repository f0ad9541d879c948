import type { Db } from './client.js';

/**
 * A unit of work: the transaction handle plus callbacks to run once it has committed (wake a worker,
 * invalidate a cache, send an email). Services that change state take a `Tx` so callers can compose
 * several changes, audit entries and published events into one commit.
 */
export interface Tx {
  db: Db;
  afterCommit: (fn: () => void | Promise<void>) => void;
}

export async function transaction<T>(db: Db, work: (tx: Tx) => Promise<T>, onAfterCommitError?: (err: unknown) => void): Promise<T> {
  const callbacks: (() => void | Promise<void>)[] = [];
  const result = await db.transaction(async (inner) => work({ db: inner, afterCommit: (fn) => callbacks.push(fn) }));
  for (const fn of callbacks) {
    try {
      await fn();
    } catch (err) {
      onAfterCommitError?.(err);
    }
  }
  return result;
}
