import type { Db } from './client.js';
import { shareRunner } from './raw.js';

/**
 * A unit of work: the transaction handle plus callbacks to run once it has committed (wake a worker,
 * invalidate a cache, send an email). Services that change state take a `Tx` so callers can compose
 * several changes, audit entries and published events into one commit.
 */
export interface Tx {
  db: Db;
  afterCommit: (fn: () => void | Promise<void>) => void;
  /**
   * Set when the work runs outside a transaction (`transactionIf` without one): each statement
   * commits by itself. A subscriber whose write is one statement may then batch it with other
   * publishers' (webhook routing does).
   */
  alone?: true;
}

export async function transaction<T>(db: Db, work: (tx: Tx) => Promise<T>, onAfterCommitError?: (err: unknown) => void): Promise<T> {
  const callbacks: (() => void | Promise<void>)[] = [];
  const result = await db.transaction(async (inner) => {
    shareRunner(inner, db);
    return work({ db: inner, afterCommit: (fn) => callbacks.push(fn) });
  });
  await runCallbacks(callbacks, onAfterCommitError);
  return result;
}

async function runCallbacks(callbacks: (() => void | Promise<void>)[], onError?: (err: unknown) => void): Promise<void> {
  for (const fn of callbacks) {
    try {
      await fn();
    } catch (err) {
      onError?.(err);
    }
  }
}

/**
 * `transaction(db, work)` when `needed`; otherwise the same work straight on `db`, its after-commit
 * callbacks run once it is done. For work that is a single statement (atomic by itself) unless
 * something, such as an event subscriber, adds writes that must commit with it: a login saves
 * BEGIN and COMMIT when nothing listens for it.
 */
export async function transactionIf<T>(needed: boolean, db: Db, work: (tx: Tx) => Promise<T>, onAfterCommitError?: (err: unknown) => void): Promise<T> {
  if (needed) return transaction(db, work, onAfterCommitError);
  const callbacks: (() => void | Promise<void>)[] = [];
  const result = await work({ db, afterCommit: (fn) => callbacks.push(fn), alone: true });
  await runCallbacks(callbacks, onAfterCommitError);
  return result;
}
