import type { ProviderRow } from './providers.js';

/**
 * OIDC `amr` values (RFC 8176) that mean the IdP checked more than a password: `mfa` itself, a
 * one-time password, a hardware or software key, proof of possession.
 */
export const MFA_AMR_VALUES: readonly string[] = ['mfa', 'otp', 'hwk', 'swk', 'pop'];

/** What an IdP said about how it authenticated the user: OIDC `amr` and `acr` from the ID token, SAML's AuthnContextClassRef as `acr`. */
export interface AuthnClaims {
  amr?: unknown;
  acr?: unknown;
}

/**
 * The one decision whether an SSO session starts `mfa: true` (docs/decisions.md "Verified domains and
 * SSO step-up"): the IdP asserted a second factor, either by an `amr` entry of `MFA_AMR_VALUES`, or
 * by an `acr` (OIDC) / AuthnContextClassRef (SAML) equal to one of the provider's `mfaAcrValues` (an
 * administrator's list, empty by default: no acr counts until configured). Only claims of the signed
 * ID token or assertion are passed here, never UserInfo.
 */
export function providerAssertedMfa(provider: Pick<ProviderRow, 'mfaAcrValues'>, claims: AuthnClaims): boolean {
  const amr = Array.isArray(claims.amr) ? claims.amr : typeof claims.amr === 'string' ? [claims.amr] : [];
  if (amr.some((v) => typeof v === 'string' && MFA_AMR_VALUES.includes(v.toLowerCase()))) return true;
  const acrs = Array.isArray(claims.acr) ? claims.acr : [claims.acr];
  return acrs.some((acr) => typeof acr === 'string' && acr !== '' && provider.mfaAcrValues.includes(acr));
}

type XmlNode = string | { _?: unknown } | undefined;
interface ParsedAssertion {
  Assertion?: { AuthnStatement?: { AuthnContext?: { AuthnContextClassRef?: XmlNode[] }[] }[] };
}

/**
 * The AuthnContextClassRef values of a validated SAML assertion (node-saml's `profile.getAssertion()`,
 * the signed assertion parsed), to pass to `providerAssertedMfa` as `acr`.
 */
export function samlAuthnContextClassRefs(profile: { getAssertion?: () => unknown }): string[] {
  const assertion = (profile.getAssertion?.() as ParsedAssertion | undefined)?.Assertion;
  const out: string[] = [];
  for (const statement of assertion?.AuthnStatement ?? []) {
    for (const context of statement.AuthnContext ?? []) {
      for (const ref of context.AuthnContextClassRef ?? []) {
        const text = typeof ref === 'string' ? ref : typeof ref?._ === 'string' ? ref._ : undefined;
        if (text) out.push(text.trim());
      }
    }
  }
  return out;
}
