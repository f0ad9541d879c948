import type { Keel } from '../../keel.js';
import { InvalidatedCache } from '../../platform/cache.js';

/** Invalidation topic for an organisation's active provider (key: organisation id, or `partner:<id>` for a partner's). */
export const SSO_PROVIDERS_TOPIC = 'sso.providers';

export interface ActiveSummary {
  providerId: string;
  enforceSso: boolean;
  /** A partner provider's break-glass members (docs/decisions.md "Partner-level SSO"). */
  breakGlassUserIds?: string[];
}

const MAX_ENTRIES = 50_000;

/**
 * Per process: whether an organisation's active provider enforces SSO, so a password login costs no
 * extra statement once known (platform/cache.ts). Every provider write publishes the organisation on
 * `SSO_PROVIDERS_TOPIC` after commit (here and on every other process: docs/decisions.md "Caches").
 */
export class ActiveProviderCache {
  readonly #cache: InvalidatedCache<ActiveSummary | null>;

  constructor(private readonly keel: Keel) {
    this.#cache = new InvalidatedCache<ActiveSummary | null>({ max: MAX_ENTRIES }).listen(keel.invalidation, SSO_PROVIDERS_TOPIC);
  }

  get(orgId: string, load: () => Promise<ActiveSummary | null>): Promise<ActiveSummary | null> {
    return this.#cache.get(orgId, load);
  }

  /** After a provider write commits. */
  changed(orgId: string): Promise<void> {
    return this.keel.invalidation.publish(SSO_PROVIDERS_TOPIC, orgId);
  }
}

/** The cache of a Keel, held by the SSO module's handle (module.ts `installSso`). */
export function activeCacheOf(keel: Keel): ActiveProviderCache {
  return keel.modules.get('sso').activeProviders;
}
