import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { keyId, keyListStatement, manifestEntry, parseReleaseKeys, signBuild, signText, verifyBuildSignature, verifyWithAny } from '../../src/modules/agents/signing.js';

const a = generateKeyPairSync('ed25519');
const b = generateKeyPairSync('ed25519');
const rawOf = (k: typeof a) => k.publicKey.export({ format: 'der', type: 'spki' }).subarray(12);
const build = { version: '2.1.0', component: 'agent', os: 'linux', arch: 'amd64', sha256: 'AB'.repeat(32), size: 4 };

describe('release signing', () => {
  it('canonical entry: keys sorted, no spaces, size a number, sha256 lower-case', () => {
    expect(manifestEntry(build)).toBe(`{"arch":"amd64","component":"agent","os":"linux","sha256":"${'ab'.repeat(32)}","size":4,"version":"2.1.0"}`);
  });

  it('parses base64 and PEM keys (comma-separated, deduplicated); key id is 8 hex of SHA-256 of the raw key', () => {
    const pem = b.publicKey.export({ format: 'pem', type: 'spki' }).toString().replace(/\n/g, '\\n');
    const keys = parseReleaseKeys(`${rawOf(a).toString('base64')}, ${pem},${rawOf(a).toString('base64')}`);
    expect(keys.map((k) => k.base64)).toEqual([rawOf(a).toString('base64'), rawOf(b).toString('base64')]);
    expect(keys[0]?.id).toMatch(/^[0-9a-f]{8}$/);
    expect(keyId(rawOf(a))).toBe(keys[0]?.id);
    expect(keyId(b.publicKey)).toBe(keys[1]?.id);
    expect(parseReleaseKeys('')).toEqual([]);
    expect(() => parseReleaseKeys('bm90IGEga2V5')).toThrow();
  });

  it('verifies a build signature with any configured key; a tampered field or a foreign key fails', () => {
    const keys = parseReleaseKeys(rawOf(a).toString('base64'));
    const sig = signBuild(a.privateKey, build);
    expect(verifyBuildSignature(keys, build, sig)?.id).toBe(keyId(rawOf(a)));
    expect(verifyBuildSignature(keys, { ...build, size: 5 }, sig)).toBeNull();
    expect(verifyBuildSignature(keys, build, signBuild(b.privateKey, build))).toBeNull();
    expect(verifyBuildSignature(keys, build, null)).toBeNull();
    expect(verifyBuildSignature(keys, build, 'not base64!')).toBeNull();
  });

  it('key-list statement: sorted base64 raw keys, signed like any text', () => {
    const keys = parseReleaseKeys(`${rawOf(b).toString('base64')},${rawOf(a).toString('base64')}`);
    const statement = keyListStatement(keys);
    expect(statement).toBe(JSON.stringify({ keys: keys.map((k) => k.base64).sort() }));
    expect(verifyWithAny(parseReleaseKeys(rawOf(a).toString('base64')), statement, signText(a.privateKey, statement))).not.toBeNull();
  });
});
