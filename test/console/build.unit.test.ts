/**
 * The console's staleness check (bin/console.js): `keel serve` serves dist/console/<fingerprint>/,
 * so the fingerprint must change whenever a file under web/ or the installed package set does, and
 * must not change for what the build itself writes or for web/node_modules.
 */
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { consoleFingerprint as printOf } from '../../bin/console.js';

describe('console fingerprint', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'keel-console-build-'));
    mkdirSync(join(root, 'web', 'src'), { recursive: true });
    mkdirSync(join(root, 'node_modules'));
    writeFileSync(join(root, 'web', 'index.html'), '<!doctype html>\n');
    writeFileSync(join(root, 'web', 'src', 'App.tsx'), 'export {};\n');
    writeFileSync(join(root, 'node_modules', '.package-lock.json'), '{}\n');
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('is stable while nothing changes', () => {
    expect(printOf(root)).toBe(printOf(root));
    expect(printOf(root)).toMatch(/^[0-9a-f]{16}$/);
  });

  it('changes when a console file is edited or added, or when packages are reinstalled', () => {
    const seen = new Set([printOf(root)]);
    const changed = (): void => {
      const next = printOf(root);
      expect(seen.has(next)).toBe(false);
      seen.add(next);
    };
    writeFileSync(join(root, 'web', 'src', 'App.tsx'), 'export {}; \n');
    utimesSync(join(root, 'web', 'src', 'App.tsx'), new Date(), new Date(Date.now() + 5_000));
    changed();
    writeFileSync(join(root, 'web', 'src', 'styles.css'), 'body {}\n');
    changed();
    utimesSync(join(root, 'node_modules', '.package-lock.json'), new Date(), new Date(Date.now() + 10_000));
    changed();
  });

  it('ignores web/dist and web/node_modules', () => {
    const before = printOf(root);
    mkdirSync(join(root, 'web', 'dist'));
    writeFileSync(join(root, 'web', 'dist', 'index.html'), 'built\n');
    mkdirSync(join(root, 'web', 'node_modules'));
    writeFileSync(join(root, 'web', 'node_modules', 'x.js'), '\n');
    expect(printOf(root)).toBe(before);
  });
});
