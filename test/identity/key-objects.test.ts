/**
 * Keys imported once (platform/crypto.ts `secretKey`, docs/decisions.md "Speed: logins"): on Node 24
 * `createHmac`, `createCipheriv` and `createDecipheriv` import a Buffer or string key again on every
 * call (~10-40 µs each). Every keyed call Keel makes on a login, a cookie refresh (the access token's
 * signature, the CSRF value and its check), a sealed value and a keyed hash must be given a KeyObject.
 * Counted by wrapping node:crypto's three functions for Keel's own modules.
 */
import { types } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { cookie, createUser, login } from '../helpers/fixtures.js';

const calls = vi.hoisted(() => [] as { fn: string; key: unknown }[]);

vi.mock('node:crypto', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:crypto')>();
  const wrap =
    <A extends unknown[], R>(fn: string, f: (alg: string, key: never, ...rest: A) => R) =>
    (alg: string, key: never, ...rest: A): R => {
      calls.push({ fn, key });
      return f(alg, key, ...rest);
    };
  const wrapped = { createHmac: wrap('createHmac', real.createHmac), createCipheriv: wrap('createCipheriv', real.createCipheriv), createDecipheriv: wrap('createDecipheriv', real.createDecipheriv) };
  return { ...real, ...wrapped, default: { ...real, ...wrapped } };
});

/** The calls since `from` whose key is not a KeyObject (a Buffer or a string imported per call). */
const importedPerCall = (from: number) => calls.slice(from).filter((c) => !types.isKeyObject(c.key)).map((c) => `${c.fn}(${typeof c.key === 'string' ? 'string' : 'Buffer'})`);

describe.skipIf(!backendAvailable())(`keyed calls use keys imported once (${backend})`, () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  }, 60_000);
  afterAll(async () => app?.close());

  it('a login and a cookie refresh sign, make and check the CSRF value with KeyObjects only', async () => {
    const user = await createUser(app);
    const from = calls.length;
    const { cookies } = await login(app, user);
    const jar = `service_refresh_token=${cookie(cookies, 'service_refresh_token')!.value}; service_csrf=${cookie(cookies, 'service_csrf')!.value}`;
    const refreshed = await app.api('POST', '/auth/refresh', { headers: { cookie: jar, 'x-service-csrf': cookie(cookies, 'service_csrf')!.value } });
    expect(refreshed.status).toBe(200);
    // Two signatures, two CSRF values, one CSRF check at least.
    expect(calls.length - from).toBeGreaterThanOrEqual(5);
    expect(importedPerCall(from)).toEqual([]);
  });

  it('sealing, opening and keyed hashes use KeyObjects only', () => {
    const { sealer, keyed } = app.server.keel.secrets;
    const from = calls.length;
    expect(sealer.open(sealer.seal('totp-secret', 'user:1:mfa'), 'user:1:mfa')).toBe('totp-secret');
    expect(keyed.matches('sms:login:u1:123456', keyed.make('sms:login:u1:123456'))).toBe(true);
    expect(calls.length - from).toBe(4);
    expect(importedPerCall(from)).toEqual([]);
  });
});
