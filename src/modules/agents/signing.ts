import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';

/**
 * Release signatures (docs/decisions.md "Update channel: release writes and signatures"), shared by
 * the server, the CLI and the agent: no import of Keel here, only node:crypto.
 *
 * A build's signature is Ed25519 over the UTF-8 of its canonical manifest entry
 * `{"arch","component","os","sha256","size","version"}` (keys sorted, no spaces, size a JSON number,
 * sha256 lower-case hex), sent base64. A key is named by its id: the first 8 hex characters of the
 * SHA-256 of its raw 32 bytes. A key list (two-phase rotation) is signed as `{"keys":[...]}` (the keys
 * as base64 of the raw 32 bytes, sorted).
 */

export interface BuildFields {
  version: string;
  component: string;
  os: string;
  arch: string;
  sha256: string;
  size: number;
}

export interface ReleaseKey {
  /** The raw 32-byte Ed25519 public key, base64. */
  base64: string;
  /** First 8 hex of SHA-256 of the raw 32 bytes. */
  id: string;
  key: KeyObject;
}

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** The canonical manifest entry of a build (the bytes a signature covers, as a string). */
export function manifestEntry(b: BuildFields): string {
  return JSON.stringify({ arch: b.arch, component: b.component, os: b.os, sha256: b.sha256.toLowerCase(), size: b.size, version: b.version });
}

function rawOf(key: KeyObject): Buffer {
  const der = key.export({ format: 'der', type: 'spki' });
  if (key.asymmetricKeyType !== 'ed25519' || der.length !== 44) throw new Error('not an Ed25519 public key');
  return der.subarray(12);
}

/** One Ed25519 public key: PEM (`\n` escapes allowed) or base64 of the raw 32 bytes. */
export function parseReleaseKey(text: string): ReleaseKey {
  const t = text.trim();
  let key: KeyObject;
  if (t.includes('BEGIN')) {
    key = createPublicKey(t.replace(/\\n/g, '\n'));
  } else {
    const raw = Buffer.from(t, 'base64');
    if (raw.length !== 32 || raw.toString('base64').replace(/=+$/, '') !== t.replace(/=+$/, '')) throw new Error('a release key must be a PEM Ed25519 public key or 32 bytes in base64');
    key = createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
  }
  const raw = rawOf(key);
  return { base64: raw.toString('base64'), id: keyId(raw), key };
}

/** A comma-separated list of keys (AGENT_RELEASE_PUBLIC_KEYS); empty or missing text: []. Duplicates are kept once. */
export function parseReleaseKeys(text: string | undefined | null): ReleaseKey[] {
  const out: ReleaseKey[] = [];
  for (const part of (text ?? '').split(',')) {
    if (part.trim() === '') continue;
    const k = parseReleaseKey(part);
    if (!out.some((o) => o.id === k.id)) out.push(k);
  }
  return out;
}

/** Key id: the first 8 hex characters of SHA-256 of the raw 32-byte public key. */
export function keyId(key: Buffer | Uint8Array | string | KeyObject | ReleaseKey): string {
  if (typeof key === 'string') return parseReleaseKey(key).id;
  if (key instanceof Uint8Array) return createHash('sha256').update(key).digest('hex').slice(0, 8);
  if ('base64' in key && 'id' in key) return key.id;
  return keyId(rawOf(key));
}

function decodeSignature(sig: string | null | undefined): Buffer | null {
  if (typeof sig !== 'string') return null;
  const t = sig.trim();
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(t)) return null;
  const b = Buffer.from(t, 'base64');
  return b.length === 64 ? b : null;
}

/** The key (of `keys`) whose signature `sig` (base64) is over `text`, or null. */
export function verifyWithAny(keys: readonly ReleaseKey[], text: string, sig: string | null | undefined): ReleaseKey | null {
  const s = decodeSignature(sig);
  if (!s) return null;
  const data = Buffer.from(text, 'utf8');
  for (const k of keys) if (verify(null, data, k.key, s)) return k;
  return null;
}

/** The key that signed this build (its canonical manifest entry), or null (unsigned, malformed, or no key verifies). */
export function verifyBuildSignature(keys: readonly ReleaseKey[], build: BuildFields, sig: string | null | undefined): ReleaseKey | null {
  return verifyWithAny(keys, manifestEntry(build), sig);
}

/** The canonical statement of a key list: `{"keys":[<base64 raw keys, sorted>]}`. */
export function keyListStatement(keys: readonly (ReleaseKey | string)[]): string {
  const list = keys.map((k) => (typeof k === 'string' ? parseReleaseKey(k).base64 : k.base64));
  return JSON.stringify({ keys: [...new Set(list)].sort() });
}

/** Signs text with an Ed25519 private key (PEM, or a KeyObject); base64. For the CLI and tests. */
export function signText(privateKey: string | KeyObject, text: string): string {
  const key = typeof privateKey === 'string' ? createPrivateKey(privateKey.replace(/\\n/g, '\n')) : privateKey;
  return sign(null, Buffer.from(text, 'utf8'), key).toString('base64');
}

/** Signs a build's canonical manifest entry; base64. */
export function signBuild(privateKey: string | KeyObject, build: BuildFields): string {
  return signText(privateKey, manifestEntry(build));
}
