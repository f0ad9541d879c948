import type * as client from 'openid-client';
import type { Keel } from '../../keel.js';
import type { KeelModule } from '../../platform/module.js';
import { ActiveProviderCache } from './active-cache.js';
import { registerEnforcedSso } from './policy.js';

/** The SSO module's per-process state. */
export interface Sso {
  /** Whether an organisation's active provider enforces SSO (active-cache.ts). */
  activeProviders: ActiveProviderCache;
  /** The key sets logins fetched, per issuer and JWKS URL (oidc.ts `rememberJwks`). */
  jwks: Map<string, client.ExportedJWKSCache>;
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
  return { handle: { activeProviders: new ActiveProviderCache(keel), jwks: new Map() } };
}
