/**
 * The one rate-limit factory (platform/rate-limit.ts): with Redis, the points one key is asked for in
 * the same turn of the event loop are spent in one round trip, and counted exactly as one-by-one
 * calls would be (the limit's first points pass, the rest are 429 with Retry-After; Redis's count
 * rises by all of them). In memory (the embedded default) the same rules hold without Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { backend, backendAvailable } from '../helpers/app.js';
import { redisUrl } from '../helpers/backends.js';
import { connectRedis, type Redis } from '../../src/platform/redis.js';
import { RateLimits } from '../../src/platform/rate-limit.js';
import { AppError } from '../../src/platform/http/errors.js';

const LIMIT = 20;

/** Asks `limit.consume` `n` times in one turn; the answers in order (null: allowed; the seconds to wait: refused). */
async function burst(limits: RateLimits, name: string, key: string, n: number): Promise<(number | null)[]> {
  const limit = limits.define(name, LIMIT, 60);
  const answers = await Promise.allSettled(Array.from({ length: n }, () => limit.consume(key)));
  return answers.map((a) => {
    if (a.status === 'fulfilled') return null;
    expect(a.reason).toBeInstanceOf(AppError);
    expect((a.reason as AppError).status).toBe(429);
    return (a.reason as AppError & { retryAfter?: number }).retryAfter ?? Number((a.reason as AppError).headers?.['Retry-After']);
  });
}

describe.skipIf(!backendAvailable())(`rate limits (${backend})`, () => {
  let redis: Redis | null = null;
  /** Commands this client sent, by name. */
  const sent = new Map<string, number>();

  beforeAll(async () => {
    if (backend !== 'postgres') return;
    redis = await connectRedis(redisUrl());
    // Until Redis is ready, a limit answers from its in-process insurance (a fault test's matter).
    const client = redis;
    if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
    const send = redis.sendCommand.bind(redis);
    redis.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
      sent.set(command.name, (sent.get(command.name) ?? 0) + 1);
      return (send as (...a: unknown[]) => unknown)(command, ...rest);
    });
  });
  afterAll(async () => {
    await redis?.quit();
  });

  it('of parallel points for one key, exactly the limit pass, in the order asked; the rest wait with Retry-After', async () => {
    const limits = new RateLimits(redis);
    const answers = await burst(limits, `burst-${randomUUID()}`, 'key-a', LIMIT + 10);
    expect(answers.slice(0, LIMIT)).toEqual(Array(LIMIT).fill(null));
    for (const wait of answers.slice(LIMIT)) expect(wait).toBeGreaterThan(0);
    // Later points of the same key are refused as well; another key is not held by this one.
    const name = `burst-${randomUUID()}`;
    const limit = limits.define(name, LIMIT, 60);
    for (let i = 0; i < LIMIT; i++) await limit.consume('key-b');
    await expect(limit.consume('key-b')).rejects.toMatchObject({ status: 429 });
    await expect(limit.consume('key-c')).resolves.toBeUndefined();
    expect(await limit.hit('key-b')).toBeGreaterThan(0);
  });

  it.skipIf(backend !== 'postgres')('with Redis, the points of one key asked together cost one round trip, and Redis counts every one', async () => {
    const limits = new RateLimits(redis);
    const name = `trip-${randomUUID()}`;
    const before = [...sent.values()].reduce((a, b) => a + b, 0);
    const answers = await burst(limits, name, 'key-a', 50);
    expect(answers.filter((a) => a === null)).toHaveLength(LIMIT);
    expect([...sent.values()].reduce((a, b) => a + b, 0) - before).toBe(1);
    // Two keys in one turn: one round trip each.
    const other = limits.define(name, LIMIT, 60);
    const mark = [...sent.values()].reduce((a, b) => a + b, 0);
    await Promise.allSettled([other.consume('key-x'), other.consume('key-y'), other.consume('key-x')]);
    expect([...sent.values()].reduce((a, b) => a + b, 0) - mark).toBe(2);
    const counted = await (redis as Redis).get(`service:rl:${name}:key-a`);
    expect(Number(counted)).toBe(50);
  });
});
