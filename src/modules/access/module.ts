import type { Keel } from '../../keel.js';
import type { InvalidatedCache } from '../../platform/cache.js';
import type { KeelModule } from '../../platform/module.js';
import { createKeyCache, type KeyRecord } from './api-keys.js';
import { createOrgCache, type OrgTenant } from './org-cache.js';
import { createRoleCache, type RoleCache } from './role-cache.js';
import { createMembershipCache, type Membership } from './service.js';

/** The access module's per-process caches, each cleared on its invalidation topics (docs/decisions.md "Caches on the request path"). */
export interface Access {
  /** Role chains (role-cache.ts). */
  roles: RoleCache;
  /** Each user's one association (service.ts `getMembership`). */
  memberships: InvalidatedCache<Membership | null>;
  /** Organisations by id with their partner (org-cache.ts). */
  orgs: InvalidatedCache<OrgTenant | null>;
  /** Usable API keys by hash (api-keys.ts). */
  keys: InvalidatedCache<KeyRecord | null>;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    access: Access;
  }
}

/** Installs the access module: its caches, in every process (not only one that mounts routes). It runs no job. */
export function installAccess(keel: Keel): KeelModule<Access> {
  return { handle: { roles: createRoleCache(keel), memberships: createMembershipCache(keel), orgs: createOrgCache(keel), keys: createKeyCache(keel) } };
}
