import type { Invalidation } from './invalidation.js';

/** What a drop removes: one key, every entry a predicate selects, everything (`'*'`), or nothing (`null`). */
export type Selection<V> = string | ((value: V, key: string) => boolean) | null;

export interface CacheOptions<V> {
  /** Entries kept; past it the cache starts over (default 100,000). */
  max?: number;
  /** Whether a loaded value may be kept (default: every value, null included). */
  keep?: (value: V) => boolean;
}

/**
 * A per-process cache of values loaded from the database, dropped by invalidations (docs/decisions.md
 * "Caches"): the one mechanism behind every such cache in Keel.
 *
 * - A drop published on the invalidation bus reaches every process at once (Redis pub/sub or NOTIFY,
 *   platform/invalidation.ts); `listen` subscribes a cache to a topic.
 * - A load that overlapped a drop is answered but not stored (a generation counter), so a value read
 *   before a change never lands after it.
 * - Misses of one key that arrive while its load runs share that load (of the same generation): after a
 *   drop, fifty requests in flight cost one statement, not fifty.
 * - After the bus reconnects (messages may have been missed) a listening cache is emptied.
 */
export class InvalidatedCache<V> {
  readonly #entries = new Map<string, V>();
  readonly #max: number;
  readonly #keep: (value: V) => boolean;
  #generation = 0;
  #resyncing = false;
  /** Loads in flight by key, each with the generation it started in (a later generation starts its own). */
  readonly #loading = new Map<string, { generation: number; value: Promise<V> }>();

  constructor(opts: CacheOptions<V> = {}) {
    this.#max = opts.max ?? 100_000;
    this.#keep = opts.keep ?? (() => true);
  }

  /** The cached value of `key`, else `load()`'s (kept unless a drop overlapped it or `keep` refuses it). */
  async get(key: string, load: () => Promise<V>): Promise<V> {
    if (this.#entries.has(key)) return this.#entries.get(key) as V;
    const generation = this.#generation;
    const running = this.#loading.get(key);
    if (running?.generation === generation) return running.value;
    const entry = { generation, value: this.#load(key, generation, load) };
    this.#loading.set(key, entry);
    // Settled (even a load that threw before its first await): the next miss loads anew.
    const settled = () => {
      if (this.#loading.get(key) === entry) this.#loading.delete(key);
    };
    entry.value.then(settled, settled);
    return entry.value;
  }

  async #load(key: string, generation: number, load: () => Promise<V>): Promise<V> {
    const value = await load();
    if (generation === this.#generation) this.store(key, value);
    return value;
  }

  /**
   * Keeps `value` for `key` now (unless `keep` refuses it): a load that no drop overlapped, or a value
   * its caller has just written itself after publishing its own drop (a later drop removes it as any).
   */
  store(key: string, value: V): void {
    if (!this.#keep(value)) return;
    if (this.#entries.size >= this.#max) this.#entries.clear();
    this.#entries.set(key, value);
  }

  /** The cached value of `key`, without loading it: undefined when none is cached. */
  peek(key: string): V | undefined {
    return this.#entries.get(key);
  }

  /** Drops what `which` selects; any drop (even of nothing cached) keeps loads in flight from being stored. */
  drop(which: Selection<V>): void {
    if (which === null) return;
    this.#generation++;
    if (which === '*') this.#entries.clear();
    else if (typeof which === 'string') this.#entries.delete(which);
    else for (const [key, value] of this.#entries) if (which(value, key)) this.#entries.delete(key);
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * Drops on every message of `topic`: by default the published key is the cache key (`'*'`: all);
   * `select` maps a published key to what it drops. Also empties the cache after a resubscription.
   */
  listen(invalidation: Invalidation, topic: string, select: (published: string) => Selection<V> = (key) => key): this {
    invalidation.on(topic, (key) => this.drop(select(key)));
    if (!this.#resyncing) {
      this.#resyncing = true;
      invalidation.onResync(() => this.drop('*'));
    }
    return this;
  }
}
