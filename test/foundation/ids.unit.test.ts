import { describe, expect, it } from 'vitest';
import { newId, randomV7 } from '../../src/platform/db/columns.js';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const stamp = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);

describe('ids', () => {
  it('newId and randomV7 are UUIDv7 stamped with the current millisecond', () => {
    const before = Date.now();
    const ids = [newId(), randomV7()];
    const after = Date.now();
    for (const id of ids) {
      expect(id).toMatch(V7);
      expect(stamp(id)).toBeGreaterThanOrEqual(before);
      expect(stamp(id)).toBeLessThanOrEqual(after);
    }
  });

  it('newId ids sort in the order they were made, many in one millisecond, and never repeat', () => {
    const ids = Array.from({ length: 20_000 }, () => newId());
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    const perMs = new Map<number, number>();
    for (const id of ids) perMs.set(stamp(id), (perMs.get(stamp(id)) ?? 0) + 1);
    expect(Math.max(...perMs.values())).toBeGreaterThan(1);
  });

  it('randomV7 ids made in one millisecond differ before their last four bytes (routing replaces those)', () => {
    const heads = new Set(Array.from({ length: 2_000 }, () => randomV7().replace(/-/g, '').slice(0, 24)));
    expect(heads.size).toBe(2_000);
  });
});
