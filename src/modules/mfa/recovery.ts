import { randomInt } from 'node:crypto';
import { and, eq, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import { hmacSha256Hex } from '../../platform/crypto.js';
import { users } from '../identity/schema.js';

export const RECOVERY_CODE_COUNT = 10;
const ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789'; // no 0/O, 1/I
export const RECOVERY_CODE_PATTERN = /^[A-Z2-9]{4}-[A-Z2-9]{4}$/;

export function newRecoveryCodes(): string[] {
  const one = () => Array.from({ length: 8 }, () => ALPHABET[randomInt(ALPHABET.length)]).join('');
  return Array.from({ length: RECOVERY_CODE_COUNT }, () => {
    const c = one();
    return `${c.slice(0, 4)}-${c.slice(4)}`;
  });
}

/** Codes are stored as keyed hashes (HMAC with the encryption key), so a database copy cannot be brute-forced. */
export function hashRecoveryCode(key: Buffer, code: string): string {
  return hmacSha256Hex(key, `recovery:${code.trim().toUpperCase()}`);
}

/**
 * Uses a recovery code: one UPDATE removes its hash from the user's list only if it is still there,
 * so of parallel uses of one code exactly one succeeds.
 */
export async function consumeRecoveryCode(db: Db, key: Buffer, userId: string, code: string): Promise<boolean> {
  if (!RECOVERY_CODE_PATTERN.test(code.trim().toUpperCase())) return false;
  const hash = hashRecoveryCode(key, code);
  const rows = await db
    .update(users)
    .set({ mfaRecoveryCodes: sql`${users.mfaRecoveryCodes} - ${hash}::text` })
    .where(and(eq(users.id, userId), sql`${users.mfaRecoveryCodes} ? ${hash}::text`))
    .returning({ id: users.id });
  return rows.length > 0;
}
