import { and, count, desc, eq, isNull } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { InvalidatedCache } from '../../platform/cache.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { Principal } from '../identity/principal.js';
import { users } from '../identity/schema.js';
import { USER_TOPIC } from '../identity/sessions.js';
import { canonicalize, intersect, permissionKey, sortPairs, type PermissionPair } from './permissions.js';
import { apiKeys } from './schema.js';
import { ROLES_TOPIC } from './role-cache.js';
import { getAccessSummary, type AccessSummary } from './service.js';
import type { AccessContext } from './scope.js';
import { accessError } from './errors.js';

/** Every API key starts with this; the bearer middleware sends such tokens here instead of to the JWT check. */
export const API_KEY_PREFIX = 'kk_';

/** lastUsedAt is written at most this often per key, so a busy key does not write on every request. */
const LAST_USED_RESOLUTION_MS = 60_000;

type ApiKeyRow = typeof apiKeys.$inferSelect;

interface KeyGrant {
  key: ApiKeyRow;
  creator: AccessSummary;
}

/** The key and creator facts found while authenticating, kept for the rest of the request. */
const grants = new WeakMap<Principal, KeyGrant>();

function sameTenant(creator: AccessSummary, key: ApiKeyRow): boolean {
  return creator.scope === key.scope && creator.partnerId === key.partnerId && creator.orgId === key.orgId;
}

export interface KeyRecord {
  key: ApiKeyRow;
  user: { email: string; status: string; isPlatformAdmin: boolean };
}

/** Invalidation topic of API keys (key id, or '*'): a revocation drops the key from every process's cache. */
export const API_KEY_TOPIC = 'api_key';
const KEY_CACHE_MAX = 50_000;

/*
 * The key row and its creator's user facts, by the key's SHA-256, per process: `POST /events` and
 * every other key-authenticated call used to read them from the tables each time (a join, about
 * 1 ms of the embedded database's time per publish in the webhooks benchmark). A revocation
 * publishes the key id, a creator disabled or removed (or moved: USER_TOPIC) the user id, on the
 * invalidation bus every process listens to, the same bus that ends sessions and role changes
 * everywhere within the bus's delay; expiry is checked on every use. Only usable keys are kept:
 * not unknown ones (a guesser cannot fill the cache), revoked ones, or those of an inactive creator. The creator's permissions come from the access cache as before.
 */
export function createKeyCache(keel: Keel): InvalidatedCache<KeyRecord | null> {
  // Only a usable key is kept: a revoked one stays revoked, and a disabled creator may be enabled
  // again without any announcement.
  return (
    new InvalidatedCache<KeyRecord | null>({ max: KEY_CACHE_MAX, keep: (r) => r !== null && r.user.status === 'active' && !r.key.revokedAt })
      .listen(keel.invalidation, API_KEY_TOPIC, (id) => (id === '*' ? '*' : (r) => r?.key.id === id))
      .listen(keel.invalidation, USER_TOPIC, (userId) => (userId === '*' ? '*' : (r) => r?.key.createdBy === userId))
      // A tenant deleted (its keys go with it) or a role reshuffle announces '*'.
      .listen(keel.invalidation, ROLES_TOPIC, (roleId) => (roleId === '*' ? '*' : null))
  );
}

const keyCacheOf = (keel: Keel): InvalidatedCache<KeyRecord | null> => keel.modules.get('access').keys;

async function loadKey(keel: Keel, where: { hash: string } | { id: string }): Promise<KeyRecord | null> {
  const [row] = await keel.db
    .select({ key: apiKeys, email: users.email, status: users.status, isPlatformAdmin: users.isPlatformAdmin })
    .from(apiKeys)
    .innerJoin(users, eq(users.id, apiKeys.createdBy))
    .where('hash' in where ? eq(apiKeys.keyHash, where.hash) : eq(apiKeys.id, where.id));
  return row ? { key: row.key, user: { email: row.email, status: row.status, isPlatformAdmin: row.isPlatformAdmin } } : null;
}

