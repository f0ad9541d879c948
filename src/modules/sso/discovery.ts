import type { Keel } from '../../keel.js';
import { verifiedDomainOwner } from '../domains/service.js';
import { relyingPartyOf } from '../mfa/webauthn.js';
import { activeCacheOf } from './active-cache.js';
import { activeProvider } from './providers.js';
import { ssoLoginUrl } from './locations.js';

/** What the sign-in page does next for an email (docs/decisions.md "Sign-in options"). */
export interface SignInRoute {
  method: 'password' | 'sso';
  loginUrl?: string;
  passwordAllowed: boolean;
  passkey: boolean;
}

/** Where an owner of a verified domain signs in: its active provider's start URL, and whether it enforces SSO. */
export interface DomainSignIn {
  loginUrl: string;
  enforceSso: boolean;
}

/**
 * The one lookup "domain → active provider": the owner of the verified domain covering the email, and
 * that owner's active provider. An organisation's provider comes from the per-process active-provider
 * cache; a partner-owned domain resolves through `partnerSignIn` (none yet: partner-level providers
 * join the lookup there, under the same domain rule).
 */
export async function domainSignIn(keel: Keel, email: string): Promise<DomainSignIn | null> {
  const owner = await verifiedDomainOwner(keel.db, email);
  if (!owner) return null;
  if (owner.orgId) return orgSignIn(keel, owner.orgId);
  return owner.partnerId ? partnerSignIn(keel, owner.partnerId) : null;
}

async function orgSignIn(keel: Keel, orgId: string): Promise<DomainSignIn | null> {
  const active = await activeCacheOf(keel).get(orgId, async () => {
    const row = await activeProvider(keel.db, orgId);
    return row ? { providerId: row.id, enforceSso: row.enforceSso } : null;
  });
  return active ? { loginUrl: ssoLoginUrl(keel, orgId), enforceSso: active.enforceSso } : null;
}

/** A partner's own provider: not yet configurable, so a partner-owned domain signs in with a password. */
function partnerSignIn(_keel: Keel, _partnerId: string): Promise<DomainSignIn | null> {
  return Promise.resolve(null);
}

/**
 * `POST /auth/discover {email}`: `sso` with the provider's `loginUrl` when the email's domain is
 * verified by an owner with an active provider (`passwordAllowed` unless it enforces SSO), else
 * `password`; `passkey` when this deployment offers passkeys at all (never per account). It reads
 * the domain only, never an account, so every address of a domain gets the same answer after the
 * same work. Limited per email address and per source address.
 */
export async function discoverSignIn(keel: Keel, email: string, ip: string | null): Promise<SignInRoute> {
  const { discover, discoverIp } = keel.modules.get('sso').limits;
  await Promise.all([discover.consume(email.trim().toLowerCase()), discoverIp.consume(ip ?? 'unknown')]);
  const passkey = keel.config.ENABLE_2FA && relyingPartyOf(keel).ok;
  const sso = await domainSignIn(keel, email);
  return sso ? { method: 'sso', loginUrl: sso.loginUrl, passwordAllowed: !sso.enforceSso, passkey } : { method: 'password', passwordAllowed: true, passkey };
}
