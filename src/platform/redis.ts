import type { Redis } from 'ioredis';
import { activeTracer } from './tracing/index.js';
import { traceRedis } from './tracing/redis.js';

/**
 * One Redis connection for commands; subscribers open their own (a subscribed connection takes no
 * commands). ioredis is loaded only when Redis is configured.
 */
export async function connectRedis(url: string): Promise<Redis> {
  const { Redis: Client } = await import('ioredis');
  const client = new Client(url, { maxRetriesPerRequest: 3, enableOfflineQueue: true, lazyConnect: false });
  // Connection errors are retried by ioredis; they must not crash the process.
  client.on('error', () => undefined);
  // Tracing on (docs/deploy.md "Tracing"): a span per command; off, the client is untouched.
  if (activeTracer) traceRedis(client);
  return client;
}

export type { Redis };
