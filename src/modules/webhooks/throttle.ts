import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';
import type { Redis } from '../../platform/redis.js';
import type { ClaimedDelivery } from './model.js';

/**
 * Per-webhook throttling and a receiver's 429 (docs/decisions.md "Webhook throttling and stats").
 *
 * - **Permits.** A webhook with `rateLimitPerSecond` starts at most that many attempts per clock
 *   second (`clock.nowSeconds()`), across every worker process: before starting attempts of such a
 *   webhook, the slots (slots.ts) take permits for the current second here, in one round trip for
 *   several. The count lives in Redis when the deployment has it, else in `webhook_rate_windows`
 *   (one row per webhook, the current second and the permits used). Rows without a permit stay
 *   queued (not failed, no attempt counted) and ask again at the next second.
 * - **Holds.** A `429` carrying `Retry-After` (seconds or an HTTP date, at most MAX_HOLD_MS) holds the
 *   webhook until then: the delivery goes back to the queue due at that time, its attempt not counted,
 *   and no claim takes the webhook's rows before it (queue.ts). After MAX_RATE_LIMITED_STREAK such
 *   429s in a row (a hold taken while one is in force is the same hold), the next 429 is counted as
 *   a failed attempt like any other answer; any recorded attempt restarts the count.
 */

/** The longest hold a Retry-After is honoured for. */
export const MAX_HOLD_MS = 60 * 60 * 1000;
/** The shortest hold (a Retry-After of 0 or a date already past). */
export const MIN_HOLD_MS = 1_000;
/** 429s in a row deferred without counting an attempt; the next one counts as a failed attempt. */
export const MAX_RATE_LIMITED_STREAK = 5;
/** Bounds of `rateLimitPerSecond`. */
export const RATE_LIMIT_BOUNDS = [1, 1000] as const;

/**
 * How long a `Retry-After` value asks to wait from `nowMs`, capped to [MIN_HOLD_MS, MAX_HOLD_MS];
 * null when there is none or it is neither a number of seconds nor an HTTP date.
 */
export function retryAfterMs(value: string | string[] | undefined, nowMs: number): number | null {
  const raw = (Array.isArray(value) ? value[0] : value)?.trim();
  if (!raw) return null;
  let ms: number;
  if (/^\d+$/.test(raw)) ms = Number(raw) * 1000;
  else {
    const at = Date.parse(raw);
    if (Number.isNaN(at) || !/[a-z]/i.test(raw)) return null;
    ms = at - nowMs;
  }
  return Math.min(MAX_HOLD_MS, Math.max(MIN_HOLD_MS, ms));
}

/**
 * The permits of one clock second: takes up to `want` of what is left of `limit`, returns how many
 * it took. A new second starts the count again (also when the clock went back, as tests move it).
 */
const takeStatement = prepared(
  'webhook_rate_take',
  `insert into webhook_rate_windows as t (webhook_id, window_second, used, granted) values ($1::uuid, $2::bigint, least($3::int, $4::int), least($3::int, $4::int))
   on conflict (webhook_id) do update
      set used = case when t.window_second = excluded.window_second then t.used + greatest(0, least($3::int, $4::int - t.used)) else least($3::int, $4::int) end,
          granted = case when t.window_second = excluded.window_second then greatest(0, least($3::int, $4::int - t.used)) else least($3::int, $4::int) end,
          window_second = excluded.window_second
   returning granted`,
);

/** Redis: one hash per webhook, {second, used}, kept an hour after its last use. */
const TAKE_SCRIPT = `
local cur = redis.call('HMGET', KEYS[1], 's', 'u')
local used = 0
if cur[1] == ARGV[1] then used = tonumber(cur[2]) or 0 end
local want = tonumber(ARGV[2])
local left = tonumber(ARGV[3]) - used
local got = math.max(0, math.min(want, left))
redis.call('HSET', KEYS[1], 's', ARGV[1], 'u', used + got)
redis.call('PEXPIRE', KEYS[1], 3600000)
return got`;

export interface Permits {
  /** Takes up to `want` permits of `webhookId` for clock second `second` under `limit`; how many it got. */
  take(webhookId: string, limit: number, want: number, second: number): Promise<number>;
}

export function permitsFor(keel: Keel): Permits {
  return keel.redis ? redisPermits(keel.redis) : databasePermits(keel.db);
}

export function databasePermits(db: Db): Permits {
  return {
    async take(webhookId, limit, want, second) {
      // Concurrent takes of one webhook are serialised by its row's lock (an insert that meets another's row updates it).
      const [row] = await rawQuery<{ granted: unknown }>(db, takeStatement, [webhookId, second, want, limit]);
      return row ? Number(row.granted) : 0;
    },
  };
}

export function redisPermits(redis: Redis): Permits {
  return {
    async take(webhookId, limit, want, second) {
      const got = await redis.eval(TAKE_SCRIPT, 1, `service:webhooks:rate:${webhookId}`, String(second), String(want), String(limit));
      return Number(got);
    },
  };
}

/** Whether a row's webhook is throttled (its limit as the claim or the routing statement read it). */
export const limitOf = (row: Pick<ClaimedDelivery, 'rateLimitPerSecond'>): number | null => row.rateLimitPerSecond ?? null;

/**
 * A 429 with Retry-After: holds the webhook until `untilMs` and puts the row back due then, its
 * attempt not counted (fenced by the claim id, like a result). Refused (false) once the webhook had
 * MAX_RATE_LIMITED_STREAK holds in a row: the attempt is then recorded as a failed one.
 */
const deferStatement = prepared(
  'webhook_rate_defer',
  `with h as (
     update webhooks w
        set hold_until = greatest(coalesce(w.hold_until, to_timestamp($4::float8 / 1000.0)), to_timestamp($4::float8 / 1000.0)),
            rate_limited_streak = case when w.hold_until > to_timestamp($5::float8 / 1000.0) then w.rate_limited_streak else w.rate_limited_streak + 1 end
      where w.id = $1::uuid and (w.hold_until > to_timestamp($5::float8 / 1000.0) or w.rate_limited_streak < $6::int)
     returning w.id
   ), d as (
     update webhook_deliveries d
        set next_retry_at = to_timestamp($4::float8 / 1000.0), claim_id = null, lease_expires_at = null,
            response_status = 429, response_body = $7::text, response_time_ms = $8::int, error_message = $9::text
       from h
      where d.id = $2::uuid and d.claim_id = $3::uuid
     returning d.id
   )
   select (select count(*)::int from h) as held`,
);

export interface RateLimitedAnswer {
  responseBody: string | null;
  responseTimeMs: number;
  attemptedAt: number;
}

export async function deferRateLimited(db: Db, row: Pick<ClaimedDelivery, 'id' | 'webhookId' | 'claimId'>, answer: RateLimitedAnswer, untilMs: number): Promise<boolean> {
  const message = `HTTP 429: the receiver asked to wait until ${new Date(untilMs).toISOString()} (Retry-After); not counted as an attempt`;
  const [r] = await rawQuery<{ held: unknown }>(db, deferStatement, [
    row.webhookId,
    row.id,
    row.claimId,
    untilMs,
    answer.attemptedAt,
    MAX_RATE_LIMITED_STREAK,
    answer.responseBody,
    answer.responseTimeMs,
    message,
  ]);
  return Number(r?.held ?? 0) > 0;
}
