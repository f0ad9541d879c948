/**
 * `npm ci` (CI, a newcomer's clean install) trusts package-lock.json; when its root entry disagrees
 * with package.json (a bin, a dependency or a version added to one and not the other), `npm install`
 * rewrites the lock on the next machine. The root entry must say what package.json says.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const read = (file: string) => JSON.parse(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8')) as Record<string, unknown>;

describe('package-lock.json', () => {
  it("its root entry matches package.json (name, version, license, engines, bins, dependencies)", () => {
    const pkg = read('package.json');
    const root = (read('package-lock.json').packages as Record<string, Record<string, unknown>>)[''];
    const bin = Object.fromEntries(Object.entries((pkg.bin ?? {}) as Record<string, string>).map(([k, v]) => [k, v.replace(/^\.\//, '')]));
    for (const key of ['name', 'version', 'license', 'engines', 'dependencies', 'devDependencies'] as const) {
      expect(root?.[key], `package-lock.json packages[""].${key}: run npm install and commit the lock`).toEqual(pkg[key]);
    }
    expect(root?.bin, 'package-lock.json packages[""].bin: run npm install and commit the lock').toEqual(bin);
  });
});
