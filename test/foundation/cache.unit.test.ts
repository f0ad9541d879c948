import { describe, expect, it } from 'vitest';
import { InvalidatedCache } from '../../src/platform/cache.js';
import type { Invalidation } from '../../src/platform/invalidation.js';

/** The bus as a cache sees it: handlers by topic, and the resync handlers (the real bus: test/access/invalidation.test.ts). */
function bus() {
  const handlers = new Map<string, ((key: string) => void)[]>();
  const resync: (() => void)[] = [];
  const invalidation = {
    on: (topic: string, h: (key: string) => void) => handlers.set(topic, [...(handlers.get(topic) ?? []), h]),
    onResync: (h: () => void) => resync.push(h),
  } as unknown as Invalidation;
  return {
    invalidation,
    publish: (topic: string, key: string) => handlers.get(topic)?.forEach((h) => h(key)),
    resync: () => resync.forEach((h) => h()),
    resyncHandlers: () => resync.length,
  };
}

describe('InvalidatedCache', () => {
  it('loads once, then answers from memory; keep decides what is stored', async () => {
    const cache = new InvalidatedCache<string | null>({ keep: (v) => v !== null });
    let loads = 0;
    const load = (v: string | null) => () => {
      loads++;
      return Promise.resolve(v);
    };
    expect(await cache.get('a', load('A'))).toBe('A');
    expect(await cache.get('a', load('other'))).toBe('A');
    expect(await cache.get('n', load(null))).toBeNull();
    expect(await cache.get('n', load('N'))).toBe('N');
    expect(loads).toBe(3);
    expect(cache.size).toBe(2);
  });

  it('drops a key, what a predicate selects, everything, or nothing', async () => {
    const cache = new InvalidatedCache<number>();
    for (const [k, v] of [['a', 1], ['b', 2], ['c', 3]] as const) await cache.get(k, () => Promise.resolve(v));
    cache.drop('a');
    expect(cache.size).toBe(2);
    cache.drop((v) => v === 2);
    expect(cache.size).toBe(1);
    cache.drop(null);
    expect(cache.size).toBe(1);
    cache.drop('*');
    expect(cache.size).toBe(0);
  });

  it('a load that overlapped a drop is answered but not stored', async () => {
    const cache = new InvalidatedCache<string>();
    let release!: () => void;
    const slow = cache.get('k', () => new Promise<string>((r) => (release = () => r('before the change'))));
    cache.drop('k'); // the change is published while the old value is being read
    release();
    expect(await slow).toBe('before the change');
    expect(await cache.get('k', () => Promise.resolve('after the change'))).toBe('after the change');
  });

  it('misses of one key while its load runs share that load; after a drop, the next miss loads anew', async () => {
    const cache = new InvalidatedCache<number>();
    const releases: ((v: number) => void)[] = [];
    let loads = 0;
    const load = () => {
      loads++;
      return new Promise<number>((resolve) => releases.push(resolve));
    };
    const first = [cache.get('k', load), cache.get('k', load), cache.get('k', load)];
    const other = cache.get('other', () => Promise.resolve(7));
    expect(loads).toBe(1);
    cache.drop('*'); // a change meanwhile: a miss now must not be answered by the load that began before it
    const after = cache.get('k', load);
    expect(loads).toBe(2);
    releases[0]!(1);
    releases[1]!(2);
    expect(await Promise.all(first)).toEqual([1, 1, 1]);
    expect(await after).toBe(2);
    expect(await other).toBe(7);
    expect(await cache.get('k', load)).toBe(2); // the later load was stored, the earlier one not
    expect(loads).toBe(2);
  });

  it('a shared load that fails fails every caller that shared it, and the next miss tries again', async () => {
    const cache = new InvalidatedCache<number>();
    let loads = 0;
    const failing = () => {
      loads++;
      return Promise.reject(new Error('database gone'));
    };
    const results = await Promise.allSettled([cache.get('k', failing), cache.get('k', failing)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(loads).toBe(1);
    expect(await cache.get('k', () => Promise.resolve(3))).toBe(3);
    // A load that throws before it returns a promise is settled alike: it does not stay in flight.
    const throwing = (): Promise<number> => {
      throw new Error('bad key');
    };
    await expect(cache.get('t', throwing)).rejects.toThrow('bad key');
    expect(await cache.get('t', () => Promise.resolve(4))).toBe(4);
  });

  it('starts over past max entries', async () => {
    const cache = new InvalidatedCache<number>({ max: 2 });
    for (let i = 0; i < 3; i++) await cache.get(`k${i}`, () => Promise.resolve(i));
    expect(cache.size).toBe(1);
  });

  it('listens: the published key (or what select maps it to) is dropped, and a resync empties it', async () => {
    const b = bus();
    const cache = new InvalidatedCache<{ owner: string }>()
      .listen(b.invalidation, 'user')
      .listen(b.invalidation, 'roles', (key) => (key === '*' ? '*' : (v) => v.owner === key));
    expect(b.resyncHandlers()).toBe(1);
    for (const k of ['a', 'b', 'c']) await cache.get(k, () => Promise.resolve({ owner: k === 'c' ? 'x' : 'y' }));
    b.publish('user', 'a');
    expect(cache.size).toBe(2);
    b.publish('roles', 'x');
    expect(cache.size).toBe(1);
    b.resync();
    expect(cache.size).toBe(0);
  });
});
