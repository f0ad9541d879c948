import type { Keel } from '../../keel.js';
import { verifiedDomainOwner } from '../domains/service.js';
import { relyingPartyOf } from '../mfa/webauthn.js';
import { partnerSlugOf } from './providers.js';
import { partnerSsoLoginUrl, ssoLoginUrl } from './locations.js';
import { enforcingOf } from './policy.js';

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
 * that owner's active provider, from the per-process active-provider cache: an organisation's
 * (`orgSignIn`) or a partner's (`partnerSignIn`, docs/decisions.md "Partner-level SSO").
 */
export async function domainSignIn(keel: Keel, email: string): Promise<DomainSignIn | null> {
  const owner = await verifiedDomainOwner(keel.db, email);
  if (!owner) return null;
  if (owner.orgId) return orgSignIn(keel, owner.orgId);
  return owner.partnerId ? partnerSignIn(keel, owner.partnerId) : null;
}

async function orgSignIn(keel: Keel, orgId: string): Promise<DomainSignIn | null> {
  const active = await enforcingOf(keel, { orgId });
  return active ? { loginUrl: ssoLoginUrl(keel, orgId), enforceSso: active.enforceSso } : null;
}

/** A partner's own provider: its sign-in start by the partner's slug (read each time: a slug may change). */
async function partnerSignIn(keel: Keel, partnerId: string): Promise<DomainSignIn | null> {
  const active = await enforcingOf(keel, { partnerId });
  const slug = active ? await partnerSlugOf(keel.db, partnerId) : null;
  return active && slug ? { loginUrl: partnerSsoLoginUrl(keel, slug), enforceSso: active.enforceSso } : null;
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
