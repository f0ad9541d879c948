import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** URL-safe random token with `bytes` bytes of entropy (default 32). */
export function randomToken(bytes = 32): string {
  return randomBytes(bytes).toString('base64url');
}

export function sha256Hex(input: string | Buffer): string {
  return createHash('sha256').update(input).digest('hex');
}

export function hmacSha256Hex(key: string | Buffer, input: string | Buffer): string {
  return createHmac('sha256', key).update(input).digest('hex');
}

/** Constant-time string comparison; unequal lengths compare a hash so timing does not leak length. */
export function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  if (ab.length !== bb.length) {
    timingSafeEqual(createHash('sha256').update(ab).digest(), createHash('sha256').update(bb).digest());
    return false;
  }
  return timingSafeEqual(ab, bb);
}

/** A 32-byte AES key with a short id derived from it, so sealed values name the key that sealed them. */
export interface SealingKey {
  id: string;
  key: Buffer;
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
  return { id: sha256Hex(key).slice(0, 8), key };
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
