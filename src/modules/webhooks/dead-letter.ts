import type { Keel } from '../../keel.js';
import { loggableError } from '../../platform/safe-error.js';

/** The Redis dead-letter list: delivery ids only (never a payload or a secret), newest first. */
export const DLQ_LIST = 'service:webhooks:dlq';
/** The most ids the engine's Redis lists keep (the newest). */
export const LIST_CAP = 10_000;

/**
 * Tells the world about deliveries dead-lettered after their last retry: a log line and, with Redis,
 * the dead-letter list. Called after their record committed; PostgreSQL keeps them as `failed`
 * whatever happens here, so a Redis that fails or is flushed loses nothing.
 */
export async function writeDeadLetters(keel: Keel, ids: string[]): Promise<void> {
  keel.log.warn({ deliveryIds: ids.slice(0, 20), count: ids.length }, 'webhooks: deliveries dead-lettered after their last retry');
  const redis = keel.redis;
  if (!redis) return;
  try {
    await redis.multi().lpush(DLQ_LIST, ...ids).ltrim(DLQ_LIST, 0, LIST_CAP - 1).exec();
  } catch (err) {
    keel.log.warn({ error: loggableError(err) }, 'webhooks: the dead-letter list in Redis could not be written (PostgreSQL keeps the failed deliveries)');
  }
}
