/**
 * Access tokens (modules/identity/tokens.ts): Keel signs HS256 itself with one HMAC, so every token is
 * checked here by jose on its own (a standard JWT that any library accepts), and Keel's verifier is
 * checked against forgeries: another key, a changed claim, `alg: none`, expiry on the shared clock,
 * and rotation to a new secret with the previous one still verifying.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { decodeProtectedHeader, jwtVerify } from 'jose';
import { AccessTokens, ACCESS_TOKEN_SECONDS } from '../../src/modules/identity/tokens.js';
import { clock } from '../../src/platform/clock.js';

const claims = { sub: '0192f3a4-5b6c-7d8e-9f00-112233445566', sid: '0192f3a4-5b6c-7d8e-9f00-665544332211', scope: 'organization' as const, orgId: '0192f3a4-0000-7000-8000-000000000001', mfa: true };

describe('access tokens', () => {
  afterEach(() => clock.reset());

  it('are standard HS256 JWTs: jose verifies them with the secret and reads every claim', async () => {
    const secret = randomBytes(48);
    const token = new AccessTokens([secret]).sign(claims);
    const { payload, protectedHeader } = await jwtVerify(token, new Uint8Array(secret), { algorithms: ['HS256'] });
    expect(protectedHeader).toEqual({ alg: 'HS256', typ: 'JWT', kid: expect.stringMatching(/^[0-9a-f]{12}$/) });
    expect(payload).toMatchObject({ ...claims, iat: expect.any(Number), jti: expect.any(String) });
    expect(payload.exp).toBe((payload.iat as number) + ACCESS_TOKEN_SECONDS);
    expect(payload).not.toHaveProperty('partnerId');
  });

  it('verify: its own tokens pass; another key, an edited claim or alg none do not', async () => {
    const tokens = new AccessTokens([randomBytes(48)]);
    const token = tokens.sign(claims);
    expect(await tokens.verify(token)).toMatchObject(claims);

    expect(await tokens.verify(new AccessTokens([randomBytes(48)]).sign(claims))).toBeNull();

    const [header, payload, signature] = token.split('.');
    const edited = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), scope: 'system' })).toString('base64url');
    expect(await tokens.verify(`${header}.${edited}.${signature}`)).toBeNull();

    const none = Buffer.from(JSON.stringify({ ...decodeProtectedHeader(token), alg: 'none' })).toString('base64url');
    expect(await tokens.verify(`${none}.${payload}.`)).toBeNull();
    expect(await tokens.verify(`${none}.${payload}.${signature}`)).toBeNull();
  });

  it('expire after 15 minutes on the shared clock, even once remembered as verified', async () => {
    clock.freeze(); // a second's margin below: real time must not move it
    const tokens = new AccessTokens([randomBytes(48)]);
    const token = tokens.sign(claims);
    expect(await tokens.verify(token)).not.toBeNull();
    clock.advance((ACCESS_TOKEN_SECONDS - 1) * 1000);
    expect(await tokens.verify(token)).not.toBeNull();
    clock.advance(2000);
    expect(await tokens.verify(token)).toBeNull();
  });

  it('rotate: the new secret signs, tokens of the previous one still verify, unknown ones do not', async () => {
    const previous = randomBytes(48);
    const old = new AccessTokens([previous]).sign(claims);
    const rotated = new AccessTokens([randomBytes(48), previous]);
    expect(await rotated.verify(old)).toMatchObject(claims);
    const fresh = rotated.sign(claims);
    expect(decodeProtectedHeader(fresh).kid).not.toBe(decodeProtectedHeader(old).kid);
    expect(await rotated.verify(fresh)).toMatchObject(claims);
    expect(await new AccessTokens([previous]).verify(fresh)).toBeNull();
  });
});
