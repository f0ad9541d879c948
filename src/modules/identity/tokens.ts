import { jwtVerify, SignJWT, decodeProtectedHeader } from 'jose';
import { randomUUID } from 'node:crypto';
import { clock } from '../../platform/clock.js';
import { sha256Hex } from '../../platform/crypto.js';

export const ACCESS_TOKEN_SECONDS = 900;

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
  key: Uint8Array;
}

/**
 * HS256 access tokens. The first secret signs; every listed secret verifies, picked by `kid`, so the
 * JWT secret can rotate without signing everyone out.
 */
export class AccessTokens {
  readonly #signing: SigningKey;
  readonly #byKid: Map<string, SigningKey>;

  constructor(secrets: Buffer[]) {
    const keys = secrets.map((s) => ({ kid: sha256Hex(s).slice(0, 12), key: new Uint8Array(s) }));
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
    return new SignJWT(body)
      .setProtectedHeader({ alg: 'HS256', kid: this.#signing.kid, typ: 'JWT' })
      .setSubject(claims.sub)
      .setIssuedAt(now)
      .setExpirationTime(now + ACCESS_TOKEN_SECONDS)
      .setJti(randomUUID())
      .sign(this.#signing.key);
  }

  /** Verified claims, or null for anything invalid, expired or signed with an unknown key. */
  async verify(token: string): Promise<(AccessClaims & { iat: number; exp: number }) | null> {
    try {
      const { kid } = decodeProtectedHeader(token);
      const k = kid ? this.#byKid.get(kid) : undefined;
      if (!k) return null;
      const { payload } = await jwtVerify(token, k.key, { algorithms: ['HS256'], currentDate: clock.now() });
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
