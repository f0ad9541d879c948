import { sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { InvalidatedCache, type Selection } from '../../platform/cache.js';
import { rowsOf, type Db } from '../../platform/db/client.js';
import { PermissionSet, type PermissionPair } from './permissions.js';
import { PROFILE_TOPIC } from '../identity/sessions.js';

/** Invalidation topic for roles; the key is a role id, or `*` for every role. */
export const ROLES_TOPIC = 'access.roles';

/** One role of an inheritance chain with its direct permissions. */
export interface ChainRole {
  id: string;
  name: string;
  parentRoleId: string | null;
  forceMfa: boolean;
  isSystem: boolean;
  direct: PermissionPair[];
}

/** A role resolved through its ancestors: what it grants at request time. */
export interface ResolvedRole {
  roleId: string;
  /** The role itself first, then its parent, grandparent, ... */
  chain: ChainRole[];
  permissions: PermissionSet;
  /** The role or one of its ancestors has Force MFA on. */
  forceMfa: boolean;
}

/** Inheritance deeper than this is refused on write; the loader stops here even if data says otherwise. */
export const MAX_CHAIN_DEPTH = 16;

interface ChainRow {
  id: string;
  name: string;
  parent_role_id: string | null;
  force_mfa: boolean;
  is_system: boolean;
  depth: number | string;
  resource: string | null;
  action: string | null;
}

/**
 * Loads a role and all its ancestors with their permissions in one query (a recursive CTE). The depth
 * bound also stops a cycle, should one ever reach the table despite the write-time checks.
 */
export async function loadRoleChain(db: Db, roleId: string): Promise<ResolvedRole | null> {
  const result = await db.execute(sql`
    with recursive chain as (
      select id, name, parent_role_id, force_mfa, is_system, 0 as depth from roles where id = ${roleId}
      union all
      select r.id, r.name, r.parent_role_id, r.force_mfa, r.is_system, chain.depth + 1
      from roles r join chain on r.id = chain.parent_role_id
      where chain.depth < ${MAX_CHAIN_DEPTH}
    )
    select chain.id, chain.name, chain.parent_role_id, chain.force_mfa, chain.is_system, chain.depth, p.resource, p.action
    from chain
    left join role_permissions rp on rp.role_id = chain.id
    left join permissions p on p.id = rp.permission_id
    order by chain.depth, p.resource, p.action`);
  const rows = rowsOf<ChainRow>(result);
  if (rows.length === 0) return null;
  const byDepth = new Map<number, ChainRole>();
  for (const r of rows) {
    const depth = Number(r.depth);
    let role = byDepth.get(depth);
    if (!role) {
      role = { id: r.id, name: r.name, parentRoleId: r.parent_role_id, forceMfa: r.force_mfa, isSystem: r.is_system, direct: [] };
      byDepth.set(depth, role);
    }
    if (r.resource !== null && r.action !== null) role.direct.push({ resource: r.resource, action: r.action });
  }
  const chain = [...byDepth.entries()].sort((a, b) => a[0] - b[0]).map(([, role]) => role);
  return {
    roleId,
    chain,
    permissions: new PermissionSet(chain.flatMap((r) => r.direct)),
    forceMfa: chain.some((r) => r.forceMfa),
  };
}

/** What a role change drops: every cached chain containing the role (`*`: all). */
const chainsWith = (roleId: string): Selection<ResolvedRole | null> =>
  roleId === '*' ? '*' : (entry) => entry?.chain.some((r) => r.id === roleId) ?? false;

/**
 * Per-process cache of resolved roles (docs/decisions.md "Caches"). Any role change publishes its id on
 * ROLES_TOPIC; every process drops the entries whose chain contains that role at once. A load that
 * raced with an invalidation is not stored (generation check), so a stale chain never lands.
 */
export class RoleCache {
  readonly #cache = new InvalidatedCache<ResolvedRole | null>({ max: Number.POSITIVE_INFINITY, keep: (r) => r !== null });
  hits = 0;
  misses = 0;

  constructor(private readonly db: Db) {}

  async resolve(roleId: string): Promise<ResolvedRole | null> {
    const call = { loaded: false };
    const resolved = await this.#cache.get(roleId, () => {
      call.loaded = true;
      return loadRoleChain(this.db, roleId);
    });
    if (call.loaded) this.misses++;
    else this.hits++;
    return resolved;
  }

  /** A role id (every chain containing it is dropped), or '*'. */
  invalidate(key: string): void {
    this.#cache.drop(chainsWith(key));
  }

  /** Subscribes to role changes (and empties on a resync of the bus). */
  listen(keel: Keel): this {
    this.#cache.listen(keel.invalidation, ROLES_TOPIC, chainsWith);
    return this;
  }

  get size(): number {
    return this.#cache.size;
  }
}

/** The role cache of this Keel (the access module's handle). */
export function roleCacheFor(keel: Keel): RoleCache {
  return keel.modules.get('access').roles;
}

/** Creates the role cache of a Keel, subscribed to invalidations (when the access module is installed). */
export function createRoleCache(keel: Keel): RoleCache {
  return new RoleCache(keel.db).listen(keel);
}

/**
 * Resolves a role: through the access module's cache when read through a Keel, straight from the
 * tables from a database handle (a transaction's: `AccessSource` in service.ts).
 */
export function resolveRole(source: Keel | Db, roleId: string): Promise<ResolvedRole | null> {
  return 'modules' in source ? roleCacheFor(source).resolve(roleId) : loadRoleChain(source, roleId);
}

/** Tells every process (this one at once) that a role changed (`*`: any role). Call after the change committed. */
export async function publishRoleChange(keel: Keel, roleId: string): Promise<void> {
  await keel.invalidation.publish(ROLES_TOPIC, roleId);
  // Self-profiles carry effective permissions; the identity module's cache listens on its own topic.
  await keel.invalidation.publish(PROFILE_TOPIC, '*');
}
