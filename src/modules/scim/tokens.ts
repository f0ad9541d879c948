import { and, asc, count, eq, inArray } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { InvalidatedCache } from '../../platform/cache.js';
import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import type { Limit } from '../../platform/rate-limit.js';
import type { KeelModule } from '../../platform/module.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { registerAccountManager } from '../identity/managed.js';
import { ROLES_TOPIC } from '../access/role-cache.js';
import { scimTokens, scimUsers, type ScimTokenRow } from './schema.js';
import { reevaluationJob } from './reevaluation.js';
import { ScimError } from './errors.js';

/** Every SCIM token starts with this (docs/decisions.md "SCIM provisioning"). */
export const SCIM_TOKEN_PREFIX = 'kscim_';
/** The characters of a token kept in clear to tell tokens apart in lists. */
const SHOWN = SCIM_TOKEN_PREFIX.length + 6;
/** lastUsedAt is written at most this often per token. */
const LAST_USED_RESOLUTION_MS = 60_000;

/** Invalidation topic of SCIM tokens (token id, or '*'): a revocation drops the token from every process's cache. */
export const SCIM_TOKEN_TOPIC = 'scim_token';
const TOKEN_CACHE_MAX = 10_000;

/** The SCIM module's handle: the per-token request limit (SCIM_RATE_LIMIT a minute) and the token cache. */
export interface Scim {
  limit: Limit;
  tokens: InvalidatedCache<ScimTokenRow | null>;
}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    scim: Scim;
  }
}

/**
 * Installs the SCIM module: its per-token limit and token cache, the job that finishes re-deciding
 * roles after a settings save, and its word to identity on the accounts a directory
 * manages (their email, name and status change only through SCIM or a platform administrator).
 */
export function installScim(keel: Keel): KeelModule<Scim> {
  registerAccountManager(keel, async (db, userIds) => {
    const rows = await db.select({ id: scimUsers.userId }).from(scimUsers).where(inArray(scimUsers.userId, [...userIds]));
    return new Map(rows.map((r) => [r.id, 'scim']));
  });
  return {
    handle: { limit: keel.limits.define('scim-token', keel.config.SCIM_RATE_LIMIT, 60), tokens: createTokenCache(keel) },
    jobs: [reevaluationJob(keel)],
  };
}

/*
 * Token rows by their SHA-256, per process, as API keys are (docs/decisions.md "SCIM at scale"): a
 * directory's import is thousands of requests with one token, and reading the row each time was a
 * statement of every request. Only known tokens are kept (a guesser cannot fill it); a revocation
 * publishes the token id on the invalidation bus every process listens to, and an organisation
 * deleted (its tokens go with it) announces '*' on the roles topic. Expiry is checked on every use.
 */
function createTokenCache(keel: Keel): InvalidatedCache<ScimTokenRow | null> {
  return new InvalidatedCache<ScimTokenRow | null>({ max: TOKEN_CACHE_MAX, keep: (r) => r !== null })
    .listen(keel.invalidation, SCIM_TOKEN_TOPIC, (id) => (id === '*' ? '*' : (r) => r?.id === id))
    .listen(keel.invalidation, ROLES_TOPIC, (roleId) => (roleId === '*' ? '*' : null));
}

export interface ScimTokenView {
  id: string;
  name: string;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  expiresAt: string | null;
  createdBy: string | null;
}

const view = (r: ScimTokenRow): ScimTokenView => ({
  id: r.id,
  name: r.name,
  prefix: r.prefix,
  createdAt: r.createdAt.toISOString(),
  lastUsedAt: r.lastUsedAt?.toISOString() ?? null,
  expiresAt: r.expiresAt?.toISOString() ?? null,
  createdBy: r.createdBy,
});

