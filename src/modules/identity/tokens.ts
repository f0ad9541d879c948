import { randomUUID, webcrypto } from 'node:crypto';
import { clock } from '../../platform/clock.js';
import { sha256Hex } from '../../platform/crypto.js';
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
  /** Imported once: jose would otherwise import a WebCrypto key on every sign and verify. */
  key: Promise<webcrypto.CryptoKey>;
}

type VerifiedClaims = AccessClaims & { iat: number; exp: number };

/** Verified tokens kept per process; a signature never stops being valid, so expiry is all to check. */
const VERIFIED_MAX = 50_000;

/**
 * HS256 access tokens. The first secret signs; every listed secret verifies, picked by `kid`, so the
 * JWT secret can rotate without signing everyone out.
 */
export class AccessTokens {
  readonly #signing: SigningKey;
  readonly #byKid: Map<string, SigningKey>;

  constructor(secrets: Buffer[]) {
    const keys = secrets.map((s) => ({
      kid: sha256Hex(s).slice(0, 12),
      key: webcrypto.subtle.importKey('raw', new Uint8Array(s), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']),
    }));
    const first = keys[0];
    if (!first) throw new Error('no JWT secret');
    this.#signing = first;
    this.#byKid = new Map(keys.map((k) => [k.kid, k]));
  }

  async sign(claims: AccessClaims): Promise<string> {
    const now = clock.nowSeconds();
    const body: Record<string, unknown> = { sid: claims.sid, scope: claims.scope, mfa: claims.mfa };
    if (claims.partnerId) body.partnerId = claims.partnerId;
    if (claims.orgId) body.orgId = claims.orgId;
    const { SignJWT } = await jose();
    return new SignJWT(body)
      .setProtectedHeader({ alg: 'HS256', kid: this.#signing.kid, typ: 'JWT' })
      .setSubject(claims.sub)
      .setIssuedAt(now)
      .setExpirationTime(now + ACCESS_TOKEN_SECONDS)
      .setJti(randomUUID())
      .sign(await this.#signing.key);
  }

  readonly #verified = new Map<string, VerifiedClaims>();

  /**
   * Verified claims, or null for anything invalid, expired or signed with an unknown key. Verified
   * tokens are remembered until they expire: revocation is decided by the session check, not here.
   */
  async verify(token: string): Promise<VerifiedClaims | null> {
    const known = this.#verified.get(token);
    if (known) {
      if (known.exp > clock.nowSeconds()) return known;
      this.#verified.delete(token);
      return null;
    }
    const claims = await this.#verifyFresh(token);
    if (claims) {
      if (this.#verified.size >= VERIFIED_MAX) this.#verified.clear();
      this.#verified.set(token, claims);
    }
    return claims;
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
