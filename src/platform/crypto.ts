import { createCipheriv, createDecipheriv, createHmac, createSecretKey, hash, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';

/** URL-safe random token with `bytes` bytes of entropy (default 32). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString('base64url');
}

/** SHA-256 in hex, one shot (`crypto.hash`: no Hash object, about 0.4 µs less a call; a device's every heartbeat hashes its token). */
export function sha256Hex(input: string | Buffer): string {
  return hash('sha256', input, 'hex');
}

/**
 * A secret key imported once, for every HMAC and cipher made with it: on Node 24 `createHmac` and
 * `createCipheriv` given a Buffer import it again on each call (~10-40 µs), a KeyObject ~2 µs
 * (docs/decisions.md "Speed: logins").
 */
export function secretKey(key: Buffer | string): KeyObject {
  return createSecretKey(typeof key === 'string' ? Buffer.from(key) : key);
}

export function hmacSha256Hex(key: KeyObject, input: string | Buffer): string {
  return createHmac('sha256', key).update(input).digest('hex');
}

/** Constant-time string comparison; unequal lengths compare a hash so timing does not leak length. */
export function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  if (ab.length !== bb.length) {
    timingSafeEqual(hash('sha256', ab, 'buffer'), hash('sha256', bb, 'buffer'));
    return false;
  }
  return timingSafeEqual(ab, bb);
}

/** A 32-byte AES key with a short id derived from it, so sealed values name the key that sealed them. */
export interface SealingKey {
  id: string;
  /** Imported once (`secretKey`). */
  key: KeyObject;
}

export class DecryptionError extends Error {
  override name = 'DecryptionError';
}

/** Parses a 32-byte key given as 64 hex characters or base64/base64url. */
export function parseKey(text: string): Buffer | null {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, 'hex');
  const b = Buffer.from(t.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  return b.length === 32 ? b : null;
}

export function sealingKey(key: Buffer): SealingKey {
  return { id: sha256Hex(key).slice(0, 8), key: secretKey(key) };
}

/**
 * AES-256-GCM with a keyring: seal with the current key, open with whichever key id the value names.
 * Format: `v1.<keyId>.<iv>.<ciphertext>.<tag>` (base64url parts). `aad` binds a value to its context
 * (e.g. the row and column it belongs to) so a sealed value cannot be moved elsewhere.
 */
export class Sealer {
  readonly #current: SealingKey;
  readonly #byId: Map<string, SealingKey>;

  constructor(current: SealingKey, previous: SealingKey[] = []) {
    this.#current = current;
    this.#byId = new Map([current, ...previous].map((k) => [k.id, k]));
  }

  get currentKeyId(): string {
    return this.#current.id;
  }

  seal(plaintext: string, aad = ''): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.#current.key, iv);
    cipher.setAAD(Buffer.from(aad));
    const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    const tag = cipher.getAuthTag();
    return ['v1', this.#current.id, iv.toString('base64url'), ct.toString('base64url'), tag.toString('base64url')].join('.');
  }

  open(sealed: string, aad = ''): string {
    const parts = sealed.split('.');
    if (parts.length !== 5 || parts[0] !== 'v1') throw new DecryptionError('malformed sealed value');
    const [, keyId, ivText, ctText, tagText] = parts as [string, string, string, string, string];
    const k = this.#byId.get(keyId);
    if (!k) throw new DecryptionError('sealed with an unknown key');
    try {
      const decipher = createDecipheriv('aes-256-gcm', k.key, Buffer.from(ivText, 'base64url'));
      decipher.setAAD(Buffer.from(aad));
      decipher.setAuthTag(Buffer.from(tagText, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(ctText, 'base64url')), decipher.final()]).toString('utf8');
    } catch {
      throw new DecryptionError('sealed value failed authentication');
    }
  }

  /** True when the value was sealed with an older key and should be re-sealed. */
  needsReseal(sealed: string): boolean {
    return sealed.split('.')[1] !== this.#current.id;
  }
}

/**
 * Keyed hashes (HMAC-SHA256) under the encryption keyring: made with the current key, recognised under
 * the current key and every previous one (APP_ENCRYPTION_KEYS_PREVIOUS), so a key rotation does not
 * void what was made before it: recovery codes, SMS codes, SSO state cookies. A `tagged` value names
 * its key (`<key id>.<hex>`, the id sealed values carry), so an operator can count what is left under
 * an old key before dropping it (docs/deploy.md "Key rotation").
 */
export class KeyedHash {
  readonly #keys: [SealingKey, ...SealingKey[]];

  constructor(current: SealingKey, previous: SealingKey[] = []) {
    this.#keys = [current, ...previous];
  }

  /** Under the current key. */
  make(message: string): string {
    return hmacSha256Hex(this.#keys[0].key, message);
  }

  /** Under the current key, naming it: `<key id>.<hex>`. */
  tagged(message: string): string {
    return `${this.#keys[0].id}.${this.make(message)}`;
  }

  /** Every form a stored hash of `message` may take: tagged, and untagged (as made before tags), under each known key. */
  candidates(message: string): string[] {
    return this.#keys.flatMap((k) => {
      const hex = hmacSha256Hex(k.key, message);
      return [`${k.id}.${hex}`, hex];
    });
  }

  /** True when `expected` (untagged) is the hash of `message` under any known key; every key is compared, in constant time. */
  matches(message: string, expected: string): boolean {
    let found = false;
    for (const k of this.#keys) found = constantTimeEqual(hmacSha256Hex(k.key, message), expected) || found;
    return found;
  }
}
