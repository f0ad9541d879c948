import { describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { constantTimeEqual, DecryptionError, hmacSha256Hex, KeyedHash, parseKey, randomToken, Sealer, sealingKey, sha256Hex } from '../../src/platform/crypto.js';

describe('crypto', () => {
  const key = sealingKey(randomBytes(32));

  it('round-trips AES-256-GCM and never shows the plaintext', () => {
    const s = new Sealer(key);
    const sealed = s.seal('JBSWY3DPEHPK3PXP', 'users.mfa_secret:1');
    expect(sealed).not.toContain('JBSWY3DPEHPK3PXP');
    expect(sealed.startsWith(`v1.${key.id}.`)).toBe(true);
    expect(s.open(sealed, 'users.mfa_secret:1')).toBe('JBSWY3DPEHPK3PXP');
    expect(s.seal('same')).not.toBe(s.seal('same'));
  });

  it('rejects a tampered ciphertext, tag, or context', () => {
    const s = new Sealer(key);
    const sealed = s.seal('secret value', 'ctx');
    const parts = sealed.split('.');
    const ct = Buffer.from(parts[3]!, 'base64url');
    ct[0] = (ct[0] ?? 0) ^ 1;
    const tampered = [...parts.slice(0, 3), ct.toString('base64url'), parts[4]].join('.');
    expect(() => s.open(tampered, 'ctx')).toThrow(DecryptionError);
    const tag = Buffer.from(parts[4]!, 'base64url');
    tag[0] = (tag[0] ?? 0) ^ 1;
    expect(() => s.open([...parts.slice(0, 4), tag.toString('base64url')].join('.'), 'ctx')).toThrow(DecryptionError);
    expect(() => s.open(sealed, 'other-ctx')).toThrow(DecryptionError);
    expect(() => s.open('garbage', 'ctx')).toThrow(DecryptionError);
  });

  it('opens values sealed with a previous key after rotation, and only with it', () => {
    const old = new Sealer(key);
    const sealed = old.seal('rotate me');
    const next = sealingKey(randomBytes(32));
    const rotated = new Sealer(next, [key]);
    expect(rotated.open(sealed)).toBe('rotate me');
    expect(rotated.needsReseal(sealed)).toBe(true);
    expect(rotated.needsReseal(rotated.seal('x'))).toBe(false);
    expect(() => new Sealer(next).open(sealed)).toThrow(DecryptionError);
  });

  it('keyed hashes: made under the current key, recognised under previous ones after rotation, never under unknown ones', () => {
    const old = new KeyedHash(key);
    const made = old.make('sms:login:u1:123456');
    expect(made).toBe(hmacSha256Hex(key.key, 'sms:login:u1:123456'));
    const tagged = old.tagged('recovery:ABCD-EFGH');
    expect(tagged).toBe(`${key.id}.${hmacSha256Hex(key.key, 'recovery:ABCD-EFGH')}`);
    const next = sealingKey(randomBytes(32));
    const rotated = new KeyedHash(next, [key]);
    expect(rotated.make('x')).toBe(hmacSha256Hex(next.key, 'x'));
    expect(rotated.matches('sms:login:u1:123456', made)).toBe(true);
    expect(rotated.matches('sms:login:u1:654321', made)).toBe(false);
    expect(new KeyedHash(next).matches('sms:login:u1:123456', made)).toBe(false);
    // Every stored form: tagged and untagged (made before tags), current key first.
    const forms = rotated.candidates('recovery:ABCD-EFGH');
    expect(forms).toContain(tagged);
    expect(forms).toContain(hmacSha256Hex(key.key, 'recovery:ABCD-EFGH'));
    expect(forms[0]).toBe(rotated.tagged('recovery:ABCD-EFGH'));
    expect(new KeyedHash(next).candidates('recovery:ABCD-EFGH')).not.toContain(tagged);
  });

  it('parses 32-byte keys as hex or base64 and refuses other lengths', () => {
    const raw = randomBytes(32);
    expect(parseKey(raw.toString('hex'))?.equals(raw)).toBe(true);
    expect(parseKey(raw.toString('base64'))?.equals(raw)).toBe(true);
    expect(parseKey(raw.toString('base64url'))?.equals(raw)).toBe(true);
    expect(parseKey('abc')).toBeNull();
  });

  it('compares in constant time and makes unguessable tokens', () => {
    expect(constantTimeEqual('abc', 'abc')).toBe(true);
    expect(constantTimeEqual('abc', 'abd')).toBe(false);
    expect(constantTimeEqual('abc', 'abcd')).toBe(false);
    expect(randomToken()).toMatch(/^[\w-]{43}$/);
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});
