import { BUILDER_ACTION_MAP, PERMISSION_CATALOG } from './catalog.js';
import type { PermissionPair } from './schema.js';

/**
 * The one permission matcher. Permissions are canonical `resource:action` pairs; `*` in a granted pair
 * is a wildcard on that side. Every check in Keel (routes, role caps, API keys) goes through here.
 */

export type { PermissionPair };

export const WILDCARD = '*';

export const permissionKey = (p: PermissionPair): string => `${p.resource}:${p.action}`;

/**
 * True when `granted` covers the pair (resource, action). The pair is read literally: asking whether
 * `devices:read` covers `devices:*` is false, so a pattern is only covered by an equal or wider one.
 */
export function grants(granted: PermissionPair, resource: string, action: string): boolean {
  return (granted.resource === WILDCARD || granted.resource === resource) && (granted.action === WILDCARD || granted.action === action);
}

/** A set of granted pairs with O(1) checks (four lookups: exact, `r:*`, `*:a`, `*:*`). */
export class PermissionSet {
  readonly #keys: Set<string>;
  readonly pairs: readonly PermissionPair[];

  constructor(pairs: Iterable<PermissionPair>) {
    const unique = new Map<string, PermissionPair>();
    for (const p of pairs) unique.set(permissionKey(p), { resource: p.resource, action: p.action });
    this.pairs = [...unique.values()];
    this.#keys = new Set(unique.keys());
  }

  has(resource: string, action: string): boolean {
    const k = this.#keys;
    return k.has(`${resource}:${action}`) || k.has(`${resource}:*`) || k.has(`*:${action}`) || k.has('*:*');
  }

  /** Covers a requested pair (possibly itself a pattern), read literally as in `grants`. */
  covers(p: PermissionPair): boolean {
    return this.has(p.resource, p.action);
  }

  /** The requested pairs this set does not cover. */
  missing(requested: Iterable<PermissionPair>): PermissionPair[] {
    const out: PermissionPair[] = [];
    for (const p of requested) if (!this.covers(p)) out.push(p);
    return out;
  }

  get size(): number {
    return this.pairs.length;
  }
}

/** The most specific pair granted by both `a` and `b`, or null when they share nothing. */
function meet(a: PermissionPair, b: PermissionPair): PermissionPair | null {
  const side = (x: string, y: string): string | null => (x === WILDCARD ? y : y === WILDCARD ? x : x === y ? x : null);
  const resource = side(a.resource, b.resource);
  const action = side(a.action, b.action);
  return resource !== null && action !== null ? { resource, action } : null;
}

/**
 * Exact intersection of two grant lists, as a grant list: a pair is granted by the result exactly when
 * both inputs grant it (API keys: the key's list ∩ its creator's current permissions).
 */
export function intersect(a: Iterable<PermissionPair>, b: Iterable<PermissionPair>): PermissionPair[] {
  const bs = [...b];
  const out = new Map<string, PermissionPair>();
  for (const x of a) {
    for (const y of bs) {
      const m = meet(x, y);
      if (m) out.set(permissionKey(m), m);
    }
  }
  // Drop pairs already covered by a wider pair of the result.
  const all = [...out.values()];
  return all.filter((p) => !all.some((q) => q !== p && grants(q, p.resource, p.action) && permissionKey(q) !== permissionKey(p)));
}

const CATALOG_KEYS = new Set(PERMISSION_CATALOG.map(permissionKey));

export type CanonicalResult = { ok: true; pair: PermissionPair } | { ok: false; message: string };

/**
 * Reads a pair written in either vocabulary and answers its canonical form. A pair already in the
 * catalog is canonical (a clash is read canonically); otherwise a role-builder action (`view`, `create`,
 * `update`, `delete`, `execute`) is mapped. Anything that does not land in the catalog is unknown.
 */
export function canonicalize(input: PermissionPair): CanonicalResult {
  const resource = input.resource.trim();
  const action = input.action.trim();
  if (CATALOG_KEYS.has(`${resource}:${action}`)) return { ok: true, pair: { resource, action } };
  const mapped = (BUILDER_ACTION_MAP as Record<string, string | undefined>)[action];
  if (mapped !== undefined && CATALOG_KEYS.has(`${resource}:${mapped}`)) return { ok: true, pair: { resource, action: mapped } };
  return { ok: false, message: `unknown permission "${resource}:${action}"` };
}

export function isCatalogPair(p: PermissionPair): boolean {
  return CATALOG_KEYS.has(permissionKey(p));
}

/** Sorted for stable answers: wildcards first, then by resource and action. */
export function sortPairs<T extends PermissionPair>(pairs: T[]): T[] {
  const rank = (s: string) => (s === WILDCARD ? '' : s);
  return [...pairs].sort((x, y) => rank(x.resource).localeCompare(rank(y.resource)) || rank(x.action).localeCompare(rank(y.action)));
}
