import type { Keel } from '../../keel.js';
import { AppError } from '../../platform/http/errors.js';
import { clock } from '../../platform/clock.js';
import { prepared, rawQuery, tableReader } from '../../platform/db/raw.js';
import { identityOf } from './context.js';
import { dummyVerify, verifyPassword } from './passwords.js';
import { users } from './schema.js';
import { identityError } from './errors.js';

type User = typeof users.$inferSelect;

/**
 * The account lockout (docs/decisions.md "Limits": LOCKOUT_THRESHOLD consecutive failed passwords lock an
 * account for LOCKOUT_SECONDS). Every password check first *reserves* a failure, with one
 * conditional UPDATE that refuses while the account is locked and sets the lock when the reservation
 * reaches the threshold; only then does the Argon2 verify run. A right password releases its
 * reservation (a completed sign-in clears the count); a wrong one leaves it counted. PostgreSQL
 * re-checks the condition on the latest row for each of N parallel UPDATEs, so however many guesses
 * arrive together, at most LOCKOUT_THRESHOLD verifies run per lock period.
 */
const userReader = tableReader(users);
const expired = '(locked_until is not null and locked_until <= $2::timestamptz)';
const nextCount = `(case when ${expired} then 1 else failed_login_count + 1 end)`;
const reserveSql = (match: string) => `update users set
    failed_login_count = ${nextCount},
    locked_until = case when ${nextCount} >= $4 then $3::timestamptz when ${expired} then null else locked_until end
  where ${match} and status = 'active' and password_hash is not null
    and (locked_until is null or locked_until <= $2::timestamptz)
  returning ${userReader.columns}`;
const RESERVE_BY_EMAIL = prepared('lockout_reserve_email', reserveSql('lower(email) = lower($1)'));
const RESERVE_BY_ID = prepared('lockout_reserve_id', reserveSql('id = $1'));
const RELEASE = prepared(
  'lockout_release',
  `update users set failed_login_count = greatest(failed_login_count - 1, 0),
     locked_until = case when failed_login_count - 1 < $2 then null else locked_until end
   where id = $1 and failed_login_count > 0`,
);

/**
 * Reserves one failed attempt for the active account with a password named by email or id, and
 * answers its row; null when there is no such account or it is locked (no reservation then).
 */
async function reserve(keel: Keel, by: { email: string } | { id: string }): Promise<User | null> {
  const now = clock.now();
  const lockUntil = new Date(now.getTime() + keel.config.LOCKOUT_SECONDS * 1000);
  const params = ['email' in by ? by.email.trim() : by.id, now.toISOString(), lockUntil.toISOString(), keel.config.LOCKOUT_THRESHOLD];
  const [row] = await rawQuery(keel.db, 'email' in by ? RESERVE_BY_EMAIL : RESERVE_BY_ID, params);
  return row ? userReader.read(row) : null;
}

/** Gives back a reservation whose password was right (or whose check failed for a server fault). */
export async function releaseReservation(keel: Keel, userId: string): Promise<void> {
  await rawQuery(keel.db, RELEASE, [userId, keel.config.LOCKOUT_THRESHOLD]);
}

/**
 * Checks a password against the account under the lockout: reserve, verify, release when right.
 * Null for an unknown, locked, inactive or password-less account and for a wrong password, after
 * the same single Argon2 verify in every case (no timing tells them apart). A completed sign-in
 * clears the count (sessions.ts, the login statement); a caller that stops short of one after a
 * right password calls `releaseReservation`, as this does on a server fault.
 */
export async function checkPasswordUnderLockout(
  keel: Keel,
  by: { email: string } | { id: string },
  password: string,
  opts: { release: boolean; onLocked?: () => void },
): Promise<User | null> {
  const user = await reserve(keel, by);
  if (!user?.passwordHash) {
    await dummyVerify(password);
    return null;
  }
  let ok: boolean;
  try {
    ok = await verifyPassword(user.passwordHash, password);
  } catch (err) {
    // A lost hashing thread is a fault, never a wrong password that counts towards the lock.
    await releaseReservation(keel, user.id);
    throw err;
  }
  if (!ok) {
    // This failure's reservation set the lock (metrics count it as the login's `locked` outcome).
    if (user.lockedUntil && user.lockedUntil.getTime() > clock.now().getTime()) opts.onLocked?.();
    return null;
  }
  if (opts.release) await releaseReservation(keel, user.id);
  return user;
}

export const invalidCurrentPassword = () => identityError('invalid_current_password');

/**
 * Every password re-entry of a signed-in or invited person (change-password, passkey registration
 * and removal, accepting an invitation into an existing account): PASSWORD_REENTRY_LIMIT attempts
 * per user per 15 minutes (429), and each wrong one counts towards the account lockout like a failed
 * login; while the account is locked the right password is refused too. Throws `wrong()` (default
 * 400 `invalid_current_password`) for a wrong password, a locked account or an account without one.
 */
export async function verifyReenteredPassword(
  keel: Keel,
  userId: string,
  password: string,
  wrong: () => AppError = invalidCurrentPassword,
): Promise<void> {
  await identityOf(keel).limits.passwordReentry.consume(userId);
  const user = await checkPasswordUnderLockout(keel, { id: userId }, password, { release: true });
  if (!user) throw wrong();
}
