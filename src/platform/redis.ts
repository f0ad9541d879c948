import { Redis } from 'ioredis';

/** One Redis connection for commands; subscribers open their own (a subscribed connection takes no commands). */
export function connectRedis(url: string): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: 3, enableOfflineQueue: true, lazyConnect: false });
  // Connection errors are retried by ioredis; they must not crash the process.
  client.on('error', () => undefined);
  return client;
}

export type { Redis };
