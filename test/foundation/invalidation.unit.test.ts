import { afterEach, describe, expect, it, vi } from 'vitest';
import { pino } from 'pino';
import { Invalidation } from '../../src/platform/invalidation.js';
import type { Database } from '../../src/platform/db/client.js';

describe('Invalidation: the staleness bound', () => {
  afterEach(() => vi.useRealTimers());
  const transport = { database: { kind: 'pglite' } as Database, redisUrl: undefined, redis: null };

  it('empties every listening cache at least once per maxStalenessMs, and stops doing so when stopped', async () => {
    vi.useFakeTimers();
    const bus = new Invalidation(transport, pino({ level: 'silent' }), { maxStalenessMs: 30_000 });
    let drops = 0;
    bus.onResync(() => {
      drops++;
    });
    await bus.start();
    vi.advanceTimersByTime(29_999);
    expect(drops).toBe(0);
    vi.advanceTimersByTime(1);
    expect(drops).toBe(1);
    vi.advanceTimersByTime(60_000);
    expect(drops).toBe(3);
    await bus.stop();
    vi.advanceTimersByTime(60_000);
    expect(drops).toBe(3);
  });

  it('refreshAll runs every cache\'s resync, waits for those that read back, and one that fails stops no other', async () => {
    const bus = new Invalidation(transport, pino({ level: 'silent' }));
    const done: string[] = [];
    bus.onResync(async () => {
      await new Promise((r) => setTimeout(r, 5));
      done.push('read back');
    });
    bus.onResync(() => Promise.reject(new Error('database gone')));
    bus.onResync(() => {
      done.push('dropped');
    });
    await bus.refreshAll();
    expect(done.sort()).toEqual(['dropped', 'read back']);
  });

  it('never drops on a timer without a bound (one process: PGlite)', async () => {
    vi.useFakeTimers();
    const bus = new Invalidation(transport, pino({ level: 'silent' }));
    let drops = 0;
    bus.onResync(() => {
      drops++;
    });
    await bus.start();
    vi.advanceTimersByTime(3_600_000);
    expect(drops).toBe(0);
    await bus.stop();
  });
});
