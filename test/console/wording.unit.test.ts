/**
 * The console's own words are British ("organisation"), whatever the API's field names and values
 * (`organization` scopes, the `organizations` permission resource, the `Organization` schema) are:
 * docs/decisions.md "Console details".
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const WEB = join(import.meta.dirname, '../../web/src');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return files(p);
    return /\.tsx?$/.test(e.name) && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** American spellings left in a console source once the API's own names are taken out. */
export function americanSpellings(source: string): string[] {
  const withoutApiNames = source.replace(/(['"`])organizations?\1|Schema<'Organization'>|\borganizations?(?=['"`]\s*[,)\]])|\.organization\b/g, '');
  return [...withoutApiNames.matchAll(/\b\w*organiz\w*/gi)].map((m) => m[0]);
}

describe('console wording', () => {
  it('the console says organisation: no American spelling in its text', () => {
    const found = files(WEB).flatMap((f) => americanSpellings(readFileSync(f, 'utf8')).map((w) => `${relative(WEB, f)}: ${w}`));
    expect(found).toEqual([]);
  });

  it('finds an American spelling in text, not in the API\'s names', () => {
    expect(americanSpellings(`if (me.scope === 'organization' && can('organizations', 'read')) return <p>Pick an organization</p>;`)).toEqual(['organization']);
    expect(americanSpellings(`type Org = Schema<'Organization'>;`)).toEqual([]);
  });
});
