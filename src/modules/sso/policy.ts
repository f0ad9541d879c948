import type { Keel } from '../../keel.js';
import { getMembership } from '../access/service.js';
import { registerPasswordPolicy, type PasswordPolicy } from '../identity/password-policy.js';
import { activeProvider, partnerSlugOf, type ProviderOwner } from './providers.js';
import { activeCacheOf, type ActiveSummary } from './active-cache.js';
import { cachedVerifiedDomainOrg } from '../domains/service.js';
import { ssoError } from './errors.js';
import { partnerSsoLoginUrl, ssoLoginUrl } from './locations.js';

/** 403 `sso_required` with where to sign in instead: `details.loginUrl` (docs/decisions.md "SSO that explains itself"). */
export const ssoRequired = (keel: Keel, orgId: string) =>
  ssoError('sso_required', { details: { loginUrl: ssoLoginUrl(keel, orgId) } });

/** The same for a partner's technicians: the partner's sign-in start (docs/decisions.md "Partner-level SSO"). */
const partnerSsoRequired = (keel: Keel, slug: string | null) =>
  ssoError('sso_required', { message: 'Your partner requires single sign-on: sign in through your identity provider', ...(slug ? { details: { loginUrl: partnerSsoLoginUrl(keel, slug) } } : {}) });

/**
 * The owner's active provider in short (whether it enforces SSO, its break-glass members), cached per
 * process with cross-process invalidation: a password login costs no statement here once known.
 */
export function enforcingOf(keel: Keel, owner: ProviderOwner): Promise<ActiveSummary | null> {
  const key = 'orgId' in owner ? owner.orgId : `partner:${owner.partnerId}`;
  return activeCacheOf(keel).get(key, async () => {
    const row = await activeProvider(keel.db, owner);
    return row ? { providerId: row.id, enforceSso: row.enforceSso, breakGlassUserIds: row.breakGlassUserIds } : null;
  });
}

/**
 * Enforced SSO (docs/specification.md "Single sign-on: the login flow") as a password policy of the identity module: a member of an organisation
 * whose active provider has `enforceSSO` cannot sign in with a password (403 `sso_required`) and gets
 * no reset link. A platform administrator keeps password sign-in as break-glass, audited
 * `user.login.break_glass`. A partner's technicians are held to their partner's provider the same
 * way (docs/decisions.md "Partner-level SSO"); its break-glass accounts are the members the provider
 * names in `breakGlassUserIds` (and platform administrators), audited alike.
 */
export function enforcedSsoPolicy(keel: Keel): PasswordPolicy {
  return async (user, use) => {
    const m = await getMembership(keel, user.id);
    if (m?.kind === 'partner') {
      // A partner's technicians answer to their partner's provider only (never to an organisation's domain rule).
      const p = await enforcingOf(keel, { partnerId: m.partnerId });
      if (!p?.enforceSso) return null;
      if (user.isPlatformAdmin || (p.breakGlassUserIds ?? []).includes(user.id)) {
        return use === 'login' ? { refuse: false, audit: { action: 'user.login.break_glass', orgId: null, partnerId: m.partnerId, details: { providerId: p.providerId, reason: 'enforced_sso' } } } : null;
      }
      return { refuse: true, error: partnerSsoRequired(keel, await partnerSlugOf(keel.db, m.partnerId)) };
    }
    let orgId = m?.kind === 'organization' ? m.orgId : null;
    let p = orgId ? await enforcingOf(keel, { orgId }) : null;
    if (!p?.enforceSso) {
      // An address of a domain an organisation verified is held to that organisation's enforced SSO (docs/decisions.md "Verified domains and SSO step-up").
      const owner = await cachedVerifiedDomainOrg(keel, user.email);
      if (owner && owner !== orgId) {
        orgId = owner;
        p = await enforcingOf(keel, { orgId: owner });
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
