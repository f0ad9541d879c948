import { and, count, desc, eq, getTableColumns, inArray, isNotNull, or, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { EventType, KeelEvent } from '../../events.js';
import { clock } from '../../platform/clock.js';
import { randomToken } from '../../platform/crypto.js';
import type { Db } from '../../platform/db/client.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery, type Statement } from '../../platform/db/raw.js';
import { activeTracer, currentTraceparent } from '../../platform/tracing/index.js';
import { transaction, transactionIf } from '../../platform/db/transaction.js';
import { notFound, validationError } from '../../platform/http/errors.js';
import { OutboundError, vetTarget } from '../../platform/outbound.js';
import type { SealedColumn } from '../../platform/reseal.js';
import type { Limit } from '../../platform/rate-limit.js';
import { auditInsert, writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { fullOrgAccessRequired, permissionDenied, placementFilter, restricted, visibleOrgCondition, type AccessContext } from '../access/scope.js';
import {
  aad,
  apiStatus,
  eventBody,
  effectivePolicy,
  retrySchedule,
  headerProblems,
  redactUrl,
  storedStatus,
  type ApiWebhookStatus,
  type ClaimedDelivery,
  type CustomHeader,
  type PreviousSecret,
  type RouteTicket,
  MAX_PREVIOUS_SECRETS,
} from './model.js';
import { webhookDeliveries, webhookPayloads, webhooks, type DeliveryStatus, type RetryPolicy } from './schema.js';
import { organizations, partners } from '../tenancy/schema.js';
import { webhooksError } from './errors.js';

type WebhookRow = typeof webhooks.$inferSelect;
type DeliveryRow = typeof webhookDeliveries.$inferSelect;

/**
 * The webhooks' rate limits of a Keel (project limiter: Redis when configured): `POST /events` per API
 * key, manual tests and retries per webhook and per caller (a minute each; 429 `rate_limited` with
 * Retry-After beyond).
 */
export interface WebhookLimits {
  publish: Limit;
  manualPerWebhook: Limit;
  manualPerCaller: Limit;
}
export function webhookLimits(keel: Keel): WebhookLimits {
  return keel.modules.get('webhooks').limits;
}
/** Defines the module's limits, once per Keel (runtime.ts `installWebhooks`). */
export function defineWebhookLimits(keel: Keel): WebhookLimits {
  const l = keel.limits;
  return {
    publish: l.define('events-publish', keel.config.EVENTS_PUBLISH_LIMIT, 60),
    manualPerWebhook: l.define('webhook-manual', keel.config.WEBHOOK_MANUAL_LIMIT, 60),
    manualPerCaller: l.define('webhook-manual-caller', keel.config.WEBHOOK_MANUAL_CALLER_LIMIT, 60),
  };
}

/** A manual test or retry spends a point of the webhook's and of the caller's (an API key is its own caller). */
async function spendManual(keel: Keel, access: AccessContext, webhookId: string): Promise<void> {
  const l = webhookLimits(keel);
  const caller = access.principal.apiKeyId ? `key:${access.principal.apiKeyId}` : `user:${access.principal.userId}`;
  await l.manualPerCaller.consume(caller);
  await l.manualPerWebhook.consume(webhookId);
}

/** How long a rotated-out secret keeps signing (docs/decisions.md "Webhook shapes"). */
export const ROTATION_OVERLAP_MS = 24 * 60 * 60 * 1000;

/** The sealed columns of this module, for `keel secrets reseal` (platform/reseal.ts). */
export const WEBHOOK_SEALED: SealedColumn[] = (['url', 'secret', 'previous_secret', 'older_secrets', 'headers'] as const).map((c) => ({
  table: 'webhooks',
  column: `${c}_sealed`,
  keys: ['id'],
  context: (r: Record<string, string>) => aad(r.id ?? '', c),
}));

export interface WebhookView {
  id: string;
  /** The organisation whose events it receives; null for a partner-wide webhook. */
  orgId: string | null;
  /** A partner-wide webhook's partner (every organisation of it); null for an organisation's webhook. */
  partnerId: string | null;
  name: string;
  url: string;
  events: string[];
  /** Names only: header values are write-only (they often carry a receiver's credentials). */
  headers: { key: string; valueSet: true }[];
  status: ApiWebhookStatus;
  hasSecret: boolean;
  /** When a rotation's previous secret stops signing; null outside an overlap. */
  previousSecretExpiresAt: string | null;
  retrySchedule: RetryScheduleName;
  retryPolicy: Omit<RetryPolicy, 'schedule'>;
  /** At most this many attempts start per second, across every worker (throttle.ts); null: no limit. */
  rateLimitPerSecond: number | null;
  successCount: number;
  failureCount: number;
  lastDeliveryAt: string | null;
  lastSuccessAt: string | null;
  createdBy: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface DeliveryView {
  id: string;
  webhookId: string;
  orgId: string | null;
  status: DeliveryStatus;
  event: string;
  eventId: string;
  payload: unknown;
  /** The failed delivery this one retries (a manual retry), or null. */
  retryOf: string | null;
  responseStatus: number | null;
  responseBody: string | null;
  responseTimeMs: number | null;
  errorMessage: string | null;
  attempt: number;
  nextAttemptAt: string | null;
  createdAt: string;
  deliveredAt: string | null;
}

export interface DeliveryStats {
  total: number;
  pending: number;
  delivered: number;
  failed: number;
  retrying: number;
  lastDeliveredAt: string | null;
  /** The attempts these deliveries made, shown apart from them. */
  attempts: { succeeded: number; failed: number };
}

const isoOrNull = (d: Date | null) => (d ? d.toISOString() : null);

/** Opens a webhook's sealed headers (empty list when none). */
export function openHeaders(keel: Keel, row: Pick<WebhookRow, 'id' | 'headersSealed'>): CustomHeader[] {
  return row.headersSealed ? (JSON.parse(keel.secrets.sealer.open(row.headersSealed, aad(row.id, 'headers'))) as CustomHeader[]) : [];
}

export function webhookView(keel: Keel, row: WebhookRow): WebhookView {
  const overlap = row.previousSecretSealed && row.previousSecretExpiresAt && row.previousSecretExpiresAt.getTime() > clock.nowMs();
  return {
    id: row.id,
    orgId: row.orgId,
    partnerId: row.partnerId,
    name: row.name,
    url: redactUrl(keel.secrets.sealer.open(row.urlSealed, aad(row.id, 'url'))),
    events: row.events,
    headers: openHeaders(keel, row).map((h) => ({ key: h.key, valueSet: true as const })),
    status: apiStatus(row.status),
    hasSecret: row.secretSealed !== null,
    previousSecretExpiresAt: overlap ? isoOrNull(row.previousSecretExpiresAt) : null,
    retrySchedule: retrySchedule(row.retryPolicy),
    retryPolicy: publicPolicy(effectivePolicy(row.retryPolicy)),
    rateLimitPerSecond: row.rateLimitPerSecond,
    successCount: row.successCount,
    failureCount: row.failureCount,
    lastDeliveryAt: isoOrNull(row.lastDeliveryAt),
    lastSuccessAt: isoOrNull(row.lastSuccessAt),
    createdBy: row.createdBy,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

export function deliveryView(row: DeliveryRow & { payload: unknown }): DeliveryView {
  const waiting = row.status === 'pending' || row.status === 'retrying';
  return {
    id: row.id,
    webhookId: row.webhookId,
    orgId: row.orgId,
    status: row.status,
    event: row.eventType,
    eventId: row.eventId,
    payload: row.payload,
    retryOf: row.retryOf,
    responseStatus: row.responseStatus,
    responseBody: row.responseBody,
    responseTimeMs: row.responseTimeMs,
    errorMessage: row.errorMessage,
    attempt: row.attempts,
    nextAttemptAt: waiting ? isoOrNull(row.nextRetryAt) : null,
    createdAt: row.createdAt.toISOString(),
    deliveredAt: isoOrNull(row.deliveredAt),
  };
}

/** docs/specification.md "Errors": "Webhook URL fails validation": 400 `invalid_webhook_url`, saying which rule. */
async function vetUrl(keel: Keel, url: string): Promise<void> {
  // Userinfo would be redacted in reads and never sent: refused, so nothing is kept that is not used.
  let parsed: URL | null = null;
  try {
    parsed = new URL(url);
  } catch {
    // vetTarget names the problem.
  }
  if (parsed && (parsed.username !== '' || parsed.password !== '')) {
    const message = 'must not carry credentials (user:password@); send them in a custom header, whose value is write-only';
    throw webhooksError('invalid_webhook_url', { message: `Invalid webhook URL: ${message}`, details: { fields: [{ path: 'url', message }] } });
  }
  try {
    await vetTarget(url, keel.outbound);
  } catch (err) {
    if (err instanceof OutboundError) throw webhooksError('invalid_webhook_url', { message: `Invalid webhook URL: ${err.message}`, details: { fields: [{ path: 'url', message: err.message }] } });
    throw err;
  }
}

function checkHeaders(headers: readonly CustomHeader[]): void {
  const problems = headerProblems(headers);
  if (problems.length > 0) throw validationError(problems);
}

function checkPolicy(policy: RetryPolicyInput | null | undefined): void {
  const p = effectivePolicy(policyToStore(policy));
  if (p.maxDelayMs < p.initialDelayMs) throw validationError([{ path: 'retryPolicy.maxDelayMs', message: 'must be at least initialDelayMs' }]);
}

const sealHeaders = (keel: Keel, id: string, headers: readonly CustomHeader[]) =>
  headers.length > 0 ? keel.secrets.sealer.seal(JSON.stringify(headers), aad(id, 'headers')) : null;

/**
 * The partner whose partner-wide webhooks the caller may see and manage (docs/decisions.md "Webhook
 * replay and partner-wide webhooks"): a partner user's with access to every organisation of it
 * (naming one of them does not narrow this), or the partner a system caller named (or that owns the
 * organisation it named); else null. An organisation's user never sees them.
 */
export function wholePartnerOf(access: AccessContext): string | null {
  if (access.scope === 'partner') return access.orgAccess === 'all' ? access.partnerId : null;
  return access.scope === 'system' ? access.partnerId : null;
}

/** Which webhooks the caller may see: those of its organisations, and its partner's partner-wide ones (`wholePartnerOf`). */
function visibleWebhookCondition(access: AccessContext): SQL | undefined {
  const ofOrgs = visibleOrgCondition(access, webhooks.orgId);
  if (ofOrgs === undefined) return undefined;
  const partnerId = wholePartnerOf(access);
  return partnerId ? or(ofOrgs, eq(webhooks.partnerId, partnerId)) : ofOrgs;
}

/** What an audit entry of a webhook names: its organisation, or its partner for a partner-wide one. */
function auditTenant(access: AccessContext, hook: Pick<WebhookRow, 'orgId' | 'partnerId'>): { partnerId: string | null; orgId: string | null } {
  return { partnerId: hook.partnerId ?? access.partnerId, orgId: hook.orgId };
}

/** One webhook the caller may see, else 404 (another tenant's webhook is "not found", never "forbidden"). */
export async function visibleWebhook(db: Db, access: AccessContext, id: string): Promise<WebhookRow> {
  const [row] = await db
    .select()
    .from(webhooks)
    .where(and(eq(webhooks.id, id), visibleWebhookCondition(access)));
  if (!row) throw notFound('Webhook');
  return row;
}

export interface Paging {
  page: number;
  limit: number;
}

export async function listWebhooks(
  keel: Keel,
  access: AccessContext,
  q: Paging & { status?: ApiWebhookStatus | undefined; partnerLevel?: boolean | undefined },
  ofDevice: DevicePlacement,
): Promise<{ data: WebhookWithStats[]; total: number }> {
  // `?partnerId=`: the partner's partner-wide webhooks; else the organisation's.
  const owner = q.partnerLevel ? eq(webhooks.partnerId, partnerLevelOf(access)) : and(visibleOrgCondition(access, webhooks.orgId), isNotNull(webhooks.orgId));
  const where = and(owner, q.status ? eq(webhooks.status, storedStatus(q.status)) : undefined);
  const [total] = await keel.db.select({ n: count() }).from(webhooks).where(where);
  const rows = await keel.db
    .select()
    .from(webhooks)
    .where(where)
    .orderBy(desc(webhooks.createdAt), desc(webhooks.id))
    .limit(q.limit)
    .offset((q.page - 1) * q.limit);
  const stats = await deliveryStatsOf(keel.db, access, rows.map((r) => r.id), ofDevice);
  return { data: rows.map((r) => withStats(webhookView(keel, r), stats.get(r.id) ?? EMPTY_STATS, access)), total: total?.n ?? 0 };
}

export type WebhookWithStats = WebhookView & { deliveryStats: DeliveryStats };

/**
 * A webhook with its numbers. For a caller restricted to some sites or device groups, the attempt
 * counters and times of the webhook (kept for the whole organisation) are replaced by those of the
 * deliveries it may see, so no number tells it about events outside its restriction.
 */
export function withStats(view: WebhookView, stats: DeliveryStats, access: AccessContext): WebhookWithStats {
  if (!restricted(access)) return { ...view, deliveryStats: stats };
  return {
    ...view,
    successCount: stats.attempts.succeeded,
    failureCount: stats.attempts.failed,
    lastDeliveryAt: stats.lastDeliveredAt,
    lastSuccessAt: stats.lastDeliveredAt,
    deliveryStats: stats,
  };
}

type PolicyNumbers = Omit<RetryPolicy, 'schedule'>;

/** The policy's four numbers, as reads show them (the schedule's name is `retrySchedule`). */
const publicPolicy = ({ schedule: _named, ...numbers }: RetryPolicy): PolicyNumbers => numbers;

/** A `retryPolicy` as given: any of the four fields (the rest take the defaults). */
export type RetryPolicyInput = { [K in keyof PolicyNumbers]?: PolicyNumbers[K] | undefined };

export type RetryScheduleName = 'default' | 'extended' | 'custom';

function policyToStore(p: RetryPolicyInput | null | undefined): Partial<RetryPolicy> | null {
  if (!p) return null;
  const out: Partial<PolicyNumbers> = {};
  for (const [k, v] of Object.entries(p) as [keyof PolicyNumbers, number | undefined][]) if (v !== undefined) out[k] = v;
  return Object.keys(out).length > 0 ? out : null;
}

/**
 * What a write's `retrySchedule` and `retryPolicy` store (docs/decisions.md "Retry schedules"), or
 * undefined to leave it as it is: `extended` by name (no policy with it), `default` (none stored;
 * `retryPolicy: null` says the same), `custom` or a bare `retryPolicy` stores the policy's fields.
 */
function scheduleToStore(schedule: RetryScheduleName | undefined, policy: RetryPolicyInput | null | undefined): Partial<RetryPolicy> | null | undefined {
  if (schedule === 'extended' || schedule === 'default') {
    if (policy) throw validationError([{ path: 'retryPolicy', message: `only with retrySchedule "custom" (the ${schedule} schedule has its own delays)` }]);
    return schedule === 'extended' ? { schedule: 'extended' } : null;
  }
  if (schedule === 'custom' && !policy) throw validationError([{ path: 'retryPolicy', message: 'is required with retrySchedule "custom"' }]);
  checkPolicy(policy);
  return policy === undefined ? undefined : policyToStore(policy);
}

export interface WebhookInput {
  name: string;
  url: string;
  secret?: string | null | undefined;
  events: string[];
  headers?: CustomHeader[] | undefined;
  retrySchedule?: RetryScheduleName | undefined;
  retryPolicy?: RetryPolicyInput | null | undefined;
  rateLimitPerSecond?: number | null | undefined;
}

/**
 * The partner a partner-level request (create with `partnerId`, list with `?partnerId=`) acts for: a
 * partner user needs access to every organisation of the partner (403 `full_org_access_required`);
 * a system caller names the partner. Organisation users never get here (the scope refuses them the
 * partner they name, 404).
 */
export function partnerLevelOf(access: AccessContext): string {
  if (access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();
  const partnerId = wholePartnerOf(access);
  if (!partnerId) throw fullOrgAccessRequired();
  return partnerId;
}

export async function createWebhook(keel: Keel, access: AccessContext, input: WebhookInput, info: AuditRequestInfo, owner: { orgId: string } | { partnerId: string }): Promise<WebhookView> {
  const orgId = 'orgId' in owner ? owner.orgId : null;
  const partnerId = 'partnerId' in owner ? owner.partnerId : null;
  const headers = input.headers ?? [];
  checkHeaders(headers);
  const storedPolicy = scheduleToStore(input.retrySchedule, input.retryPolicy) ?? null;
  await vetUrl(keel, input.url);
  const id = newId();
  const now = clock.now();
  const sealer = keel.secrets.sealer;
  const row = await transaction(keel.db, async (tx) => {
    // The cap, counted while no other creation in the organisation (or partner: its partner-wide
    // webhooks, under the same cap) is (its row is locked against other writers, not against references to it).
    if (orgId) await tx.db.select({ id: organizations.id }).from(organizations).where(eq(organizations.id, orgId)).for('no key update');
    else await tx.db.select({ id: partners.id }).from(partners).where(eq(partners.id, partnerId ?? '')).for('no key update');
    const [have] = await tx.db.select({ n: count() }).from(webhooks).where(orgId ? eq(webhooks.orgId, orgId) : eq(webhooks.partnerId, partnerId ?? ''));
    const limit = keel.config.WEBHOOKS_PER_ORG_LIMIT;
    if ((have?.n ?? 0) >= limit) {
      throw webhooksError('webhook_limit_reached', { message: `An ${orgId ? 'organisation' : 'partner'} may have at most ${limit} webhooks; delete one first`, details: { limit } });
    }
    const [created] = await tx.db
      .insert(webhooks)
      .values({
        id,
        orgId,
        partnerId,
        name: input.name,
        urlSealed: sealer.seal(input.url, aad(id, 'url')),
        secretSealed: input.secret ? sealer.seal(input.secret, aad(id, 'secret')) : null,
        events: [...new Set(input.events)],
        headersSealed: sealHeaders(keel, id, headers),
        status: 'active',
        retryPolicy: storedPolicy,
        rateLimitPerSecond: input.rateLimitPerSecond ?? null,
        createdBy: access.principal.userId,
        createdAt: now,
        updatedAt: now,
      })
      .returning();
    if (!created) throw new Error('webhook insert returned nothing');
    await writeAudit(tx.db, info, {
      action: 'webhook.create',
      partnerId: partnerId ?? access.partnerId,
      orgId,
      target: { type: 'webhook', id },
      details: { name: input.name, events: created.events, hasSecret: created.secretSealed !== null, customHeaders: headers.length },
    });
    return created;
  });
  return webhookView(keel, row);
}

/** A custom header in a PATCH: without `value`, the value stored for the same name (any case) is kept. */
export interface HeaderPatch {
  key: string;
  value?: string | undefined;
}

/** The headers a PATCH asks for, with kept values filled in from the stored ones; 400 when an entry keeps a value that does not exist. */
function resolveHeaderPatch(stored: readonly CustomHeader[], patch: readonly HeaderPatch[]): CustomHeader[] {
  const byName = new Map(stored.map((h) => [h.key.toLowerCase(), h.value]));
  const problems: { path: string; message: string }[] = [];
  const out = patch.map((h, i) => {
    if (h.value !== undefined) return { key: h.key, value: h.value };
    const kept = byName.get(h.key.toLowerCase());
    if (kept === undefined) problems.push({ path: `headers.${i}.value`, message: 'is required: no value is stored for this header' });
    return { key: h.key, value: kept ?? '' };
  });
  if (problems.length > 0) throw validationError(problems);
  return out;
}

export interface WebhookPatch {
  name?: string | undefined;
  url?: string | undefined;
  secret?: string | null | undefined;
  events?: string[] | undefined;
  headers?: HeaderPatch[] | undefined;
  status?: ApiWebhookStatus | undefined;
  retrySchedule?: RetryScheduleName | undefined;
  retryPolicy?: RetryPolicyInput | null | undefined;
  rateLimitPerSecond?: number | null | undefined;
}

export async function updateWebhook(keel: Keel, access: AccessContext, id: string, patch: WebhookPatch, info: AuditRequestInfo): Promise<WebhookView> {
  const current = await visibleWebhook(keel.db, access, id);
  const headers = patch.headers ? resolveHeaderPatch(openHeaders(keel, current), patch.headers) : undefined;
  if (headers) checkHeaders(headers);
  const storedPolicy = scheduleToStore(patch.retrySchedule, patch.retryPolicy);
  if (patch.url !== undefined) await vetUrl(keel, patch.url);
  const sealer = keel.secrets.sealer;
  const now = clock.now();
  const set: Partial<typeof webhooks.$inferInsert> = { updatedAt: now };
  const changes: string[] = [];
  if (patch.name !== undefined) {
    set.name = patch.name;
    changes.push('name');
  }
  if (patch.url !== undefined) {
    set.urlSealed = sealer.seal(patch.url, aad(id, 'url'));
    changes.push('url');
  }
  if (patch.secret !== undefined) {
    // A plain change replaces the secret at once, without an overlap (rotate-secret keeps one).
    set.secretSealed = patch.secret ? sealer.seal(patch.secret, aad(id, 'secret')) : null;
    set.previousSecretSealed = null;
    set.previousSecretExpiresAt = null;
    set.olderSecretsSealed = null;
    changes.push('secret');
  }
  if (patch.events !== undefined) {
    set.events = [...new Set(patch.events)];
    changes.push('events');
  }
  if (headers !== undefined) {
    set.headersSealed = sealHeaders(keel, id, headers);
    changes.push('headers');
  }
  if (storedPolicy !== undefined) {
    set.retryPolicy = storedPolicy;
    changes.push('retryPolicy');
  }
  if (patch.rateLimitPerSecond !== undefined) {
    set.rateLimitPerSecond = patch.rateLimitPerSecond;
    changes.push('rateLimitPerSecond');
  }
  const reactivated = patch.status === 'active' && current.status !== 'active';
  if (patch.status !== undefined) {
    set.status = storedStatus(patch.status);
    changes.push('status');
    // A person re-activating it starts a new 24-hour window for the automatic move to `failed`.
    if (reactivated) {
      set.failingSince = null;
      set.deadLetterStreak = 0;
    }
  }
  const row = await transaction(keel.db, async (tx) => {
    const [updated] = await tx.db.update(webhooks).set(set).where(eq(webhooks.id, id)).returning();
    if (!updated) throw notFound('Webhook');
    await writeAudit(tx.db, info, {
      action: 'webhook.update',
      ...auditTenant(access, updated),
      target: { type: 'webhook', id },
      changes,
      ...(patch.status !== undefined ? { details: { status: patch.status, previousStatus: apiStatus(current.status) } } : {}),
    });
    // Held deliveries resume once the webhook is active again.
    if (reactivated) tx.afterCommit(() => webhooksRuntime(keel).wake());
    return updated;
  });
  return webhookView(keel, row);
}

/**
 * Rotation: the new secret signs at once, and every rotated-out secret keeps signing for 24 hours
 * from its own rotation (all of them meanwhile: one `v1,` each in `webhook-signature`), at most
 * `MAX_PREVIOUS_SECRETS` of them: a further rotation within their overlap is 409 `too_many_rotations`
 * (a PATCH of `secret` replaces every secret at once). Rotations of one webhook are serialised by a
 * row lock: two at once both succeed, one after the other, so the first's secret is the second's
 * previous one and signs for its 24 hours.
 */
export async function rotateSecret(
  keel: Keel,
  access: AccessContext,
  id: string,
  given: string | undefined,
  info: AuditRequestInfo,
): Promise<{ webhook: WebhookView; secret?: string }> {
  await visibleWebhook(keel.db, access, id);
  const secret = given ?? `whsk_${randomToken(32)}`;
  const sealer = keel.secrets.sealer;
  const row = await transaction(keel.db, async (tx) => {
    // The row as it is once no other rotation (or update) of it is in flight.
    const [current] = await tx.db.select().from(webhooks).where(eq(webhooks.id, id)).for('update');
    if (!current) throw notFound('Webhook');
    const now = clock.now();
    const previous: PreviousSecret[] = [];
    if (current.secretSealed) previous.push({ secret: sealer.open(current.secretSealed, aad(id, 'secret')), expiresAt: now.getTime() + ROTATION_OVERLAP_MS });
    if (current.previousSecretSealed && current.previousSecretExpiresAt) {
      previous.push({ secret: sealer.open(current.previousSecretSealed, aad(id, 'previous_secret')), expiresAt: current.previousSecretExpiresAt.getTime() });
    }
    if (current.olderSecretsSealed) previous.push(...(JSON.parse(sealer.open(current.olderSecretsSealed, aad(id, 'older_secrets'))) as PreviousSecret[]));
    const live = previous.filter((p) => p.expiresAt > now.getTime());
    if (live.length > MAX_PREVIOUS_SECRETS) {
      const freeAt = Math.min(...live.slice(1).map((p) => p.expiresAt));
      throw webhooksError('too_many_rotations', { message: `At most ${MAX_PREVIOUS_SECRETS} rotated-out secrets sign beside the current one; the next rotation is possible once the oldest expires (or replace every secret at once with PATCH secret)`, details: {
        nextRotationAt: new Date(freeAt).toISOString(),
      } });
    }
    const [newest, ...older] = live;
    const [updated] = await tx.db
      .update(webhooks)
      .set({
        secretSealed: sealer.seal(secret, aad(id, 'secret')),
        previousSecretSealed: newest ? sealer.seal(newest.secret, aad(id, 'previous_secret')) : null,
        previousSecretExpiresAt: newest ? new Date(newest.expiresAt) : null,
        olderSecretsSealed: older.length > 0 ? sealer.seal(JSON.stringify(older), aad(id, 'older_secrets')) : null,
        updatedAt: now,
      })
      .where(eq(webhooks.id, id))
      .returning();
    if (!updated) throw notFound('Webhook');
    await writeAudit(tx.db, info, {
      action: 'webhook.secret.rotate',
      ...auditTenant(access, updated),
      target: { type: 'webhook', id },
      details: { generated: given === undefined, overlapHours: current.secretSealed ? 24 : 0, previousSecretsSigning: live.length },
    });
    return updated;
  });
  const webhook = webhookView(keel, row);
  return given === undefined ? { webhook, secret } : { webhook };
}

export async function deleteWebhook(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const current = await visibleWebhook(keel.db, access, id);
  await transaction(keel.db, async (tx) => {
    // Its deliveries go with it (ON DELETE CASCADE); an attempt in flight records nothing afterwards.
    await tx.db.delete(webhooks).where(eq(webhooks.id, id));
    await writeAudit(tx.db, info, {
      action: 'webhook.delete',
      ...auditTenant(access, current),
      target: { type: 'webhook', id },
      details: { name: current.name },
    });
  });
}

/**
 * Where an event is placed, for the site and device-group restriction of delivery reads: its data's
 * `siteId` / `deviceGroupId`, else those of the device its data names (`deviceId`). An event with
 * neither (a login, a test) has no placement: the filter (`placementFilter`) then passes it only for
 * unrestricted callers. `body` is the stored JSON body (`{..., data: {...}}`).
 */
export function eventPlacement(body: SQL, ofDevice: DevicePlacement): { siteId: AnyColumn; deviceGroupId: AnyColumn } {
  const field = (k: string) => sql`(${body}->'data'->>${sql.raw(`'${k}'`)})`;
  const device = sql`(case when ${field('deviceId')} ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' then ${field('deviceId')}::uuid end)`;
  const placed = ofDevice(device);
  // SQL expressions standing where placementFilter expects columns (it compares them with `in`).
  return {
    siteId: sql`coalesce(${field('siteId')}, ${placed.siteId})` as unknown as AnyColumn,
    deviceGroupId: sql`coalesce(${field('deviceGroupId')}, ${placed.deviceGroupId})` as unknown as AnyColumn,
  };
}

/**
 * The site and device group (as text) of the device an SQL uuid expression names: a port, since devices
 * belong to the agents module, which sits above webhooks (the delivery route hands in agents'
 * `devicePlacementSql`; docs/architecture.md "How a lower module reaches a higher one").
 */
export type DevicePlacement = (deviceId: SQL) => { siteId: SQL; deviceGroupId: SQL };

/**
 * The delivery numbers of webhooks (docs/decisions.md "Webhook numbers"), the one definition every read
 * uses: deliveries counted by their state (a delivery retried five times and then delivered is one
 * delivered delivery), and beside them the attempts those deliveries made (`attempts.succeeded`: one per
 * delivered delivery; `attempts.failed`: every other attempt). A caller restricted to some sites or
 * device groups counts only the deliveries it may list (`listDeliveries`' filter).
 */
export async function deliveryStatsOf(db: Db, access: AccessContext, webhookIds: string[], ofDevice: DevicePlacement): Promise<Map<string, DeliveryStats>> {
  const out = new Map<string, DeliveryStats>();
  for (const id of webhookIds) out.set(id, { ...EMPTY_STATS, attempts: { ...EMPTY_STATS.attempts } });
  if (webhookIds.length === 0) return out;
  const d = webhookDeliveries;
  const columns = {
    webhookId: d.webhookId,
    total: sql<number>`count(*)::int`,
    pending: sql<number>`(count(*) filter (where ${d.status} = 'pending'))::int`,
    delivered: sql<number>`(count(*) filter (where ${d.status} = 'delivered'))::int`,
    failed: sql<number>`(count(*) filter (where ${d.status} = 'failed'))::int`,
    retrying: sql<number>`(count(*) filter (where ${d.status} = 'retrying'))::int`,
    attempts: sql<number>`coalesce(sum(${d.attempts}), 0)::int`,
    last: sql<Date | string | null>`max(${d.deliveredAt})`,
  };
  const ofHooks = inArray(d.webhookId, webhookIds);
  const rows = restricted(access)
    ? await db
        .select(columns)
        .from(d)
        .innerJoin(webhookPayloads, eq(webhookPayloads.id, d.payloadId))
        .where(and(ofHooks, placementFilter(access, eventPlacement(sql`${webhookPayloads.body}`, ofDevice))))
        .groupBy(d.webhookId)
    : await db.select(columns).from(d).where(ofHooks).groupBy(d.webhookId);
  for (const r of rows) {
    out.set(r.webhookId, {
      total: r.total,
      pending: r.pending,
      delivered: r.delivered,
      failed: r.failed,
      retrying: r.retrying,
      lastDeliveredAt: isoOrNull(r.last ? new Date(r.last) : null),
      attempts: { succeeded: r.delivered, failed: r.attempts - r.delivered },
    });
  }
  return out;
}

const EMPTY_STATS: DeliveryStats = { total: 0, pending: 0, delivered: 0, failed: 0, retrying: 0, lastDeliveredAt: null, attempts: { succeeded: 0, failed: 0 } };

/** One webhook's numbers (`deliveryStatsOf`). */
export async function deliveryStats(db: Db, access: AccessContext, webhookId: string, ofDevice: DevicePlacement): Promise<DeliveryStats> {
  return (await deliveryStatsOf(db, access, [webhookId], ofDevice)).get(webhookId) ?? EMPTY_STATS;
}

/** A webhook's read: the webhook and its numbers (`withStats`). */
export async function readWebhook(keel: Keel, access: AccessContext, id: string, ofDevice: DevicePlacement): Promise<WebhookWithStats> {
  const row = await visibleWebhook(keel.db, access, id);
  return withStats(webhookView(keel, row), await deliveryStats(keel.db, access, row.id, ofDevice), access);
}

export async function listDeliveries(
  keel: Keel,
  access: AccessContext,
  webhookId: string,
  q: Paging & { status?: DeliveryStatus | undefined },
  ofDevice: DevicePlacement,
): Promise<{ data: DeliveryView[]; total: number }> {
  await visibleWebhook(keel.db, access, webhookId);
  const where: SQL | undefined = and(
    eq(webhookDeliveries.webhookId, webhookId),
    q.status ? eq(webhookDeliveries.status, q.status) : undefined,
    restricted(access) ? placementFilter(access, eventPlacement(sql`${webhookPayloads.body}`, ofDevice)) : undefined,
  );
  const [total] = await keel.db
    .select({ n: count() })
    .from(webhookDeliveries)
    .innerJoin(webhookPayloads, eq(webhookPayloads.id, webhookDeliveries.payloadId))
    .where(where);
  const rows = await keel.db
    .select({ ...getTableColumns(webhookDeliveries), payload: webhookPayloads.body })
    .from(webhookDeliveries)
    .innerJoin(webhookPayloads, eq(webhookPayloads.id, webhookDeliveries.payloadId))
    .where(where)
    .orderBy(desc(webhookDeliveries.createdAt), desc(webhookDeliveries.id))
    .limit(q.limit)
    .offset((q.page - 1) * q.limit);
  return { data: rows.map(deliveryView), total: total?.n ?? 0 };
}

const insertDeliveries = prepared(
  'webhook_deliveries_insert',
  `with pl as (
     insert into webhook_payloads (id, org_id, body, event_type, created_at) values ($8::uuid, $3::uuid, $6::json, $9::text, $7::timestamptz)
   )
   insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at, traceparent)
   select d.id, d.webhook_id, $3, $4, $5, $8::uuid, 'pending', 0, $7::timestamptz, $7::timestamptz, $10::text
     from unnest($1::uuid[], $2::uuid[]) as d(id, webhook_id)`,
);

/**
 * Inserts the body once and one pending delivery per webhook referring to it; answers the new ids.
 * Runs in the caller's transaction. `storedType`: the event's type on its payload, for an event a
 * replay may send again; none for a test delivery's body. While tracing is on, the rows carry the
 * caller's trace, which their attempts continue (tracing.ts).
 */
export async function enqueueDeliveries(db: Db, webhookIds: string[], orgId: string | null, eventType: string, eventId: string, body: string, storedType: string | null = null): Promise<string[]> {
  if (webhookIds.length === 0) return [];
  const ids = webhookIds.map(() => newId());
  await rawQuery(db, insertDeliveries, [ids, webhookIds, orgId, eventType, eventId, body, clock.now().toISOString(), newId(), storedType, activeTracer ? (currentTraceparent() ?? null) : null]);
  return ids;
}

export const TEST_EVENT = 'webhook.test';

export async function testWebhook(
  keel: Keel,
  access: AccessContext,
  id: string,
  input: { event?: string | undefined; payload?: Record<string, unknown> | undefined },
  info: AuditRequestInfo,
): Promise<{ message: string; delivery: { id: string; webhookId: string; status: 'pending'; event: string; attempt: number } }> {
  const hook = await visibleWebhook(keel.db, access, id);
  if (hook.status !== 'active') throw webhooksError('webhook_not_active', { message: `Only an active webhook can be tested; this one is ${apiStatus(hook.status)}` });
  await spendManual(keel, access, id);
  const event = input.event ?? TEST_EVENT;
  // Naming a real event type sends what looks like that event (marked as a test): only for callers
  // who may publish events. The default test event needs webhooks:write alone.
  if (event !== TEST_EVENT && !access.can('events', 'publish')) throw permissionDenied('events', 'publish');
  const timestamp = clock.now().toISOString();
  const data = input.payload ?? { message: 'This is a test delivery from Keel', timestamp, webhookId: id };
  const eventId = newId();
  const body = JSON.stringify(eventBody({ id: eventId, type: event, timestamp, orgId: hook.orgId, data }, true));
  const deliveryId = newId();
  const audit = auditInsert(info, { action: 'webhook.test', ...auditTenant(access, hook), target: { type: 'webhook', id }, details: { event } }, TEST_PARAMS + 1);
  const traceparent = activeTracer ? (currentTraceparent() ?? null) : null;
  await rawQuery(keel.db, testInsert(audit.text), [deliveryId, id, hook.orgId, event, eventId, body, clock.now().toISOString(), newId(), traceparent, ...audit.params]);
  webhooksRuntime(keel).announce([deliveryId], [id]);
  return { message: 'Test delivery queued', delivery: { id: deliveryId, webhookId: id, status: 'pending', event, attempt: 0 } };
}

/**
 * A test delivery in one statement: its body, its pending row (with the request's `traceparent`, $9,
 * null while tracing is off) and its audit entry (from $10), atomic
 * without BEGIN and COMMIT. A transaction of three statements cost five round trips and held the
 * organisation's audit chain head (the `audit_logs_link` trigger) locked across two of them, so
 * concurrent tests of an organisation queued behind each other's COMMIT (docs/decisions.md "Speed:
 * publishing and deliveries").
 */
const TEST_PARAMS = 9;
let testStatement: Statement | null = null;
function testInsert(auditText: string): Statement {
  testStatement ??= prepared(
    'webhook_test_insert',
    `with pl as (
       insert into webhook_payloads (id, org_id, body, event_type, created_at) values ($8::uuid, $3::uuid, $6::json, null, $7::timestamptz)
     ), d as (
       insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at, traceparent)
       values ($1::uuid, $2::uuid, $3::uuid, $4::text, $5::text, $8::uuid, 'pending', 0, $7::timestamptz, $7::timestamptz, $9::text)
     ), a as (${auditText})
     select 1`,
  );
  return testStatement;
}

const insertRetry = prepared(
  'webhook_delivery_retry_insert',
  `insert into webhook_deliveries (id, webhook_id, org_id, event_type, event_id, payload_id, status, attempts, next_retry_at, created_at, retry_of, traceparent)
   select $1::uuid, d.webhook_id, d.org_id, d.event_type, d.event_id, d.payload_id, 'pending', 0, $3::timestamptz, $3::timestamptz, d.id, $4::text
     from webhook_deliveries d where d.id = $2::uuid
   on conflict (retry_of) where retry_of is not null do nothing
   returning id`,
);

/**
 * docs/specification.md "Webhooks: deliveries": a `failed` delivery is copied into a new pending record (same event type, event id and
 * payload), linked to it by `retryOf`; the original stays failed. One retry per failed delivery: a
 * second (or a concurrent one) is 409 `already_retried` naming the retry (the unique index on
 * `retry_of` decides between concurrent ones).
 */
export async function retryDelivery(
  keel: Keel,
  access: AccessContext,
  webhookId: string,
  deliveryId: string,
  info: AuditRequestInfo,
): Promise<{ message: string; delivery: { id: string; webhookId: string; status: 'pending'; event: string; attempt: number } }> {
  const hook = await visibleWebhook(keel.db, access, webhookId);
  const [original] = await rawQuery<{ status: DeliveryStatus; event_type: string; retried_by: string | null }>(
    keel.db,
    prepared(
      'webhook_delivery_for_retry',
      'select d.status, d.event_type, (select r.id from webhook_deliveries r where r.retry_of = d.id) as retried_by from webhook_deliveries d where d.id = $1 and d.webhook_id = $2',
    ),
    [deliveryId, webhookId],
  );
  if (!original) throw notFound('Delivery');
  if (original.status !== 'failed') throw webhooksError('delivery_not_failed');
  const retried = (by: string) => webhooksError('already_retried', { details: { retryDeliveryId: by } });
  if (original.retried_by) throw retried(original.retried_by);
  await spendManual(keel, access, webhookId);
  const id = await transaction(keel.db, async (tx) => {
    const [row] = await rawQuery<{ id: string }>(tx.db, insertRetry, [newId(), deliveryId, clock.now().toISOString(), activeTracer ? (currentTraceparent() ?? null) : null]);
    if (!row) return null;
    await writeAudit(tx.db, info, {
      action: 'webhook.delivery.retry',
      ...auditTenant(access, hook),
      target: { type: 'webhook_delivery', id: deliveryId },
      details: { webhookId, newDeliveryId: row.id },
    });
    tx.afterCommit(() => webhooksRuntime(keel).announce([row.id], [webhookId]));
    return row.id;
  });
  if (id === null) {
    const [by] = await rawQuery<{ id: string }>(keel.db, prepared('webhook_delivery_retried_by', 'select id from webhook_deliveries where retry_of = $1'), [deliveryId]);
    throw retried(by?.id ?? '');
  }
  return { message: 'Delivery queued for retry', delivery: { id, webhookId, status: 'pending', event: original.event_type, attempt: 0 } };
}

/**
 * `POST /events`: publishes an event of another component on the bus. The routing is one statement:
 * a transaction is opened only when another subscriber adds writes of its own.
 */
export async function publishEvent(keel: Keel, orgId: string, type: EventType, data: Record<string, unknown>): Promise<KeelEvent> {
  return transactionIf(keel.events.subscriberCount(type) > 1, keel.db, (tx) => keel.events.publish(tx, type, orgId, data as never));
}

// The runtime (engine and wake-ups) of a Keel instance, part of the module's handle (runtime.ts
// `installWebhooks`), read here through the container so the service stays free of the engine.
export interface RuntimeHooks {
  /** New deliveries (of these webhooks) were committed: wake a worker (here, and through Redis or NOTIFY elsewhere). */
  announce(deliveryIds: string[], webhookIds: string[]): void;
  /** A claim for rows about to be routed, when this process's engine runs and has room (DeliveryEngine.ticket). */
  ticket(): RouteTicket | null;
  /** Committed rows routed with a ticket: this process's engine attempts them. */
  accept(rows: ClaimedDelivery[]): void;
  /** Something may be due again (a webhook re-activated). */
  wake(): void;
}
export function webhooksRuntime(keel: Keel): RuntimeHooks {
  return keel.modules.get('webhooks').runtime;
}
