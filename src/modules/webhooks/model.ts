import { EVENT_TYPES } from '../../events.js';
import type { DeliveryStatus, RetryPolicy, StoredWebhookStatus } from './schema.js';
import { reservedHeader } from './signing.js';

/** What the webhooks module decides without a database: status names, redaction, header and policy rules. */

export type ApiWebhookStatus = 'active' | 'paused' | 'failed';

const TO_STORED: Record<ApiWebhookStatus, StoredWebhookStatus> = { active: 'active', paused: 'disabled', failed: 'error' };
const TO_API: Record<StoredWebhookStatus, ApiWebhookStatus> = { active: 'active', disabled: 'paused', error: 'failed' };

export const storedStatus = (s: ApiWebhookStatus): StoredWebhookStatus => TO_STORED[s];
export const apiStatus = (s: StoredWebhookStatus): ApiWebhookStatus => TO_API[s];

export const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'delivered', 'failed', 'retrying'];

/** The defaults of docs/specification.md "Limits": 5 retries after the first attempt, 1 s doubling, at most 5 minutes. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxRetries: 5, initialDelayMs: 1_000, backoffMultiplier: 2, maxDelayMs: 300_000 };

/** Bounds of a webhook's own `retryPolicy` (docs/decisions.md "Webhook shapes": settable within bounds). */
export const RETRY_BOUNDS = {
  maxRetries: [0, 10],
  initialDelayMs: [100, 3_600_000],
  backoffMultiplier: [1, 10],
  maxDelayMs: [100, 86_400_000],
} as const;

export function effectivePolicy(stored: Partial<RetryPolicy> | null | undefined): RetryPolicy {
  if (stored?.schedule === 'extended') return EXTENDED_POLICY;
  return { ...DEFAULT_RETRY_POLICY, ...(stored ?? {}) };
}

/**
 * The named `extended` schedule (docs/decisions.md "Retry schedules"), for receivers that may be down
 * for a day: after the first attempt, retries 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h later (about
 * 27.6 hours in all), each delay moved by up to ±10 % at random so that the retries of many deliveries
 * that failed together do not all arrive together.
 */
export const EXTENDED_DELAYS_MS: readonly number[] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];
export const EXTENDED_JITTER = 0.1;
const EXTENDED_POLICY: RetryPolicy = { maxRetries: EXTENDED_DELAYS_MS.length, initialDelayMs: 5_000, backoffMultiplier: 1, maxDelayMs: 36_000_000, schedule: 'extended' };

/** Which schedule a stored policy is: none stored is the default, `extended` by name, anything else custom. */
export function retrySchedule(stored: Partial<RetryPolicy> | null | undefined): 'default' | 'extended' | 'custom' {
  if (!stored) return 'default';
  return stored.schedule === 'extended' ? 'extended' : 'custom';
}

/**
 * The delay before retry n+1 (n = 0 for the first retry): docs/specification.md "Limits"'s
 * min(initial × multiplier^n, max), or the extended schedule's n-th delay with its jitter (`random`
 * in [0, 1) picks where in the ±10 %).
 */
export function retryDelayMs(policy: RetryPolicy, n: number, random: () => number = Math.random): number {
  if (policy.schedule === 'extended') {
    const base = EXTENDED_DELAYS_MS[Math.min(n, EXTENDED_DELAYS_MS.length - 1)] ?? 0;
    return Math.round(base * (1 - EXTENDED_JITTER + 2 * EXTENDED_JITTER * random()));
  }
  return Math.min(Math.round(policy.initialDelayMs * policy.backoffMultiplier ** n), policy.maxDelayMs);
}

/** docs/decisions.md "Webhook shapes": query parameters whose values read responses replace with REDACTED. */
const CREDENTIAL_PARAMS = new Set(
  ['token', 'sig', 'signature', 'key', 'apikey', 'api_key', 'access_token', 'secret', 'password', 'code', 'x-amz-signature', 'x-amz-credential'],
);

/** The URL as read responses show it: no userinfo, credential-like query values replaced by REDACTED. */
export function redactUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return '[invalid URL]';
  }
  url.username = '';
  url.password = '';
  if (url.search) {
    const params = new URLSearchParams(url.search);
    let changed = false;
    for (const key of new Set(params.keys())) {
      if (CREDENTIAL_PARAMS.has(key.toLowerCase())) {
        params.set(key, 'REDACTED');
        changed = true;
      }
    }
    if (changed) url.search = params.toString();
  }
  return url.toString();
}

export interface CustomHeader {
  key: string;
  value: string;
}

