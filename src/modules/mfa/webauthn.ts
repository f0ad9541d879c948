import { isIP } from 'node:net';
import type { Config } from '../../config.js';
import type { Keel } from '../../keel.js';
import type { KeelModule } from '../../platform/module.js';
import { defineMfaLimits, type MfaLimits } from './common.js';
import { mfaError } from './errors.js';

/** Shown to the user by the authenticator when a passkey is created. */
export const RP_NAME = 'Keel';

export interface RelyingParty {
  rpId: string;
  rpName: string;
  /** The exact origin pages calling WebAuthn run on (scheme://host[:port]). */
  origin: string;
}

export type RelyingPartyResult = { ok: true; rp: RelyingParty } | { ok: false; reason: string };

/**
 * WebAuthn relying party (docs/decisions.md "Keys and URLs"): RP ID is WEBAUTHN_RP_ID or the host of
 * PUBLIC_URL, origin is WEBAUTHN_ORIGIN or PUBLIC_URL's origin. Browsers refuse an IP address as
 * RP ID, an origin whose host is not the RP ID or a subdomain of it, and plain http anywhere but
 * localhost; such a setup is reported here instead of failing in every browser.
 */
export function resolveRelyingParty(config: Pick<Config, 'WEBAUTHN_RP_ID' | 'WEBAUTHN_ORIGIN' | 'publicUrl'>): RelyingPartyResult {
  let origin: URL;
  try {
    origin = new URL(config.WEBAUTHN_ORIGIN ?? config.publicUrl);
  } catch {
    return { ok: false, reason: 'WEBAUTHN_ORIGIN / PUBLIC_URL is not a URL' };
  }
  const originHost = origin.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const rpId = (config.WEBAUTHN_RP_ID ?? originHost).replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
  if (isIP(rpId) !== 0) {
    return {
      ok: false,
      reason: `the WebAuthn RP ID "${rpId}" is an IP address, which browsers refuse: use a host name (PUBLIC_URL=http://localhost:<port> in development, or set WEBAUTHN_RP_ID)`,
    };
  }
  if (!/^[a-z0-9-]+(\.[a-z0-9-]+)*$/.test(rpId)) return { ok: false, reason: `the WebAuthn RP ID "${rpId}" is not a host name` };
  if (originHost !== rpId && !originHost.endsWith(`.${rpId}`)) {
    return { ok: false, reason: `the WebAuthn origin ${origin.origin} is not on the RP ID "${rpId}" or a subdomain of it` };
  }
  const localhost = originHost === 'localhost' || originHost.endsWith('.localhost');
  if (origin.protocol !== 'https:' && !(origin.protocol === 'http:' && localhost)) {
    return { ok: false, reason: `the WebAuthn origin ${origin.origin} must be https (plain http only on localhost)` };
  }
  return { ok: true, rp: { rpId, rpName: RP_NAME, origin: origin.origin } };
}

/** The MFA module's per-process state: its limits and the relying party, resolved for the public URL it was resolved for. */
export interface Mfa {
  limits: MfaLimits;
  relyingParty: { publicUrl: string; result: RelyingPartyResult } | null;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    mfa: Mfa;
  }
}

/** Installs the MFA module. It runs no job. */
export function installMfa(keel: Keel): KeelModule<Mfa> {
  return { handle: { limits: defineMfaLimits(keel), relyingParty: null } };
}

/**
 * The relying party of this Keel, resolved once for its public URL (a server listening on port 0
 * completes PUBLIC_URL after the modules are installed); a bad setup is logged once as a warning.
 */
export function relyingPartyOf(keel: Keel): RelyingPartyResult {
  const mfa = keel.modules.get('mfa');
  const publicUrl = keel.config.publicUrl;
  if (mfa.relyingParty?.publicUrl !== publicUrl) {
    const result = resolveRelyingParty(keel.config);
    if (!result.ok && keel.config.ENABLE_2FA) keel.log.warn({ reason: result.reason }, 'passkeys are unavailable: WebAuthn relying party misconfigured');
    mfa.relyingParty = { publicUrl, result };
  }
  return mfa.relyingParty.result;
}

/** The relying party, or 503 `passkeys_unavailable` naming what is wrong with the setup. */
export function requireRelyingParty(keel: Keel): RelyingParty {
  const r = relyingPartyOf(keel);
  if (!r.ok) throw mfaError('passkeys_unavailable', { message: `Passkeys are not available on this server: ${r.reason}` });
  return r.rp;
}
