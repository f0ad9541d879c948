/**
 * Release signatures as the reference agent checks them (docs/decisions.md "Update channel: the
 * reference agent"). The agent is a program of its own and imports nothing of Keel's server; the
 * forms below are the ones Keel's release signing uses, and the tests check both agree.
 *
 * - A build's signature: base64 Ed25519 over the UTF-8 of its canonical manifest entry
 *   `{"arch","component","os","sha256","size","version"}` (keys sorted, no spaces, size a number,
 *   sha256 lower-case hex).
 * - A public key travels as base64 of its raw 32 bytes; its key id is the first 8 hex characters of
 *   the SHA-256 of those bytes.
 * - A key-list statement: base64 Ed25519 over the UTF-8 of `{"keys":[…the sorted base64 keys]}`.
 */
import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';

/** The fields of an offer a signature covers. */
export interface SignedBuild {
  arch: string;
  component: string;
  os: string;
  sha256: string;
  size: number;
  version: string;
}

/** The canonical manifest entry (keys in sorted order, no spaces). */
export function canonicalEntry(b: SignedBuild): string {
  return JSON.stringify({ arch: b.arch, component: b.component, os: b.os, sha256: b.sha256.toLowerCase(), size: b.size, version: b.version });
}

/** The message of a key-list statement. */
export function keyListMessage(keys: readonly string[]): string {
  return JSON.stringify({ keys: [...new Set(keys)].sort() });
}

const RAW_KEY = /^[A-Za-z0-9+/]{43}=$/;
/** SPKI DER prefix of an Ed25519 public key (RFC 8410); the raw 32 bytes follow. */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** True when `key` is base64 of exactly 32 bytes (the one form keys travel in). */
export function isRawKey(key: unknown): key is string {
  return typeof key === 'string' && RAW_KEY.test(key) && Buffer.from(key, 'base64').length === 32;
}

export function keyIdOf(key: string): string {
  return createHash('sha256').update(Buffer.from(key, 'base64')).digest('hex').slice(0, 8);
}

function publicKey(key: string): KeyObject {
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, Buffer.from(key, 'base64')]), format: 'der', type: 'spki' });
}

/** True when `signature` (base64 of 64 bytes) is `key`'s Ed25519 signature of `message`. */
export function verifiedBy(key: string, message: string, signature: string): boolean {
  if (!isRawKey(key) || !/^[A-Za-z0-9+/]{86}==$/.test(signature)) return false;
  try {
    return verify(null, Buffer.from(message, 'utf8'), publicKey(key), Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}

/** The pinned key that signed `message`, or null. */
export function signerOf(keys: readonly string[], message: string, signature: string): string | null {
  return keys.find((k) => verifiedBy(k, message, signature)) ?? null;
}