async function loadGrant(keel: Keel, where: { hash: string } | { id: string }): Promise<(KeyGrant & { user: { email: string; isPlatformAdmin: boolean } }) | null> {
  const record = 'hash' in where ? await keyCacheOf(keel).get(where.hash, () => loadKey(keel, where)) : await loadKey(keel, where);
  if (!record) return null;
  const { key, user } = record;
  if (key.revokedAt || (key.expiresAt && key.expiresAt.getTime() <= clock.nowMs())) return null;
  // A key lives only while its creator is active and still where it was when the key was made.
  if (user.status !== 'active') return null;
  const creator = await getAccessSummary(keel, { id: key.createdBy, isPlatformAdmin: user.isPlatformAdmin });
  if (creator.scope === null || !sameTenant(creator, key)) return null;
  return { key, creator, user: { email: user.email, isPlatformAdmin: user.isPlatformAdmin } };
}

/**
 * Resolves a bearer API key (`kk_...`) to a principal acting for its creator, or null (401): unknown,
 * revoked or expired key, creator disabled or no longer associated as when the key was made. Checked
 * on every request against the tables, so a revocation works at once on every process.
 */
export async function authenticateApiKey(keel: Keel, token: string): Promise<Principal | null> {
  if (!token.startsWith(API_KEY_PREFIX) || token.length > 200) return null;
  const found = await loadGrant(keel, { hash: sha256Hex(token) });
  if (!found) return null;
  const { key } = found;
  const now = clock.now();
  if (!key.lastUsedAt || now.getTime() - key.lastUsedAt.getTime() >= LAST_USED_RESOLUTION_MS) {
    // The cached row is this process's copy: it learns the stamp too, so the next call does not write again.
    key.lastUsedAt = now;
    await keel.db.update(apiKeys).set({ lastUsedAt: now }).where(eq(apiKeys.id, key.id));
  }
  const principal: Principal = {
    kind: 'api_key',
    userId: key.createdBy,
    email: found.user.email,
    sessionId: null,
    // Keys never satisfy step-up (docs/decisions.md "Roles, permissions and seeded roles").
    mfa: false,
    isPlatformAdmin: found.user.isPlatformAdmin,
    apiKeyId: key.id,
  };
  grants.set(principal, { key, creator: found.creator });
  return principal;
}

/**
 * What an API key may do: its creator's current association, with permissions narrowed to the key's
 * list ∩ the creator's current effective permissions; never subject to Force MFA. Null: the key is dead.
 */
export async function apiKeyAccessSummary(keel: Keel, principal: Principal): Promise<AccessSummary | null> {
  if (principal.kind !== 'api_key' || !principal.apiKeyId) return null;
  let grant = grants.get(principal) ?? null;
  if (!grant) grant = await loadGrant(keel, { id: principal.apiKeyId });
  if (!grant) return null;
  return { ...grant.creator, permissions: intersect(grant.key.permissions, grant.creator.permissions), forceMfa: false };
}

export interface ApiKeyView {
  id: string;
  name: string;
  keyPrefix: string;
  permissions: PermissionPair[];
  scope: 'system' | 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
  expiresAt: string | null;
  lastUsedAt: string | null;
  createdAt: string;
}

function view(k: ApiKeyRow): ApiKeyView {
  return {
    id: k.id,
    name: k.name,
    keyPrefix: k.keyPrefix,
    permissions: sortPairs(k.permissions),
    scope: k.scope,
    partnerId: k.partnerId,
    orgId: k.orgId,
    expiresAt: k.expiresAt?.toISOString() ?? null,
    lastUsedAt: k.lastUsedAt?.toISOString() ?? null,
    createdAt: k.createdAt.toISOString(),
  };
}

function userOnly(access: AccessContext): void {
  if (access.principal.kind !== 'user') throw accessError('api_key_forbidden');
}

