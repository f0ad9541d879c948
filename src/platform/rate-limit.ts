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
    return {
      async consume(key, p = 1) {
        try {
          await limiter.consume(key, p);
        } catch (err) {
          if (err instanceof RateLimiterRes) throw tooManyRequests(waitSeconds(err));
          throw err;
        }
      },
      async hit(key) {
        try {
          await limiter.consume(key, 1);
          return 0;
        } catch (err) {
          if (err instanceof RateLimiterRes) return waitSeconds(err);
          throw err;
        }
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
