import type { Result, Router } from 'hono/router';
import { TrieRouter } from 'hono/router/trie-router';

/** How many matches are remembered (Keel has about a hundred fixed paths; the rest carry ids). */
const CACHE_MAX = 2_000;

/**
 * Hono's TrieRouter with the answers for fixed paths remembered.
 *
 * Hono's fast RegExpRouter refuses Keel's routes: the API puts fixed paths beside parameters on the
 * same level (`/roles/permissions/available` next to `/roles/:id`), so hono falls back to the
 * TrieRouter, which walks every pattern and middleware entry of the tree on each request: about
 * 12 µs of a 90 µs authenticated read (bench/README.md "Profiling"). A method and path always
 * match the same handlers with the same parameters, and hono only reads a match, so the answer is
 * kept and reused. The cache is bounded and least-recently-used goes first, so the fixed paths in
 * use stay while paths with ids come and go (a stream of unknown paths costs only the walk it would
 * have cost anyway); any route added clears it.
 */
export class CachedTrieRouter<T> implements Router<T> {
  readonly name = 'CachedTrieRouter';
  readonly #trie = new TrieRouter<T>();
  readonly #cache = new Map<string, Result<T>>();

  /** How many matches are remembered now. */
  get size(): number {
    return this.#cache.size;
  }

  add(method: string, path: string, handler: T): void {
    this.#cache.clear();
    this.#trie.add(method, path, handler);
  }

  match(method: string, path: string): Result<T> {
    const key = `${method} ${path}`;
    const known = this.#cache.get(key);
    if (known) {
      // Most recently used moves to the back (a Map keeps insertion order).
      this.#cache.delete(key);
      this.#cache.set(key, known);
      return known;
    }
    const result = this.#trie.match(method, path);
    if (this.#cache.size >= CACHE_MAX) {
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
    }
    this.#cache.set(key, result);
    return result;
  }
}

/** The methods hono can answer for a path, from an app's routes (middleware, registered for every method, left out). */
export function methodIndex(routes: () => readonly { method: string; path: string }[]): (path: string) => string[] {
  const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
  let built = -1;
  let trie = new TrieRouter<string>();
  return (path) => {
    const all = routes();
    if (built !== all.length) {
      trie = new TrieRouter<string>();
      for (const r of all) if (METHODS.includes(r.method)) trie.add(r.method, r.path, r.method);
      built = all.length;
    }
    const allowed = METHODS.filter((m) => trie.match(m, path)[0].length > 0);
    // hono answers HEAD with the GET route.
    return allowed.includes('GET') ? ['GET', 'HEAD', ...allowed.filter((m) => m !== 'GET')] : allowed;
  };
}