/** Canonical pairs of a permission list in either vocabulary; unknown pairs are a 400 naming each. */
export function canonicalList(input: PermissionPair[], field = 'permissions'): PermissionPair[] {
  const out = new Map<string, PermissionPair>();
  const bad: { path: string; message: string }[] = [];
  input.forEach((p, i) => {
    const r = canonicalize(p);
    if (r.ok) out.set(permissionKey(r.pair), r.pair);
    else bad.push({ path: `${field}.${i}`, message: r.message });
  });
  if (bad.length > 0) throw validationError(bad);
  return [...out.values()];
}

export const privilegeEscalation = (missing: PermissionPair[]) =>
  accessError('privilege_escalation', { details: { permissions: missing.map(permissionKey) } });

/** Creates a key for the calling user. The plaintext key is in the answer only; the table keeps its SHA-256. */
export async function createApiKey(
  keel: Keel,
  access: AccessContext,
  input: { name: string; permissions: PermissionPair[]; expiresAt?: string | null | undefined },
  info: AuditRequestInfo,
): Promise<ApiKeyView & { key: string }> {
  userOnly(access);
  const perms = canonicalList(input.permissions);
  if (perms.length === 0) throw validationError([{ path: 'permissions', message: 'must name at least one permission' }]);
  const missing = access.permissions.missing(perms);
  if (missing.length > 0) throw privilegeEscalation(missing);
  let expiresAt: Date | null = null;
  if (input.expiresAt) {
    expiresAt = new Date(input.expiresAt);
    if (expiresAt.getTime() <= clock.nowMs()) throw accessError('invalid_expiry');
  }
  const key = `${API_KEY_PREFIX}${randomToken(32)}`;
  const home = {
    scope: access.scope,
    partnerId: access.scope === 'partner' ? access.partnerId : null,
    orgId: access.scope === 'organization' ? access.homeOrgId : null,
  };
  const row = await transaction(keel.db, async (tx) => {
    const [inserted] = await tx.db
      .insert(apiKeys)
      .values({
        name: input.name,
        keyPrefix: key.slice(0, 11),
        keyHash: sha256Hex(key),
        createdBy: access.principal.userId,
        ...home,
        permissions: perms,
        expiresAt,
        createdAt: clock.now(),
      })
      .returning();
    if (!inserted) throw new Error('api key insert returned nothing');
    await writeAudit(tx.db, info, {
      action: 'api_key.create',
      partnerId: home.partnerId,
      orgId: home.orgId,
      target: { type: 'api_key', id: inserted.id },
      details: { name: input.name, permissions: perms.map(permissionKey), expires: expiresAt?.toISOString() ?? null },
    });
    return inserted;
  });
  return { ...view(row), key };
}

/** The calling user's live keys (not revoked), newest first. */
export async function listApiKeys(keel: Keel, access: AccessContext, q: { page: number; limit: number }): Promise<{ data: ApiKeyView[]; total: number }> {
  userOnly(access);
  const where = and(eq(apiKeys.createdBy, access.principal.userId), isNull(apiKeys.revokedAt));
  const [rows, [total]] = await Promise.all([
    keel.db.select().from(apiKeys).where(where).orderBy(desc(apiKeys.createdAt), desc(apiKeys.id)).limit(q.limit).offset((q.page - 1) * q.limit),
    keel.db.select({ n: count() }).from(apiKeys).where(where),
  ]);
  return { data: rows.map(view), total: total?.n ?? 0 };
}

/** Revokes one of the caller's keys; it stops authenticating with the next request. Others' keys: 404. */
export async function revokeApiKey(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  userOnly(access);
  await transaction(keel.db, async (tx) => {
    const [row] = await tx.db
      .update(apiKeys)
      .set({ revokedAt: clock.now() })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.createdBy, access.principal.userId), isNull(apiKeys.revokedAt)))
      .returning({ id: apiKeys.id, partnerId: apiKeys.partnerId, orgId: apiKeys.orgId, name: apiKeys.name });
    if (!row) throw notFound('API key');
    await writeAudit(tx.db, info, {
      action: 'api_key.revoke', partnerId: row.partnerId, orgId: row.orgId, target: { type: 'api_key', id: row.id }, details: { name: row.name },
    });
  });
  await keel.invalidation.publish(API_KEY_TOPIC, id);
}


