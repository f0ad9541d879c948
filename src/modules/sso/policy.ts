import type { Keel } from '../../keel.js';
import { getMembership } from '../access/service.js';
import { registerPasswordPolicy, type PasswordPolicy } from '../identity/password-policy.js';
import { activeProvider } from './providers.js';
import { activeCacheOf } from './active-cache.js';
import { verifiedDomainOrg } from '../domains/service.js';
import { ssoError } from './errors.js';
import { ssoLoginUrl } from './locations.js';

/** 403 `sso_required` with where to sign in instead: `details.loginUrl` (docs/decisions.md "SSO that explains itself"). */
export const ssoRequired = (keel: Keel, orgId: string) =>
  ssoError('sso_required', { details: { loginUrl: ssoLoginUrl(keel, orgId) } });

/**
 * Enforced SSO (docs/specification.md "Single sign-on: the login flow") as a password policy of the identity module: a member of an organisation
 * whose active provider has `enforceSSO` cannot sign in with a password (403 `sso_required`) and gets
 * no reset link. A platform administrator keeps password sign-in as break-glass, audited
 * `user.login.break_glass`.
 */
export function enforcedSsoPolicy(keel: Keel): PasswordPolicy {
  // Cached per process with cross-process invalidation: a password login of a member costs no statement here once known.
  const enforcing = (orgId: string) =>
    activeCacheOf(keel).get(orgId, async () => {
      const row = await activeProvider(keel.db, orgId);
      return row ? { providerId: row.id, enforceSso: row.enforceSso } : null;
    });
  return async (user, use) => {
    const m = await getMembership(keel, user.id);
    // Partner users are no organisation's members: they keep password sign-in.
    if (m?.kind === 'partner') return null;
    let orgId = m?.kind === 'organization' ? m.orgId : null;
    let p = orgId ? await enforcing(orgId) : null;
    if (!p?.enforceSso) {
      // An address of a domain an organisation verified is held to that organisation's enforced SSO (docs/decisions.md "Verified domains and SSO step-up").
      const owner = await verifiedDomainOrg(keel.db, user.email);
      if (owner && owner !== orgId) {
        orgId = owner;
        p = await enforcing(owner);
      }
    }
    if (!orgId || !p?.enforceSso) return null;
    if (user.isPlatformAdmin) {
      return use === 'login' ? { refuse: false, audit: { action: 'user.login.break_glass', orgId, details: { providerId: p.providerId, reason: 'enforced_sso' } } } : null;
    }
    return { refuse: true, error: ssoRequired(keel, orgId) };
  };
}

export function registerEnforcedSso(keel: Keel): void {
  registerPasswordPolicy(keel, enforcedSsoPolicy(keel));
}
