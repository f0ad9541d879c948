import type { Keel } from '../../keel.js';
import { AppError } from '../../platform/http/errors.js';
import { getMembership } from '../access/service.js';
import { registerPasswordPolicy, type PasswordPolicy } from '../identity/password-policy.js';
import { activeProvider } from './providers.js';
import { activeCacheOf } from './active-cache.js';

export const ssoRequired = () =>
  new AppError(403, 'sso_required', 'Your organization requires single sign-on: sign in through your identity provider');

/**
 * Enforced SSO (SPEC 5.11) as a password policy of the identity module: a member of an organisation
 * whose active provider has `enforceSSO` cannot sign in with a password (403 `sso_required`) and gets
 * no reset link. A platform administrator keeps password sign-in as break-glass, audited
 * `user.login.break_glass`.
 */
export function enforcedSsoPolicy(keel: Keel): PasswordPolicy {
  return async (user, use) => {
    const m = await getMembership(keel.db, user.id);
    if (m?.kind !== 'organization') return null;
    const orgId = m.orgId;
    // Cached per process with cross-process invalidation: a password login of a member costs no statement here once known.
    const p = await activeCacheOf(keel).get(orgId, async () => {
      const row = await activeProvider(keel.db, orgId);
      return row ? { providerId: row.id, enforceSso: row.enforceSso } : null;
    });
    if (!p?.enforceSso) return null;
    if (user.isPlatformAdmin) {
      return use === 'login' ? { refuse: false, audit: { action: 'user.login.break_glass', orgId, details: { providerId: p.providerId, reason: 'enforced_sso' } } } : null;
    }
    return { refuse: true, error: ssoRequired() };
  };
}

export function registerEnforcedSso(keel: Keel): void {
  registerPasswordPolicy(keel, enforcedSsoPolicy(keel));
}
