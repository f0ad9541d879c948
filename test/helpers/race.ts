/**
 * Race tests: N identical requests at once against the real PostgreSQL server, where transactions
 * really interleave. On PGlite (one session: every statement waits for the previous one) a race
 * cannot fail, so there it is registered as skipped.
 *
 *   raceTest('one of 10 parallel accepts of an invitation wins', async () => {
 *     const answers = await together(10, () => app.api('POST', '/auth/accept-invite', { body }));
 *     expectOneWinner(answers, 200, [400]);
 *   });
 *
 * Every race test's name starts with `race: `; the reporter `test/setup/race-reporter.ts` counts
 * them at the end of a run and says how many ran on PostgreSQL (and loudly when none did).
 */
import pg from 'pg';
import { expect, it } from 'vitest';
import { backend } from './app.js';
import { realBackendsAvailable } from './backends.js';

/** The prefix every race test's name carries (the reporter counts by it). */
export const RACE_PREFIX = 'race: ';

/** True where a race can fail: the postgres project with its servers running. */
export function racesRunHere(): boolean {
  return backend === 'postgres' && realBackendsAvailable();
}

/**
 * Registers `it('race: <title>', fn, timeout)` that runs on the real PostgreSQL server only; on
 * PGlite, or without the servers, it is `it.skip` (and counted as skipped by the reporter).
 */
export function raceTest(title: string, fn: () => Promise<void>, timeout?: number): void {
  const name = `${RACE_PREFIX}${title}`;
  if (racesRunHere()) it(name, fn, timeout);
  else it.skip(name, fn, timeout);
}

/**
 * Starts `n` calls of `fn` (with their index) in the same tick and waits for all of them; the
 * answers come back in call order. Use it for the N identical requests of a race.
 */
export function together<T>(n: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => fn(i)));
}

/**
 * Asserts a race's outcome: exactly one answer has `winner` as status, and every other answer has
 * one of `losers` (never a 500, never a second success). Returns the winning answer.
 */
export function expectOneWinner<T extends { status: number }>(answers: T[], winner: number, losers: number[]): T {
  const statuses = answers.map((a) => a.status);
  expect(statuses.filter((s) => s === winner), `statuses: ${statuses.join(', ')}`).toHaveLength(1);
  const others = statuses.filter((s) => s !== winner);
  for (const s of others) expect(losers, `statuses: ${statuses.join(', ')}`).toContain(s);
  return answers.find((a) => a.status === winner)!;
}

/**
 * Makes one interleaving of a race certain on PostgreSQL, instead of hoping the scheduler finds it:
 * on a connection of its own, opens a transaction and takes `lock` (SQL: a table lock, an advisory
 * lock), starts `requests`, waits until `waiters` statements of this database wait on a lock, runs
 * `meanwhile` on the lock's connection (say, what a winner commits), and commits, which releases the
 * lock; then answers what the requests answered.
 */
export async function behindLock<T>(
  databaseUrl: string,
  lock: string,
  waiters: number,
  requests: () => Promise<T>,
  meanwhile?: (client: pg.Client) => Promise<void>,
): Promise<T> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('begin');
    await client.query(lock);
    const answers = requests();
    answers.catch(() => undefined); // awaited below; a failure must not go unhandled while we wait
    for (let i = 0; ; i++) {
      const { rows } = await client.query<{ n: number }>(
        'select count(*)::int as n from pg_locks where not granted and database = (select oid from pg_database where datname = current_database())',
      );
      if (rows[0]!.n >= waiters) break;
      if (i > 1_000) throw new Error(`behindLock: ${rows[0]!.n} of ${waiters} statements came to wait on the lock`);
      await new Promise((r) => setTimeout(r, 10));
    }
    await meanwhile?.(client);
    await client.query('commit');
    return await answers;
  } finally {
    await client.end();
  }
}
