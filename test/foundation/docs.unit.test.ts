/**
 * The operator and security docs name real things (issue 19, docs). docs/security.md,
 * docs/deploy.md and docs/architecture.md cite files and tests as evidence; an operator copies
 * variable names from docs/deploy.md and deploy/keel.env.example. So:
 * - every repository path they name (`src/…`, `test/…`, `bench/…`, `bin/…`, `deploy/…`, `web/…`,
 *   `docs/…`, `drizzle/…`) exists;
 * - every test they cite as `test/x.test.ts` "name" (several names may follow one file) is the
 *   title, or part of the title, of a test or suite in that file (a name ending in … is its start);
 * - every environment variable docs/deploy.md or deploy/keel.env.example names is a setting of the
 *   config schema in src/config.ts, and docs/deploy.md names every one of them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');

const CITING_DOCS = ['docs/security.md', 'docs/deploy.md', 'docs/architecture.md'];
/** Named in docs/deploy.md without being Keel settings: the image's build argument. */
const NOT_KEEL_SETTINGS = new Set(['NODE_VERSION']);

/** Repository paths in a text: a known top-level folder, not inside a longer path or URL. */
function pathsIn(text: string): string[] {
  const found = text.match(/(?<![\w./@-])(?:src|test|bench|bin|deploy|web|docs|drizzle)\/[\w./@-]*[\w/]/g) ?? [];
  return [...new Set(found)];
}

/** `file.test.ts` "name"; … "name": every name cited right after a test file (separators: space ( , ; … and). */
function citedTests(text: string): { file: string; name: string }[] {
  const cited: { file: string; name: string }[] = [];
  const chain = /`((?:src|test)\/[^`\s]+\.test\.ts)`((?:(?:\s|[(,;…]|\band\b)*"[^"]+")+)/g;
  for (const [, file, names] of text.matchAll(chain)) {
    for (const [, name] of (names ?? '').matchAll(/"([^"]+)"/g)) cited.push({ file: file!, name: name!.replace(/\s+/g, ' ').trim() });
  }
  return cited;
}

/** The titles of `it`, `test`, `describe` and `raceTest` calls in a test file (modifiers such as `.skipIf(…)` allowed). */
function testTitles(source: string): string[] {
  const call = /\b(?:it|test|describe|raceTest)(?:\.\w+(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?)*\(\s*(['"`])((?:\\.|(?!\1)[^\\])*)\1/g;
  return [...source.matchAll(call)].map((m) => m[2]!.replace(/\\(.)/g, '$1').replace(/\s+/g, ' '));
}

/** A cited name matches a title containing it; "a…b" matches a title with a, then b. */
function titleMatches(titles: string[], name: string): boolean {
  const parts = name.split('…').map((p) => p.trim()).filter(Boolean);
  return titles.some((title) => {
    let at = 0;
    for (const part of parts) {
      const i = title.indexOf(part, at);
      if (i < 0) return false;
      at = i + part.length;
    }
    return parts.length > 0;
  });
}

/** The keys of `envSchema` in src/config.ts (it is not exported: read from the source). */
function configKeys(source: string): string[] {
  const start = source.indexOf('const envSchema = z.object({');
  const end = source.indexOf('\n});', start);
  if (start < 0 || end < 0) return [];
  return [...source.slice(start, end).matchAll(/^ {2}([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1]!);
}

/** Upper-case names with an underscore: how the docs write environment variables (PORT, HOST, WORKER escape it: see below). */
function variablesIn(text: string): string[] {
  return [...new Set(text.match(/\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/g) ?? [])];
}

describe('operator and security docs', () => {
  const keys = configKeys(read('src/config.ts'));

  it('reads the config schema and the docs (the checks cannot pass on nothing)', () => {
    expect(keys.length).toBeGreaterThan(50);
    expect(keys).toEqual(expect.arrayContaining(['DATABASE_URL', 'REDIS_URL', 'APP_ENCRYPTION_KEY', 'JWT_SECRET', 'WORKER']));
    expect(CITING_DOCS.flatMap((f) => pathsIn(read(f))).length).toBeGreaterThan(100);
    expect(citedTests(read('docs/security.md')).length).toBeGreaterThan(100);
  });

  it.each(CITING_DOCS)('every src/, test/ and other repository path %s names exists', (doc) => {
    expect(pathsIn(read(doc)).filter((p) => !existsSync(join(ROOT, p)))).toEqual([]);
  });

  it.each(CITING_DOCS)('every test %s cites by name is a test of that file', (doc) => {
    const missing = citedTests(read(doc)).filter(({ file, name }) => !existsSync(join(ROOT, file)) || !titleMatches(testTitles(read(file)), name));
    expect(missing).toEqual([]);
  });

  it('every variable docs/deploy.md and deploy/keel.env.example name is a Keel setting, and deploy.md names every setting', () => {
    const known = new Set(keys);
    const deploy = variablesIn(read('docs/deploy.md')).filter((v) => !NOT_KEEL_SETTINGS.has(v));
    expect(deploy.filter((v) => !known.has(v))).toEqual([]);
    const example = [...read('deploy/keel.env.example').matchAll(/^#?([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!);
    expect(example.length).toBeGreaterThan(10);
    expect(example.filter((v) => !known.has(v))).toEqual([]);
    // PORT, HOST, WORKER carry no underscore: every key is looked for as a word.
    const text = read('docs/deploy.md');
    expect(keys.filter((k) => !new RegExp(`\\b${k}\\b`).test(text))).toEqual([]);
  });

  it('the checks see a wrong path, an unknown test name and an unknown variable', () => {
    const doc = 'See `src/platform/keys.ts` and `test/ops/no-such.test.ts`; `test/ops/readiness.test.ts` "is 200 with every dependency up"; … "never written"';
    expect(pathsIn(doc).filter((p) => !existsSync(join(ROOT, p)))).toEqual(['test/ops/no-such.test.ts']);
    const titles = testTitles(read('test/ops/readiness.test.ts'));
    expect(citedTests(doc).map(({ name }) => titleMatches(titles, name))).toEqual([true, false]);
    expect(titleMatches(titles, 'is 503 naming redis… once it is back')).toBe(true);
    expect(titleMatches(titles, 'once it is back… is 503 naming redis')).toBe(false);
    expect(variablesIn('set `APP_ENCRYPTION_KEY` and `APP_ENCRYPTON_KEY`').filter((v) => !keys.includes(v))).toEqual(['APP_ENCRYPTON_KEY']);
  });
});
