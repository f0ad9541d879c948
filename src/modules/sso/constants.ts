/** Single-use purposes (platform/single-use.ts) and lifetimes of the SSO flows (docs/specification.md "Limits"). */
export const SSO_LOGIN_PURPOSE = 'sso_login';
export const SSO_EXCHANGE_PURPOSE = 'sso_exchange';
export const SAML_ASSERTION_PURPOSE = 'sso_saml_assertion';
export const SSO_LOGIN_TTL_MS = 10 * 60_000;
export const SSO_EXCHANGE_TTL_MS = 2 * 60_000;
export const STATE_COOKIE = 'service_sso_state';
/** The browser that started a login (docs/decisions.md "Organisation SSO…": login binding): random, HttpOnly, its hash kept with the login. */
export const BINDING_COOKIE = 'service_sso_binding';
export const BINDING_COOKIE_PATH = '/api/v1/sso';
export const CALLBACK_PATH = '/api/v1/sso/callback';
export const ACS_PATH = '/api/v1/sso/saml/acs';
/** Allowed difference between the IdP's clock and Keel's for SAML NotBefore / NotOnOrAfter. */
export const SAML_CLOCK_SKEW_MS = 60_000;

/**
 * The callback error codes of docs/specification.md "Single sign-on: the login flow", plus
 * `provider_testing` (a trial sign-in by someone who may not manage the organisation's SSO, docs/decisions.md
 * "SSO that explains itself"): nothing else ever reaches the login page's URL.
 */
export type SsoErrorCode = 'session_expired' | 'provider_not_found' | 'domain_not_allowed' | 'user_not_found' | 'default_role_required' | 'no_org_access' | 'sso_error' | 'provider_testing';

/** What a failure is known to be about, once the login session named it (for the audit entry). */
export interface SsoFailureContext {
  providerId?: string;
  orgId?: string;
  /** A partner provider's partner (docs/decisions.md "Partner-level SSO"). */
  partnerId?: string;
  userId?: string;
  /** The IdP subject a refused identity link asserted (audited as `sso.identity.refused`). */
  refusedSubject?: string;
  /** A trial sign-in through a provider in `testing` (audited as `sso.login.trial`). */
  trial?: boolean;
}

/**
 * A callback failure with its callback error code; the internal reason goes to the log and, once the
 * provider is known (`context`), to the `sso.login` failure audit entry, never to the browser.
 */
export class SsoFailure extends Error {
  override name = 'SsoFailure';
  context: SsoFailureContext = {};
  constructor(
    readonly code: SsoErrorCode,
    readonly reason: string,
  ) {
    super(reason);
  }

  /** What a failure through provider `p` is about: the provider and its owner. */
  aboutProvider(p: { id: string; orgId: string | null; partnerId: string | null; status: string }): this {
    return this.about({ providerId: p.id, ...(p.orgId ? { orgId: p.orgId } : {}), ...(p.partnerId ? { partnerId: p.partnerId } : {}), trial: p.status === 'testing' });
  }

  /** Adds what is known (earlier facts win: the innermost throw knows most). */
  about(context: SsoFailureContext): this {
    this.context = { ...context, ...this.context };
    return this;
  }
}
