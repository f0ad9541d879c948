/**
 * The launcher's staleness check (bin/build.js): `npm start` runs the bundle in dist/<fingerprint>/,
 * so the fingerprint must change whenever a source file or the installed package set does, or a
 * start would run stale code.
 */
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fingerprint as printOf } from '../../bin/build.js';

describe('bundle fingerprint', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'keel-build-'));
    mkdirSync(join(root, 'src', 'modules'), { recursive: true });
    mkdirSync(join(root, 'node_modules'));
    writeFileSync(join(root, 'src', 'main.ts'), 'export {};\n');
    writeFileSync(join(root, 'src', 'modules', 'a.ts'), 'export const a = 1;\n');
    writeFileSync(join(root, 'node_modules', '.package-lock.json'), '{}\n');
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('is stable while nothing changes', () => {
    expect(printOf(root)).toBe(printOf(root));
    expect(printOf(root)).toMatch(/^[0-9a-f]{16}$/);
  });

  it('changes when a source is edited, added or removed, or when packages are reinstalled', () => {
    const seen = new Set([printOf(root)]);
    const changed = (): void => {
      const next = printOf(root);
      expect(seen.has(next)).toBe(false);
      seen.add(next);
    };
    writeFileSync(join(root, 'src', 'modules', 'a.ts'), 'export const a = 2;\n'); // same size, new mtime
    utimesSync(join(root, 'src', 'modules', 'a.ts'), new Date(), new Date(Date.now() + 5_000));
    changed();
    writeFileSync(join(root, 'src', 'modules', 'b.ts'), 'export const b = 1;\n');
    changed();
    rmSync(join(root, 'src', 'modules', 'b.ts'));
    const afterRemove = printOf(root);
    expect(afterRemove).not.toBe([...seen].at(-1));
    utimesSync(join(root, 'node_modules', '.package-lock.json'), new Date(), new Date(Date.now() + 10_000));
    expect(printOf(root)).not.toBe(afterRemove);
  });

  it('ignores test files beside the sources', () => {
    const before = printOf(root);
    writeFileSync(join(root, 'src', 'modules', 'a.unit.test.ts'), 'export {};\n');
    expect(printOf(root)).toBe(before);
  });
});
