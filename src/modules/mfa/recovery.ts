import { randomInt } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { KeyedHash } from '../../platform/crypto.js';
import { transactionIf } from '../../platform/db/transaction.js';
import { users } from '../identity/schema.js';
import { updateAccount } from '../identity/accounts.js';

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

const recoveryMessage = (code: string): string => `recovery:${code.trim().toUpperCase()}`;

/**
 * Codes are stored as keyed hashes (HMAC with the encryption key), so a database copy cannot be
 * brute-forced, tagged with the key's id (`<key id>.<hex>`): after a key rotation they keep working
 * while their key is in APP_ENCRYPTION_KEYS_PREVIOUS, and the operator can count them.
 */
export function hashRecoveryCode(keyed: KeyedHash, code: string): string {
  return keyed.tagged(recoveryMessage(code));
}

/**
 * Uses a recovery code: one UPDATE removes its hash from the user's list only if it is still there,
 * so of parallel uses of one code exactly one succeeds. The hash may have been made under any
 * configured key, tagged or (before tags) not: every form is looked for.
 */
export async function consumeRecoveryCode(keel: Keel, userId: string, code: string): Promise<boolean> {
  if (!RECOVERY_CODE_PATTERN.test(code.trim().toUpperCase())) return false;
  const forms = sql`array[${sql.join(
    keel.secrets.keyed.candidates(recoveryMessage(code)).map((c) => sql`${c}`),
    sql`, `,
  )}]::text[]`;
  return transactionIf(false, keel.db, (tx) =>
    updateAccount(keel, tx, userId, { mfaRecoveryCodes: sql`${users.mfaRecoveryCodes} - ${forms}` }, sql`${users.mfaRecoveryCodes} ?| ${forms}`),
  );
}
