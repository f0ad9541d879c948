import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The project's root folder (the one holding package.json and drizzle/), found by walking up from
 * this module. The same code runs from `src/` under tsx (tests) and from the bundled `dist/`
 * (`npm start`), so files beside the code are located from here, never by a fixed `../..`.
 */
function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('Keel: package.json not found above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

export const PROJECT_ROOT = findRoot();
