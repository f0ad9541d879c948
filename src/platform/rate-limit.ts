import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Redis } from './redis.js';
import { tooManyRequests } from './http/errors.js';

export interface Limit {
  /** Spends one point for `key`; throws the 429 AppError (with retryAfter) when the limit is reached. */
  consume(key: string, points?: number): Promise<void>;
  /** Spends one point without throwing; returns the seconds to wait, or 0 when allowed. */
  hit(key: string): Promise<number>;
  /** Seconds to wait if `key` is over the limit now (spends nothing), else 0. */
  blockedFor(key: string): Promise<number>;
  reset(key: string): Promise<void>;
  /** Gives back points spent by `consume` (an attempt that turned out not to count, e.g. a right password). */
  refund(key: string, points?: number): Promise<void>;
}

/**
 * Named limits backed by Redis when REDIS_URL is set (shared by every instance), in-process memory
 * otherwise. One factory so every limit in Keel counts and answers the same way.
 *
 * While Redis is unreachable a limit falls back to this process's own memory at once (never waits for
 * Redis, never fails the request): the limits still hold, per process instead of across all of them,
 * until Redis answers again (docs/decisions.md "Many processes and faults").
 */
export class RateLimits {
  constructor(private readonly redis: Redis | null) {}

  /**
   * A named limit. A module defines its limits once, when it is installed, and keeps them in its
   * handle (docs/architecture.md "Modules and their jobs").
   */
  define(name: string, points: number, durationSeconds: number): Limit {
    const opts = { keyPrefix: `service:rl:${name}`, points, duration: durationSeconds };
    const limiter: RateLimiterAbstract = this.redis
      ? new RateLimiterRedis({ ...opts, storeClient: this.redis, rejectIfRedisNotReady: true, insuranceLimiter: new RateLimiterMemory(opts) })
      : new RateLimiterMemory(opts);
    const waitSeconds = (res: RateLimiterRes) => Math.max(1, Math.ceil(res.msBeforeNext / 1000));
    // One point: through Redis, spent together with the same key's other points of this turn (see coalesce).
    const one: (key: string) => Promise<RateLimiterRes | null> = this.redis ? coalesce(limiter, points) : (key) => spend(limiter, key, 1);
    return {
      async consume(key, p = 1) {
        const refused = p === 1 ? await one(key) : await spend(limiter, key, p);
        if (refused) throw tooManyRequests(waitSeconds(refused));
      },
      async hit(key) {
        const refused = await one(key);
        return refused ? waitSeconds(refused) : 0;
      },
      async blockedFor(key) {
        const res = await limiter.get(key);
        if (!res || res.consumedPoints < points) return 0;
        return waitSeconds(res);
      },
      async reset(key) {
        await limiter.delete(key);
      },
      async refund(key, p = 1) {
        await limiter.reward(key, p);
      },
    };
  }
}

/** Spends `p` points of `key`: null when allowed, the limiter's answer when refused. */
async function spend(limiter: RateLimiterAbstract, key: string, p: number): Promise<RateLimiterRes | null> {
  try {
    await limiter.consume(key, p);
    return null;
  } catch (err) {
    if (err instanceof RateLimiterRes) return err;
    throw err;
  }
}

/**
 * One point at a time for a Redis-backed limit, sent as one spend per key and turn of the event loop:
 * the points asked for the same key by requests that arrived together (fifty publishes of one API
 * key) go to Redis as one `consume(key, n)`, one round trip instead of n (a publish's main thread
 * on PostgreSQL + Redis went from ~0.2 to ~0.12 ms: bench/README.md "Publishing"). The count is the same as n
 * calls one by one: Redis adds n either way (a refused call is counted too), and of the n, the first
 * `points - (count after - n)` are allowed and the rest refused, in the order they were asked.
 * Waiting for the turn's end (setImmediate, after the I/O callbacks that carried the requests)
 * delays a lone request by one turn of the loop, not by a timer.
 */
function coalesce(limiter: RateLimiterAbstract, points: number): (key: string) => Promise<RateLimiterRes | null> {
  interface Asker {
    resolve: (refused: RateLimiterRes | null) => void;
    reject: (err: unknown) => void;
  }
  let pending = new Map<string, Asker[]>();
  const flush = () => {
    const batch = pending;
    pending = new Map();
    for (const [key, askers] of batch) {
      const n = askers.length;
      spend(limiter, key, n).then(
        (refused) => {
          // Allowed: everyone. Refused: the first `allowed` of them would have passed one by one.
          const allowed = refused ? Math.min(n, Math.max(0, points - (refused.consumedPoints - n))) : n;
          askers.forEach((a, i) => a.resolve(i < allowed ? null : refused));
        },
        (err: unknown) => askers.forEach((a) => a.reject(err)),
      );
    }
  };
  return (key) =>
    new Promise((resolve, reject) => {
      if (pending.size === 0) setImmediate(flush);
      const askers = pending.get(key);
      if (askers) askers.push({ resolve, reject });
      else pending.set(key, [{ resolve, reject }]);
    });
}
