import type { Keel } from '../../keel.js';
import { eq } from 'drizzle-orm';
import { InvalidatedCache } from '../../platform/cache.js';
import { organizations } from '../tenancy/schema.js';

/** Published (organisation id) when an organisation is deleted: every process drops it. */
export const ORGS_TOPIC = 'tenancy.orgs';

/** What entering an organisation by id needs: that it exists, and its partner (which never changes). */
export interface OrgTenant {
  id: string;
  partnerId: string | null;
}

/** Creates the organisation cache of a Keel (when the access module is installed). */
export function createOrgCache(keel: Keel): InvalidatedCache<OrgTenant | null> {
  return new InvalidatedCache<OrgTenant | null>({ keep: (v) => v !== null }).listen(keel.invalidation, ORGS_TOPIC);
}

/**
 * The organisation `orgId` (id and partner), cached per process (docs/decisions.md "Caches"): a request that
 * names an organisation (an API key publishing events, a partner acting in one of its organisations)
 * reads no row. An organisation's partner is never changed, so only a deletion drops an entry
 * (ORGS_TOPIC, in every process); an unknown id is not kept, so a new organisation is found at once.
 */
export function cachedOrgTenant(keel: Keel, orgId: string): Promise<OrgTenant | null> {
  return keel.modules.get('access').orgs.get(orgId, async () => {
    const [row] = await keel.db.select({ id: organizations.id, partnerId: organizations.partnerId }).from(organizations).where(eq(organizations.id, orgId));
    return row ?? null;
  });
}
