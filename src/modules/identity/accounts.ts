import { and, eq, type SQL } from 'drizzle-orm';
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core';
import type { Keel } from '../../keel.js';
import type { Tx } from '../../platform/db/transaction.js';
import { identityOf } from './context.js';
import { users } from './schema.js';

type UserRow = typeof users.$inferSelect;

/** The columns a write to an account may set (its id never changes). */
export type AccountChange = Omit<PgUpdateSetSource<typeof users>, 'id'>;

/**
 * Columns no cache holds: a write of only these (a TOTP step claimed, a recovery code used or the
 * codes replaced) publishes nothing, so a second factor checked at sign-in costs no invalidation.
 * Every other column reaches a cache (the live session, its enrolled factors, the self-profile).
 */
const UNCACHED = new Set<string>(['totpLastStep', 'mfaRecoveryCodes', 'updatedAt']);

function reachesCache(change: AccountChange): boolean {
  return Object.keys(change).some((column) => !UNCACHED.has(column));
}

/**
 * Writes to the `users` table from outside identity go through here (docs/decisions.md "Identity
 * owns the users table"): the write runs in the caller's unit of work, and the user's cached
 * knowledge (sessions, enrolled factors, profile, memberships) is dropped on every process once it
 * commits. Callers never publish the invalidation of an account change themselves.
 */

/**
 * Sets `change` on the account `userId` (and only while `condition` holds, when given). True when a
 * row was changed; the invalidation is published after commit only then.
 */
export async function updateAccount(keel: Keel, tx: Tx, userId: string, change: AccountChange, condition?: SQL): Promise<boolean> {
  const rows = await tx.db
    .update(users)
    .set(change)
    .where(condition ? and(eq(users.id, userId), condition) : eq(users.id, userId))
    .returning({ id: users.id });
  if (rows.length === 0) return false;
  if (reachesCache(change)) tx.afterCommit(() => identityOf(keel).sessions.userChanged(userId));
  return true;
}

/**
 * Creates an account (an invitee's, an SSO-provisioned user's); null when its email is taken. Nothing
 * is cached about an account that did not exist, so nothing is published.
 */
export async function createAccount(tx: Tx, values: typeof users.$inferInsert): Promise<UserRow | null> {
  const [created] = await tx.db.insert(users).values(values).onConflictDoNothing().returning();
  return created ?? null;
}

/**
 * Deletes an account (a directory removed the person and they belong nowhere else): its sessions,
 * factors and links go with it by the tables' cascades, and every process drops what it cached of it
 * once the caller's unit of work commits. True when a row was deleted.
 */
export async function deleteAccount(keel: Keel, tx: Tx, userId: string): Promise<boolean> {
  const rows = await tx.db.delete(users).where(eq(users.id, userId)).returning({ id: users.id });
  if (rows.length === 0) return false;
  tx.afterCommit(() => identityOf(keel).sessions.userChanged(userId));
  return true;
}
