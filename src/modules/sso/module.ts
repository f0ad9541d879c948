import type * as client from 'openid-client';
import type { Keel } from '../../keel.js';
import type { KeelModule } from '../../platform/module.js';
import type { Limit } from '../../platform/rate-limit.js';
import { ActiveProviderCache } from './active-cache.js';
import { registerEnforcedSso } from './policy.js';

/** The SSO module's per-process state: its caches and limits. */
export interface Sso {
  /** Whether an organisation's active provider enforces SSO (active-cache.ts). */
  activeProviders: ActiveProviderCache;
  /** The key sets logins fetched, per issuer and JWKS URL (oidc.ts `rememberJwks`). */
  jwks: Map<string, client.ExportedJWKSCache>;
  limits: SsoLimits;
}

export interface SsoLimits {
  exchangeLimit: Limit;
  loginLimit: Limit;
  acsLimit: Limit;
  /** The public partner sign-in page's lookup by slug, per source address. */
  partnerPageLimit: Limit;
  /** Sign-in discovery per email address, and per source address (discovery.ts). */
  discover: Limit;
  discoverIp: Limit;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    sso: Sso;
  }
}

/**
 * Installs the SSO module (after identity): its caches, and enforced SSO on identity's password-policy
 * port (it takes part in password sign-in and reset). It runs no job.
 */
export function installSso(keel: Keel): KeelModule<Sso> {
  registerEnforcedSso(keel);
  const limits: SsoLimits = {
    exchangeLimit: keel.limits.define('sso-exchange', keel.config.SSO_EXCHANGE_LIMIT, 60),
    loginLimit: keel.limits.define('sso-login', keel.config.SSO_LOGIN_LIMIT, 60),
    acsLimit: keel.limits.define('sso-saml-acs', keel.config.SAML_ACS_LIMIT, 60),
    partnerPageLimit: keel.limits.define('sso-partner-page', keel.config.SSO_LOGIN_LIMIT, 60),
    discover: keel.limits.define('discover', keel.config.DISCOVER_LIMIT, 60),
    discoverIp: keel.limits.define('discover-ip', keel.config.DISCOVER_IP_LIMIT, 60),
  };
  return { handle: { activeProviders: new ActiveProviderCache(keel), jwks: new Map(), limits } };
}
