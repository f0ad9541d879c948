import type { Database } from './db/client.js';
import type { Redis } from './redis.js';
import { connectRedis } from './redis.js';
import type { Logger } from './logger.js';

const CHANNEL = 'keel_invalidate';

export type InvalidationHandler = (key: string) => void;

/**
 * Cross-process cache invalidation. `publish(topic, key)` runs local handlers at once and pushes the
 * message to every other process (Redis pub/sub when REDIS_URL is set, PostgreSQL NOTIFY otherwise),
 * so a revoked session or a changed role stops working everywhere within a second (DECISIONS "Caches").
 */
export class Invalidation {
  readonly #handlers = new Map<string, Set<InvalidationHandler>>();
  readonly #origin = Math.random().toString(36).slice(2);
  #stop: (() => Promise<void>) | null = null;

  constructor(
    private readonly transport: { database: Database; redisUrl: string | undefined; redis: Redis | null },
    private readonly log: Logger,
  ) {}

  on(topic: string, handler: InvalidationHandler): void {
    const set = this.#handlers.get(topic) ?? new Set();
    set.add(handler);
    this.#handlers.set(topic, set);
  }

  async start(): Promise<void> {
    const receive = (raw: string) => {
      try {
        const msg = JSON.parse(raw) as { o: string; t: string; k: string };
        if (msg.o !== this.#origin) this.#dispatch(msg.t, msg.k);
      } catch {
        this.log.warn('malformed invalidation message ignored');
      }
    };
    if (this.transport.redisUrl) {
      const sub = await connectRedis(this.transport.redisUrl);
      await sub.subscribe(CHANNEL);
      sub.on('message', (_channel: string, message: string) => receive(message));
      this.#stop = async () => {
        sub.disconnect();
        return Promise.resolve();
      };
    } else if (this.transport.database.kind === 'postgres') {
      this.#stop = await this.transport.database.listen(CHANNEL, receive);
    }
    // PGlite is one process: local dispatch is all there is.
  }

  async publish(topic: string, key: string): Promise<void> {
    this.#dispatch(topic, key);
    const message = JSON.stringify({ o: this.#origin, t: topic, k: key });
    if (this.transport.redis) await this.transport.redis.publish(CHANNEL, message);
    else if (this.transport.database.kind === 'postgres') await this.transport.database.notify(CHANNEL, message);
  }

  async stop(): Promise<void> {
    await this.#stop?.();
    this.#stop = null;
  }

  #dispatch(topic: string, key: string): void {
    for (const h of this.#handlers.get(topic) ?? []) h(key);
  }
}
