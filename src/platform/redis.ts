import type { Redis } from 'ioredis';

/**
 * One Redis connection for commands; subscribers open their own (a subscribed connection takes no
 * commands). ioredis is loaded only when Redis is configured.
 */
export async function connectRedis(url: string): Promise<Redis> {
  const { Redis: Client } = await import('ioredis');
  const client = new Client(url, { maxRetriesPerRequest: 3, enableOfflineQueue: true, lazyConnect: false });
  // Connection errors are retried by ioredis; they must not crash the process.
  client.on('error', () => undefined);
  return client;
}

export type { Redis };
