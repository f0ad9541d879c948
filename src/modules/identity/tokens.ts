import { createHmac, randomUUID, webcrypto, type KeyObject } from 'node:crypto';
import { clock } from '../../platform/clock.js';
import { secretKey, sha256Hex } from '../../platform/crypto.js';
import { lazy } from '../../platform/lazy.js';

export const ACCESS_TOKEN_SECONDS = 900;

/** jose is loaded with the first token, not at start-up. */
const jose = lazy(() => import('jose'));

export interface AccessClaims {
  sub: string;
  sid: string;
  scope: 'system' | 'partner' | 'organization' | null;
  partnerId?: string;
  orgId?: string;
  mfa: boolean;
}

interface SigningKey {
  kid: string;
  /** Imported once: a Buffer key is imported again by every `createHmac` (platform/crypto.ts `secretKey`). */
  secret: KeyObject;
  /** Imported once: jose would otherwise import a WebCrypto key on every verify. */
  key: Promise<webcrypto.CryptoKey>;
}

type VerifiedClaims = AccessClaims & { iat: number; exp: number };

/** Verified tokens kept per process; a signature never stops being valid, so expiry is all to check. */
const VERIFIED_MAX = 50_000;

const base64url = (text: string): string => Buffer.from(text).toString('base64url');

/**
 * The session (`sid`) of an access token this process has just signed, read without verifying: only
 * for answers Keel builds itself (the CSRF cookie of a token answer), never for a token a client sent.
 */
export function sessionIdOf(ownToken: string): string {
  const claims = JSON.parse(Buffer.from(ownToken.split('.')[1] ?? '', 'base64url').toString()) as { sid?: unknown };
  if (typeof claims.sid !== 'string') throw new Error('access token without sid');
  return claims.sid;
}

/** A compact JWS's signature: what tells two tokens apart, in a few dozen characters. */
function signatureOf(token: string): string {
  return token.slice(token.lastIndexOf('.') + 1);
}

/**
 * HS256 access tokens. The first secret signs; every listed secret verifies, picked by `kid`, so the
 * JWT secret can rotate without signing everyone out.
 *
 * Signing is one synchronous HMAC over a fixed header and the JSON claims (RFC 7515 compact form):
 * jose signs through WebCrypto, a job queued on libuv's thread pool behind the logins' Argon2
 * verifies (docs/decisions.md "Cost on the request path…"). Verifying, where a mistake would let a
 * forged token in, stays with jose; the tests verify every signed token with it.
 */
export class AccessTokens {
  readonly #signing: SigningKey;
  /** `base64url({"alg":"HS256","kid":…,"typ":"JWT"}).`, the same for every token of the signing key. */
  readonly #headerPart: string;
  readonly #byKid: Map<string, SigningKey>;

  constructor(secrets: Buffer[]) {
    const keys = secrets.map((s) => ({
      kid: sha256Hex(s).slice(0, 12),
      secret: secretKey(s),
      key: webcrypto.subtle.importKey('raw', new Uint8Array(s), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']),
    }));
    const first = keys[0];
    if (!first) throw new Error('no JWT secret');
    this.#signing = first;
    this.#headerPart = `${base64url(JSON.stringify({ alg: 'HS256', kid: first.kid, typ: 'JWT' }))}.`;
    this.#byKid = new Map(keys.map((k) => [k.kid, k]));
  }

  sign(claims: AccessClaims): string {
    const now = clock.nowSeconds();
    const payload: Record<string, unknown> = { sid: claims.sid, scope: claims.scope, mfa: claims.mfa };
    if (claims.partnerId) payload.partnerId = claims.partnerId;
    if (claims.orgId) payload.orgId = claims.orgId;
    payload.sub = claims.sub;
    payload.iat = now;
    payload.exp = now + ACCESS_TOKEN_SECONDS;
    payload.jti = randomUUID();
    const input = this.#headerPart + base64url(JSON.stringify(payload));
    return `${input}.${createHmac('sha256', this.#signing.secret).update(input).digest('base64url')}`;
  }

  /**
   * Verified tokens by their signature (the part after the last dot; keying by the whole token
   * hashed ~300 characters on every request), each kept with its whole token, which must match.
   */
  readonly #verified = new Map<string, { token: string; claims: VerifiedClaims }>();

  /**
   * Verified claims, or null for anything invalid, expired or signed with an unknown key. Verified
   * tokens are remembered until they expire: revocation is decided by the session check, not here.
   */
  async verify(token: string): Promise<VerifiedClaims | null> {
    const known = this.known(token);
    if (known !== undefined) return known;
    const claims = await this.#verifyFresh(token);
    if (claims) {
      if (this.#verified.size >= VERIFIED_MAX) this.#verified.clear();
      this.#verified.set(signatureOf(token), { token, claims });
    }
    return claims;
  }

  /** `verify` without waiting, for a token verified before: its claims, null once expired, undefined if not known. */
  known(token: string): VerifiedClaims | null | undefined {
    const signature = signatureOf(token);
    const entry = this.#verified.get(signature);
    if (entry?.token !== token) return undefined;
    if (entry.claims.exp > clock.nowSeconds()) return entry.claims;
    this.#verified.delete(signature);
    return null;
  }

  async #verifyFresh(token: string): Promise<VerifiedClaims | null> {
    try {
      const { decodeProtectedHeader, jwtVerify } = await jose();
      const { kid } = decodeProtectedHeader(token);
      const k = kid ? this.#byKid.get(kid) : undefined;
      if (!k) return null;
      const { payload } = await jwtVerify(token, await k.key, { algorithms: ['HS256'], currentDate: clock.now() });
      if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string' || typeof payload.iat !== 'number' || typeof payload.exp !== 'number') {
        return null;
      }
      return {
        sub: payload.sub,
        sid: payload.sid,
        scope: (payload.scope as AccessClaims['scope']) ?? null,
        mfa: payload.mfa === true,
        iat: payload.iat,
        exp: payload.exp,
        ...(typeof payload.partnerId === 'string' ? { partnerId: payload.partnerId } : {}),
        ...(typeof payload.orgId === 'string' ? { orgId: payload.orgId } : {}),
      };
    } catch {
      return null;
    }
  }
}