/** Limits of a webhook's custom headers. */
export const HEADER_LIMITS = { count: 20, nameLength: 100, valueLength: 2_000, totalBytes: 8_192 } as const;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Visible ASCII, space, tab and obs-text; never CR, LF, NUL or other control characters.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** Problems with a list of custom headers, as `{path, message}` (empty when it is fine). */
export function headerProblems(headers: readonly CustomHeader[], field = 'headers'): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = [];
  if (headers.length > HEADER_LIMITS.count) problems.push({ path: field, message: `at most ${HEADER_LIMITS.count} headers` });
  const seen = new Set<string>();
  let total = 0;
  headers.forEach((h, i) => {
    const at = `${field}.${i}`;
    if (!TOKEN.test(h.key) || h.key.length > HEADER_LIMITS.nameLength) {
      problems.push({ path: `${at}.key`, message: `must be a header name (letters, digits and !#$%&'*+.^_\`|~-, at most ${HEADER_LIMITS.nameLength})` });
    } else if (reservedHeader(h.key)) {
      problems.push({ path: `${at}.key`, message: 'is set by Keel and cannot be overridden (Content-Type, User-Agent, X-Service-*, webhook-*, framing headers)' });
    } else if (seen.has(h.key.toLowerCase())) {
      problems.push({ path: `${at}.key`, message: 'is given twice' });
    }
    seen.add(h.key.toLowerCase());
    if (!FIELD_VALUE.test(h.value) || h.value.length > HEADER_LIMITS.valueLength) {
      problems.push({ path: `${at}.value`, message: `must be at most ${HEADER_LIMITS.valueLength} characters without CR, LF or other control characters` });
    }
    total += h.key.length + h.value.length + 4;
  });
  if (total > HEADER_LIMITS.totalBytes) problems.push({ path: field, message: `custom headers may take at most ${HEADER_LIMITS.totalBytes} bytes` });
  return problems;
}

export const WEBHOOK_EVENT_TYPES: readonly string[] = EVENT_TYPES;

/**
 * A delivery row held by this process's engine, with what one attempt needs of its webhook: taken by
 * a claim, or routed straight to the engine with a `RouteTicket` (claimed in the routing statement).
 */
export interface ClaimedDelivery {
  id: string;
  webhookId: string;
  orgId: string;
  eventType: string;
  eventId: string;
  body: string;
  attempts: number;
  urlSealed: string;
  secretSealed: string | null;
  previousSecretSealed: string | null;
  previousSecretExpiresAt: number | null;
  /** Older rotated-out secrets still in their overlap: a sealed JSON list of `PreviousSecret`, newest first. */
  olderSecretsSealed: string | null;
  headersSealed: string | null;
  retryPolicy: Partial<RetryPolicy> | null;
  /** The webhook's `rateLimitPerSecond` (throttle.ts), null when it has none. */
  rateLimitPerSecond: number | null;
  /** Until when a receiver's 429 holds the webhook (epoch ms), or null. */
  holdUntil: number | null;
  /** The trace the attempt continues: the `traceparent` stored on the row (tracing on only: tracing.ts). */
  traceparent?: string | null | undefined;
  claimId: string;
  leaseUntil: number;
}

/** The associated data a sealed column is bound to: a value cannot be moved to another row or column. */
export const aad = (id: string, column: 'url' | 'secret' | 'previous_secret' | 'older_secrets' | 'headers') => `webhook:${id}:${column}`;

/** The request body of a delivery, in this key order; its JSON text is stored and sent as it is. */
export function eventBody(event: { id: string; type: string; timestamp: string; orgId: string | null; data: unknown }, test = false): Record<string, unknown> {
  // A test delivery's `test: true` stands right before `data` (signing.ts `isTestBody` relies on it).
  return test
    ? { id: event.id, type: event.type, timestamp: event.timestamp, orgId: event.orgId, test: true, data: event.data }
    : { id: event.id, type: event.type, timestamp: event.timestamp, orgId: event.orgId, data: event.data };
}

/** A rotated-out secret older than the newest previous one, signing until `expiresAt` (epoch ms). */
export interface PreviousSecret {
  secret: string;
  expiresAt: number;
}

/** How many rotated-out secrets may sign beside the current one (each until its own expiry). */
export const MAX_PREVIOUS_SECRETS = 3;

/** A webhook's columns an attempt needs, as the claim and the routing statements return them. */
export interface WebhookAttemptColumns {
  url_sealed: unknown;
  secret_sealed: unknown;
  previous_secret_sealed: unknown;
  previous_secret_expires_at: unknown;
  older_secrets_sealed: unknown;
  headers_sealed: unknown;
  retry_policy: unknown;
  rate_limit_per_second?: unknown;
  hold_until?: unknown;
}

/** The attempt fields of a `ClaimedDelivery` from those columns (either driver's types: dates and JSON as text or parsed). */
export function attemptFields(r: WebhookAttemptColumns): Pick<ClaimedDelivery, 'urlSealed' | 'secretSealed' | 'previousSecretSealed' | 'previousSecretExpiresAt' | 'olderSecretsSealed' | 'headersSealed' | 'retryPolicy' | 'rateLimitPerSecond' | 'holdUntil'> {
  return {
    urlSealed: r.url_sealed as string,
    secretSealed: (r.secret_sealed as string | null) ?? null,
    previousSecretSealed: (r.previous_secret_sealed as string | null) ?? null,
    previousSecretExpiresAt: r.previous_secret_expires_at == null ? null : new Date(r.previous_secret_expires_at as string).getTime(),
    olderSecretsSealed: (r.older_secrets_sealed as string | null) ?? null,
    headersSealed: (r.headers_sealed as string | null) ?? null,
    retryPolicy: r.retry_policy == null ? null : ((typeof r.retry_policy === 'string' ? JSON.parse(r.retry_policy) : r.retry_policy) as Partial<RetryPolicy>),
    rateLimitPerSecond: r.rate_limit_per_second == null ? null : Number(r.rate_limit_per_second),
    holdUntil: r.hold_until == null ? null : new Date(r.hold_until as string).getTime(),
  };
}

/**
 * Routing straight to this process's engine: the routing statement claims the new rows itself (claim
 * id and lease, as a claim would), except for the webhooks in `full`, whose rows wait for a claim.
 */
export interface RouteTicket {
  claimId: string;
  leaseUntil: number;
  full: string[];
}
