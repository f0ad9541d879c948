import type { Keel } from '../../keel.js';
import type { SsoErrorCode } from './constants.js';

/** Where a finished login goes: the original page, with the exchange code in the fragment (never sent to a server). */
export function successLocation(keel: Keel, redirectPath: string, code: string): string {
  return `${keel.config.publicUrl}${redirectPath}#ssoCode=${encodeURIComponent(code)}`;
}

/**
 * Where a failed login goes: the login page with one of the codes of docs/specification.md "Single
 * sign-on: the login flow" and, once the login session named it, the organisation (`&org=`), so the
 * page still offers that organisation's sign-in.
 */
export function errorLocation(keel: Keel, code: SsoErrorCode, orgId?: string, partnerSlug?: string): string {
  // A partner sign-in goes back to the partner's own page (docs/decisions.md "Partner-level SSO").
  if (partnerSlug) return `${keel.config.publicUrl}/login/${encodeURIComponent(partnerSlug)}?error=${code}`;
  return `${keel.config.publicUrl}/login?error=${code}${orgId ? `&org=${encodeURIComponent(orgId)}` : ''}`;
}

/** The organisation's SSO sign-in start (`GET /api/v1/sso/login/:orgId`), absolute on PUBLIC_URL. */
export function ssoLoginUrl(keel: Keel, orgId: string): string {
  return `${keel.config.publicUrl}/api/v1/sso/login/${orgId}`;
}

/** A partner's SSO sign-in start (`GET /api/v1/sso/login/partner/:partnerSlug`), absolute on PUBLIC_URL. */
export function partnerSsoLoginUrl(keel: Keel, slug: string): string {
  return `${keel.config.publicUrl}/api/v1/sso/login/partner/${slug}`;
}
