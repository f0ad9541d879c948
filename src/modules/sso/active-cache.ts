import type { Keel } from '../../keel.js';

/** Invalidation topic for an organisation's active provider (key: organisation id). */
export const SSO_PROVIDERS_TOPIC = 'sso.providers';

export interface ActiveSummary {
  providerId: string;
  enforceSso: boolean;
}

const MAX_ENTRIES = 50_000;

/**
 * Per process: whether an organisation's active provider enforces SSO, so a password login costs no
 * extra statement once known. Every provider write publishes the organisation on
 * `SSO_PROVIDERS_TOPIC` after commit (here and on every other process: DECISIONS "Caches"); a load
 * that overlapped an invalidation is not stored (generation counter).
 */
export class ActiveProviderCache {
  readonly #entries = new Map<string, ActiveSummary | null>();
  #generation = 0;

  constructor(private readonly keel: Keel) {
    keel.invalidation.on(SSO_PROVIDERS_TOPIC, (orgId) => {
      this.#generation++;
      if (orgId === '*') this.#entries.clear();
      else this.#entries.delete(orgId);
    });
  }

  async get(orgId: string, load: () => Promise<ActiveSummary | null>): Promise<ActiveSummary | null> {
    if (this.#entries.has(orgId)) return this.#entries.get(orgId) ?? null;
    const generation = this.#generation;
    const value = await load();
    if (generation === this.#generation) {
      if (this.#entries.size >= MAX_ENTRIES) this.#entries.clear();
      this.#entries.set(orgId, value);
    }
    return value;
  }

  /** After a provider write commits. */
  changed(orgId: string): Promise<void> {
    return this.keel.invalidation.publish(SSO_PROVIDERS_TOPIC, orgId);
  }
}

const caches = new WeakMap<Keel, ActiveProviderCache>();

export function activeCacheOf(keel: Keel): ActiveProviderCache {
  let cache = caches.get(keel);
  if (!cache) {
    cache = new ActiveProviderCache(keel);
    caches.set(keel, cache);
  }
  return cache;
}
