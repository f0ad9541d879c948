import type { ZxcvbnFactory } from '@zxcvbn-ts/core';
import { validationError } from '../../platform/http/errors.js';
import { lazy } from '../../platform/lazy.js';
import { argon2Hash, argon2Verify, HashQueueFull, HashWorkerLost } from '../../platform/argon2-pool.js';

// Argon2id with the library's defaults (OWASP's 19 MiB, t=2, p=1), on the hashing threads.
export function hashPassword(password: string): Promise<string> {
  return argon2Hash(password);
}

export async function verifyPassword(passwordHash: string, password: string): Promise<boolean> {
  try {
    return await argon2Verify(passwordHash, password);
  } catch (err) {
    // A lost hashing thread is a server fault (500) and a full hash queue a refusal (503 overloaded):
    // neither is a wrong password that counts towards a lockout.
    if (err instanceof HashWorkerLost || err instanceof HashQueueFull) throw err;
    return false;
  }
}

let dummyHash: Promise<string> | null = null;
/** Spends the same time as a real verify, so an unknown email is not told apart by timing. */
export async function dummyVerify(password: string): Promise<void> {
  if (!dummyHash) {
    const made = argon2Hash('keel-dummy-password-for-timing');
    dummyHash = made;
    // A refused or failed first hash is tried again by the next caller, not kept as the answer.
    made.catch(() => {
      if (dummyHash === made) dummyHash = null;
    });
  }
  await verifyPassword(await dummyHash, password);
}

// The dictionaries are loaded on the first password check, not at start-up (they cost ~100 ms to import).
const strength = lazy(async (): Promise<ZxcvbnFactory> => {
  const [{ ZxcvbnFactory }, common, en] = await Promise.all([
    import('@zxcvbn-ts/core'),
    import('@zxcvbn-ts/language-common'),
    import('@zxcvbn-ts/language-en'),
  ]);
  return new ZxcvbnFactory({
    dictionary: { ...common.dictionary, ...en.dictionary },
    graphs: common.adjacencyGraphs,
    translations: en.translations,
  });
});

export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 128;

/**
 * Password policy: 8 to 128 characters and a zxcvbn score of at least 3, with the user's email and
 * name as inputs. Throws a 400 whose field message says why.
 */
export async function assertStrongPassword(password: string, userInputs: (string | undefined | null)[], field = 'password'): Promise<void> {
  if (password.length < PASSWORD_MIN) throw validationError([{ path: field, message: `must be at least ${PASSWORD_MIN} characters` }]);
  if (password.length > PASSWORD_MAX) throw validationError([{ path: field, message: `must be at most ${PASSWORD_MAX} characters` }]);
  const inputs = userInputs.filter((s): s is string => !!s).flatMap((s) => [s, ...s.split(/[@.\s]+/)]);
  const result = await (await strength()).checkAsync(password, inputs);
  if (result.score < 3) {
    const hint = (result.feedback.warning ?? result.feedback.suggestions[0] ?? 'add more words or characters').replace(/\.$/, '');
    // One clause after the field's name ("Password is too weak: there should not be …"), not a second sentence.
    throw validationError([{ path: field, message: `is too weak: ${hint.charAt(0).toLowerCase()}${hint.slice(1)}` }]);
  }
}
