import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join, relative } from 'node:path';
import { catalogued, errorCatalogue, ERROR_CODES, PLATFORM_ERRORS } from '../../src/platform/http/errors.js';

/**
 * Error catalogues (docs/decisions.md "Error catalogues"): each module's codes live in its
 * `errors.ts`, the platform's in platform/http/errors.ts; no error with a literal code is made
 * anywhere else, and a code is defined in one catalogue only.
 */
const SRC = join(import.meta.dirname, '../../src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/** Ways of making an error with a code written at the site instead of taken from a catalogue. */
const LITERAL_CODE = [
  /new AppError\(/,
  /super\(\s*\d{3}\s*,/,
  /\b(badRequest|conflict)\(/,
  /\b(forbidden|unauthorized)\([^)]*,\s*'[a-z_]+'\s*\)/,
];

describe('error catalogues', () => {
  it('no error with a literal code is made outside the catalogues', () => {
    const found: string[] = [];
    for (const file of sources(SRC)) {
      const rel = relative(SRC, file);
      // The catalogues themselves (and the platform's, with the mechanism) are where codes are written.
      if (rel === join('platform', 'http', 'errors.ts') || /^modules\/[^/]+\/errors\.ts$/.test(rel)) continue;
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (LITERAL_CODE.some((re) => re.test(line))) found.push(`src/${rel}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(found).toEqual([]);
  });

  it('every module has one catalogue, and each code is defined in one catalogue only', async () => {
    const modules = readdirSync(join(SRC, 'modules'), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    const owners = new Map<string, string>(Object.keys(PLATFORM_ERRORS).map((code) => [code, 'platform']));
    for (const m of modules) {
      const file = join(SRC, 'modules', m, 'errors.ts');
      // A module that refuses nothing with a code of its own (tenancy, audit) has none.
      if (!existsSync(file)) continue;
      const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
      const defs = mod[`${m.toUpperCase()}_ERRORS`] as Record<string, unknown>;
      expect(defs, m).toBeDefined();
      for (const code of Object.keys(defs)) {
        expect(owners.get(code), `${code} is defined by ${owners.get(code)} and ${m}`).toBeUndefined();
        owners.set(code, m);
      }
    }
    for (const [code, owner] of owners) expect(catalogued().get(code)?.owner, code).toBe(owner);
    expect([...catalogued().keys()].sort()).toEqual([...owners.keys()].sort());
    expect(ERROR_CODES).toEqual([...owners.keys()].sort());
    expect([...owners].filter(([code]) => code === 'org_required')).toEqual([['org_required', 'access']]);
  });

  it('refuses a second definition of a code, and a status the code is not answered with', () => {
    expect(() => errorCatalogue('elsewhere', { not_found: { status: 404, message: 'Gone' } })).toThrow(/not_found is defined by platform and elsewhere/);
    const make = errorCatalogue('probe', { probe_code: { status: 409, message: 'Probe' } });
    expect(make('probe_code')).toMatchObject({ status: 409, code: 'probe_code', message: 'Probe' });
    expect(() => make('probe_code', { status: 400 })).toThrow(/not answered with 400/);
  });
});