/** `POST /orgs/:orgId/scim-tokens`: the token is answered once; only its SHA-256 is stored. Audited `scim_token.create`. */
export async function createScimToken(
  keel: Keel,
  org: { orgId: string; partnerId: string | null },
  input: { name: string; expiresAt?: string | undefined },
  createdBy: string | null,
  info: AuditRequestInfo,
): Promise<ScimTokenView & { token: string }> {
  const expiresAt = input.expiresAt === undefined ? null : new Date(input.expiresAt);
  if (expiresAt && expiresAt.getTime() <= clock.nowMs()) throw validationError([{ path: 'expiresAt', message: 'must be in the future' }]);
  const token = `${SCIM_TOKEN_PREFIX}${randomToken(32)}`;
  const row = await transaction(keel.db, async (tx) => {
    const [created] = await tx.db
      .insert(scimTokens)
      .values({ orgId: org.orgId, name: input.name, tokenHash: sha256Hex(token), prefix: token.slice(0, SHOWN), createdBy, expiresAt, createdAt: clock.now() })
      .returning();
    if (!created) throw new Error('scim_tokens: insert returned no row');
    await writeAudit(tx.db, info, { action: 'scim_token.create', orgId: org.orgId, partnerId: org.partnerId, target: { type: 'scim_token', id: created.id }, details: { name: input.name, expiresAt: expiresAt?.toISOString() ?? null } });
    return created;
  });
  return { ...view(row), token };
}

export async function listScimTokens(db: Db, orgId: string, q: { page: number; limit: number }): Promise<{ data: ScimTokenView[]; total: number }> {
  const where = eq(scimTokens.orgId, orgId);
  const [rows, [total]] = await Promise.all([
    db.select().from(scimTokens).where(where).orderBy(asc(scimTokens.createdAt), asc(scimTokens.id)).limit(q.limit).offset((q.page - 1) * q.limit),
    db.select({ n: count() }).from(scimTokens).where(where),
  ]);
  return { data: rows.map(view), total: total?.n ?? 0 };
}

/**
 * `DELETE /orgs/:orgId/scim-tokens/:id`: the row goes and, once committed, every process drops the
 * token from its cache, so the next request with it is 401 everywhere.
 */
export async function revokeScimToken(keel: Keel, org: { orgId: string; partnerId: string | null }, id: string, info: AuditRequestInfo): Promise<void> {
  await transaction(keel.db, async (tx) => {
    const [gone] = await tx.db.delete(scimTokens).where(and(eq(scimTokens.id, id), eq(scimTokens.orgId, org.orgId))).returning();
    if (!gone) throw notFound('SCIM token');
    await writeAudit(tx.db, info, { action: 'scim_token.revoke', orgId: org.orgId, partnerId: org.partnerId, target: { type: 'scim_token', id }, details: { name: gone.name } });
    tx.afterCommit(() => keel.invalidation.publish(SCIM_TOKEN_TOPIC, id));
  });
}

/** What a SCIM request acts as: the token and its organisation. */
export interface ScimCaller {
  tokenId: string;
  orgId: string;
  createdBy: string | null;
}

/**
 * The bearer of a `/scim/v2` request: a `kscim_` token, unexpired, looked up by its SHA-256 (a
 * unique index: the comparison is of hashes, so its timing tells nothing of the token), through the
 * token cache. 401 in the SCIM schema otherwise; then the token's rate limit (429).
 */
export async function authenticateScimToken(keel: Keel, authorization: string | undefined): Promise<ScimCaller> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  const token = m?.[1];
  if (!token || !token.startsWith(SCIM_TOKEN_PREFIX) || token.length > 200) throw new ScimError(401, 'A valid SCIM bearer token is required');
  const hash = sha256Hex(token);
  const row = await keel.modules.get('scim').tokens.get(hash, async () => (await keel.db.select().from(scimTokens).where(eq(scimTokens.tokenHash, hash)))[0] ?? null);
  const now = clock.now();
  if (!row || (row.expiresAt && row.expiresAt.getTime() <= now.getTime())) throw new ScimError(401, 'A valid SCIM bearer token is required');
  const wait = await keel.modules.get('scim').limit.hit(row.id);
  if (wait > 0) throw new ScimError(429, 'Too many requests for this token; try again later', undefined, { 'Retry-After': String(wait) });
  if (!row.lastUsedAt || now.getTime() - row.lastUsedAt.getTime() >= LAST_USED_RESOLUTION_MS) {
    // The cached row is this process's copy: it learns the stamp too, so the next request does not write again.
    row.lastUsedAt = now;
    await keel.db.update(scimTokens).set({ lastUsedAt: now }).where(eq(scimTokens.id, row.id));
  }
  return { tokenId: row.id, orgId: row.orgId, createdBy: row.createdBy };
}
