import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Identity owns the `users`, `sessions` and `session_refresh_tokens` tables (docs/decisions.md
 * "Identity owns the users table"): a file outside `src/modules/identity/` never inserts, updates or
 * deletes their rows, through drizzle or in SQL text. It writes an account through
 * `identity/accounts.ts`, which publishes the invalidation; sessions through identity's session service.
 */
const ROOT = join(import.meta.dirname, '..', '..');
const OWNER = 'src/modules/identity/';
const TABLES = { users: 'users', sessions: 'sessions', sessionRefreshTokens: 'session_refresh_tokens' } as const;
const SQL_WRITE = new RegExp(`\\b(?:update|insert\\s+into|delete\\s+from)\\s+"?(?:${Object.values(TABLES).join('|')})"?(?![\\w.])`);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/** The local names a file gives identity's tables when it imports them from identity's schema. */
function importedTables(file: string, text: string): string[] {
  const names: string[] = [];
  const from = file.startsWith(OWNER) ? `'\\./schema\\.js'` : `'[./]*(?:modules/)?identity/schema\\.js'`;
  for (const m of text.matchAll(new RegExp(`import\\s*(?:type\\s*)?\\{([^}]*)\\}\\s*from\\s*${from}`, 'g'))) {
    for (const part of (m[1] ?? '').split(',')) {
      const [name, alias] = part.trim().split(/\s+as\s+/);
      if (name && name in TABLES) names.push(alias ?? name);
    }
  }
  return names;
}

/** `file:line: the line` for each write to identity's tables in `text` (a statement may span lines). */
function identityTableWrites(file: string, text: string): string[] {
  const names = importedTables(file, text);
  const patterns = [new RegExp(SQL_WRITE.source, 'gi')];
  if (names.length > 0) patterns.push(new RegExp(`(?:\\.(?:insert|update|delete)|\\btableWriter)\\(\\s*(?:${names.join('|')})\\s*\\)`, 'g'));
  const lines = text.split('\n');
  const at = new Set<number>();
  for (const pattern of patterns) for (const m of text.matchAll(pattern)) at.add(text.slice(0, m.index).split('\n').length);
  return [...at].sort((a, b) => a - b).map((n) => `${file}:${n}: ${lines[n - 1]?.trim() ?? ''}`);
}

describe('identity owns its tables', () => {
  const files = sourceFiles(join(ROOT, 'src')).map((f) => relative(ROOT, f).split('\\').join('/'));

  it('no file outside identity writes the users, sessions or session_refresh_tokens table', () => {
    expect(files.length).toBeGreaterThan(50);
    const writes = files.filter((f) => !f.startsWith(OWNER)).flatMap((f) => identityTableWrites(f, readFileSync(join(ROOT, f), 'utf8')));
    expect(writes).toEqual([]);
  });

  it('the check sees identity writing its own tables (it cannot pass on nothing)', () => {
    const own = files.filter((f) => f.startsWith(OWNER)).flatMap((f) => identityTableWrites(f, readFileSync(join(ROOT, f), 'utf8')));
    expect(own.some((w) => w.startsWith('src/modules/identity/accounts.ts:'))).toBe(true);
    expect(own.some((w) => /update users set/.test(w))).toBe(true);
  });

  it('the check sees a drizzle write, an aliased one and one in SQL text', () => {
    const text = [
      "import { users, sessions as s } from '../identity/schema.js';",
      'await tx.db.update(users).set({ status: "disabled" });',
      'await db.delete(s).where(x);',
      'await db.execute(sql`insert into users (email) values (${e})`);',
      'await db.select().from(users).for("update");',
      'await db.update(usersLike).set({});',
      'await tx.db',
      '  .update(users)',
      '  .set({ name });',
      'await db.execute(sql`',
      '  UPDATE users SET name = ${n}`);',
    ].join('\n');
    expect(identityTableWrites('x.ts', text)).toEqual([
      'x.ts:2: await tx.db.update(users).set({ status: "disabled" });',
      'x.ts:3: await db.delete(s).where(x);',
      'x.ts:4: await db.execute(sql`insert into users (email) values (${e})`);',
      'x.ts:8: .update(users)',
      'x.ts:11: UPDATE users SET name = ${n}`);',
    ]);
  });
});
