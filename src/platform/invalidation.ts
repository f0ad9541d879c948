import type { Database } from './db/client.js';
import type { Redis } from './redis.js';
import { connectRedis } from './redis.js';
import type { Logger } from './logger.js';

const CHANNEL = 'keel_invalidate';

/**
 * The Redis channel of a deployment on logical database `db`. Redis pub/sub ignores the logical
 * database, so deployments sharing a Redis server on different databases (as docs/deploy.md allows)
 * would each hear the others' drops: harmless to correctness, but every foreign drop empties caches
 * and costs reads. Database 0 keeps the name every earlier version used, so a rolling upgrade of a
 * deployment on database 0 loses no message (docs/decisions.md "Caches").
 */
export function invalidationChannel(db: number): string {
  return db ? `${CHANNEL}:${db}` : CHANNEL;
}

/** How long a starting process waits for its Redis subscription before it starts without it. */
const REDIS_START_WAIT_MS = 3000;

export type InvalidationHandler = (key: string) => void;

/**
 * Cross-process cache invalidation. `publish(topic, key)` runs local handlers at once and pushes the
 * message to every other process (Redis pub/sub when REDIS_URL is set, PostgreSQL NOTIFY otherwise),
 * so a revoked session or a changed role stops working everywhere within a second (docs/decisions.md "Caches").
 *
 * With Redis on PostgreSQL every process listens on both; a message goes by Redis, and by NOTIFY when
 * Redis is not connected or refuses it, so a revocation still reaches every process while Redis is
 * down (docs/decisions.md "Many processes and faults"). Handlers drop cache entries, so a message heard twice is harmless.
 */
export class Invalidation {
  readonly #handlers = new Map<string, Set<InvalidationHandler>>();
  readonly #resync = new Set<() => void | Promise<void>>();
  readonly #origin = Math.random().toString(36).slice(2);
  #stop: (() => Promise<void>) | null = null;

  #refresh: NodeJS.Timeout | null = null;
  /** The Redis channel (per logical database); NOTIFY uses CHANNEL, which PostgreSQL scopes to the database already. */
  readonly #channel: string;

  constructor(
    private readonly transport: { database: Database; redisUrl: string | undefined; redis: Redis | null },
    private readonly log: Logger,
    /**
     * `maxStalenessMs`: every cache that listens is emptied at least this often (a second line behind the
     * messages: a change committed by a process that died before announcing it, or a message the bus
     * lost without a reconnect, is seen by every process within this bound). Off when omitted (PGlite:
     * one process).
     */
    private readonly opts: { maxStalenessMs?: number } = {},
  ) {
    this.#channel = invalidationChannel(transport.redis?.options.db ?? 0);
  }

  on(topic: string, handler: InvalidationHandler): void {
    const set = this.#handlers.get(topic) ?? new Set();
    set.add(handler);
    this.#handlers.set(topic, set);
  }

  /**
   * `drop` empties a whole cache (or, where reading it back costs less than refilling it entry by entry,
   * keeps only what the database still says: agents/state.ts). It runs when messages may have been missed: the Redis subscription
   * or the PostgreSQL LISTEN connection came back after a loss (a server restart). Every cache that
   * listens to a topic registers one, so a revocation sent while this process was deaf still applies.
   */
  onResync(drop: () => void | Promise<void>): void {
    this.#resync.add(drop);
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
    const stops: (() => Promise<void>)[] = [];
    if (this.transport.redisUrl) {
      // A process starts whether or not Redis answers (degraded as a running process is during an
      // outage: messages by NOTIFY, limits per process, /health/ready naming Redis) and subscribes
      // once Redis is ready, on every (re)connection; what was published meanwhile may be lost.
      const sub = await connectRedis(this.transport.redisUrl);
      sub.on('message', (_channel: string, message: string) => receive(message));
      let subscribed = false;
      // A time without a subscription since the start: the next subscription empties the caches.
      let missed = false;
      let firstSubscribed: ((ok: boolean) => void) | null = null;
      const first = new Promise<boolean>((resolve) => (firstSubscribed = resolve));
      const subscribe = (): void => {
        sub.subscribe(this.#channel).then(
          () => {
            firstSubscribed?.(true);
            if (subscribed) return;
            subscribed = true;
            if (missed) {
              missed = false;
              this.#lost('Redis');
            }
          },
          () => undefined, // not ready after all: the next 'ready' tries again
        );
      };
      sub.on('close', () => {
        if (subscribed) missed = true;
        subscribed = false;
      });
      sub.on('ready', subscribe);
      if (sub.status === 'ready') subscribe();
      let timer: NodeJS.Timeout | undefined;
      const inTime = await Promise.race([first, new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), REDIS_START_WAIT_MS)))]);
      clearTimeout(timer);
      firstSubscribed = null;
      if (!inTime) {
        missed = true;
        this.log.warn('invalidation: Redis is not reachable; starting without it (messages go by PostgreSQL NOTIFY until it is)');
      }
      stops.push(async () => {
        sub.disconnect();
        return Promise.resolve();
      });
    }
    if (this.transport.database.kind === 'postgres') stops.push(await this.transport.database.listen(CHANNEL, receive, () => this.#lost('PostgreSQL')));
    // PGlite is one process: local dispatch is all there is.
    if (this.opts.maxStalenessMs) {
      this.#refresh = setInterval(() => void this.refreshAll(), this.opts.maxStalenessMs);
      this.#refresh.unref();
    }
    this.#stop = async () => {
      if (this.#refresh) clearInterval(this.#refresh);
      this.#refresh = null;
      for (const stop of stops) await stop();
    };
  }

  async publish(topic: string, key: string): Promise<void> {
    this.#dispatch(topic, key);
    const message = JSON.stringify({ o: this.#origin, t: topic, k: key });
    const { redis, database } = this.transport;
    if (redis && redis.status === 'ready') {
      try {
        await redis.publish(this.#channel, message);
        return;
      } catch (err) {
        if (database.kind !== 'postgres') throw err;
        this.log.warn({ topic }, 'invalidation: Redis refused the message; sent by PostgreSQL NOTIFY instead');
      }
    }
    if (database.kind === 'postgres') await database.notify(CHANNEL, message);
  }

  async stop(): Promise<void> {
    await this.#stop?.();
    this.#stop = null;
  }

  /**
   * Empties (or revalidates: agents/state.ts) every listening cache, what the staleness bound does on
   * its timer; resolves when every cache is done. A cache that fails logs its own failure.
   */
  async refreshAll(): Promise<void> {
    await Promise.allSettled([...this.#resync].map(async (drop) => drop()));
  }

  #lost(via: string): void {
    this.log.warn({ via }, 'invalidation: the connection came back; every cache is dropped or read back (messages may have been missed)');
    void this.refreshAll();
  }

  #dispatch(topic: string, key: string): void {
    for (const h of this.#handlers.get(topic) ?? []) h(key);
  }
}
