/**
 * The operator and security docs name real things (docs/decisions.md "Deployment and the ASVS mapping"). docs/security.md,
 * docs/deploy.md and docs/architecture.md cite files and tests as evidence; an operator copies
 * variable names from docs/deploy.md and deploy/keel.env.example. So:
 * - every repository path they name (`src/…`, `test/…`, `bench/…`, `bin/…`, `deploy/…`, `web/…`,
 *   `docs/…`, `drizzle/…`) exists;
 * - every test they cite as `test/x.test.ts` "name" (several names may follow one file) is the
 *   title, or part of the title, of a test or suite in that file (a name ending in … is its start);
 * - every environment variable docs/deploy.md or deploy/keel.env.example names is a setting of the
 *   config schema in src/config.ts, and docs/deploy.md names every one of them.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import ts from 'typescript';
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

/**
 * Citations (docs/testing.md "Citing the docs"): a comment, a string or a doc that names
 * `docs/<file>.md`, optionally followed by "<heading>", names a file that exists and one of its
 * headings (the whole heading text, or its start ending in …); `docs/<file>.md#anchor` names a heading's
 * anchor. Nothing cites a product document kept outside the repository or a tracker entry (the
 * patterns are `OUTSIDE` below): the rule is named instead.
 */
const CODE_DIRS = ['src', 'test', 'web/src', 'bench', 'agent'];
const CODE_FILE = /\.(?:ts|tsx|mts|js|mjs|cjs|css)$/;
const TEXT_DOCS = ['README.md', 'bench/README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
/** This file: its own examples of broken citations are strings, not citations. */
const SELF = 'test/foundation/docs.unit.test.ts';

function codeFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== 'dist') walk(path);
      } else if (CODE_FILE.test(entry.name)) out.push(path);
    }
  };
  for (const dir of CODE_DIRS) walk(dir);
  return out.sort();
}

/** A span of a file's text that may cite: a comment, a string, a JSX text, or a whole doc. */
interface Span { start: number; text: string }

/**
 * The comments and strings of a source file, each with its offset. Comment line prefixes (` * `,
 * `//`) become spaces of the same length, so a citation may wrap and offsets stay those of the file.
 */
function spansOf(file: string, source: string): Span[] {
  const blank = (text: string): string => text.replace(/^\/\*\*?|\*\/$|^\/\/|(?<=\n)[ \t]*(?:\*(?!\/)|\/\/)/g, (m) => ' '.repeat(m.length));
  if (file.endsWith('.css')) return [...source.matchAll(/\/\*[\s\S]*?\*\//g)].map((m) => ({ start: m.index, text: blank(m[0]) }));
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : /\.[mc]?js$/.test(file) ? ts.ScriptKind.JS : ts.ScriptKind.TS;
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true, kind);
  const spans: Span[] = [];
  const seen = new Set<number>();
  const STRINGS = new Set([ts.SyntaxKind.StringLiteral, ts.SyntaxKind.NoSubstitutionTemplateLiteral, ts.SyntaxKind.TemplateHead, ts.SyntaxKind.TemplateMiddle, ts.SyntaxKind.TemplateTail, ts.SyntaxKind.JsxText]);
  const visit = (node: ts.Node): void => {
    if (node.kind >= ts.SyntaxKind.FirstJSDocNode && node.kind <= ts.SyntaxKind.LastJSDocNode) return;
    const children = node.getChildren(sf);
    if (children.length > 0) {
      for (const child of children) visit(child);
      return;
    }
    // A leaf token: the comments before it and after it on its line (every comment is one of these
    // of some token, the end of file included).
    for (const range of [...(ts.getLeadingCommentRanges(source, node.pos) ?? []), ...(ts.getTrailingCommentRanges(source, node.end) ?? [])]) {
      if (seen.has(range.pos)) continue;
      seen.add(range.pos);
      spans.push({ start: range.pos, text: blank(source.slice(range.pos, range.end)) });
    }
    if (STRINGS.has(node.kind) && file !== SELF) spans.push({ start: node.getStart(sf), text: node.getText(sf) });
  };
  visit(sf);
  return spans;
}

/** A heading's anchor as GitHub makes it. */
const anchorOf = (heading: string): string => heading.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');

const headingCache = new Map<string, string[]>();
function headingsOf(doc: string): string[] {
  let found = headingCache.get(doc);
  if (!found) {
    const text = read(doc).replace(/^```[\s\S]*?^```/gm, '');
    found = [...text.matchAll(/^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$/gm)].map((m) => m[1]!.replace(/\s+/g, ' '));
    headingCache.set(doc, found);
  }
  return found;
}

/** `docs/<file>.md`, `docs/<file>.md "Heading"`, `docs/<file>.md#anchor` (the path may sit in backticks). */
const CITATION = /(?<![\w./-])docs\/([\w.-]+\.md)(?:`?(#[\w-]+)|`?[ \t\r\n*/]+"([^"]{1,300})")?/g;

/** What a span cites wrongly: a missing file, heading or anchor. */
function wrongCitations(text: string): { at: number; what: string }[] {
  const wrong: { at: number; what: string }[] = [];
  for (const m of text.matchAll(CITATION)) {
    const doc = `docs/${m[1]!}`;
    if (!existsSync(join(ROOT, doc))) {
      wrong.push({ at: m.index, what: `${doc} does not exist` });
      continue;
    }
    const headings = headingsOf(doc);
    if (m[2] !== undefined && !headings.some((h) => `#${anchorOf(h)}` === m[2])) wrong.push({ at: m.index, what: `${doc}${m[2]}: no such anchor` });
    if (m[3] !== undefined) {
      const cited = m[3].replace(/\s+/g, ' ').trim();
      const ok = cited.endsWith('…') ? headings.some((h) => h.startsWith(cited.slice(0, -1).trimEnd())) : headings.includes(cited);
      if (!ok) wrong.push({ at: m.index, what: `${doc} "${cited}": no such heading` });
    }
  }
  return wrong;
}

/** The product documents outside the repository, and tracker references. */
const OUTSIDE = [
  { name: 'SPEC', re: /\bSPEC\b/g },
  { name: 'DECISIONS', re: /\bDECISIONS\b/g },
  { name: 'ARCHITECTURE', re: /\bARCHITECTURE\b/g },
  { name: '../shared', re: /\.\.\/shared\b/g },
  { name: 'issue N', re: /\bissue\s+\d+/gi },
  { name: '#N', re: /(?<![\w&#/])#\d+(?![\w-])/g },
];

function outsideReferences(text: string): { at: number; what: string }[] {
  return OUTSIDE.flatMap(({ name, re }) => [...text.matchAll(re)].map((m) => ({ at: m.index, what: `cites ${name}: "${m[0]}"` })));
}

const lineAt = (source: string, at: number): number => source.slice(0, at).split('\n').length;

/** The spans of every source file, parsed once for all the tests of this file. */
let sourceSpans: { file: string; source: string; spans: Span[] }[] | undefined;
function allSourceSpans(): { file: string; source: string; spans: Span[] }[] {
  sourceSpans ??= codeFiles().map((file) => {
    const source = read(file);
    return { file, source, spans: spansOf(file, source) };
  });
  return sourceSpans;
}

/** Every offence in the repository as `file:line: what`. */
function offences(check: (text: string) => { at: number; what: string }[]): string[] {
  const out: string[] = [];
  for (const { file, source, spans } of allSourceSpans()) {
    for (const span of spans) {
      for (const o of check(span.text)) out.push(`${file}:${lineAt(source, span.start + o.at)}: ${o.what}`);
    }
  }
  for (const doc of TEXT_DOCS.filter((d) => existsSync(join(ROOT, d)))) {
    const text = read(doc);
    for (const o of check(text)) out.push(`${doc}:${lineAt(text, o.at)}: ${o.what}`);
  }
  return out;
}

describe('citations', () => {
  it('reads the comments and strings of the code and the docs (the checks cannot pass on nothing)', () => {
    const files = codeFiles();
    expect(files.length).toBeGreaterThan(300);
    expect(files).toEqual(expect.arrayContaining(['src/app.ts', 'web/src/main.tsx', 'agent/agent.ts', 'bench/fleet.ts']));
    const sample = 'const a = 1; // see docs/testing.md "Network"\n/**\n * wraps: docs/decisions.md\n * "API conventions"\n */\nconst b = `x ${a} docs/nope.md`;\n';
    const spans = spansOf('test/sample.ts', sample);
    expect(spans.map((s) => s.text.replace(/\s+/g, ' ').trim()).sort()).toEqual(['see docs/testing.md "Network"', 'wraps: docs/decisions.md "API conventions"', '`x ${', '} docs/nope.md`'].sort());
    expect(headingsOf('docs/decisions.md').length).toBeGreaterThan(20);
    expect(offences((text) => [...text.matchAll(CITATION)].map((m) => ({ at: m.index, what: m[0] }))).length).toBeGreaterThan(100);
  });

  it('every docs/<file>.md cited in a comment, string or doc exists, with the cited heading or anchor', () => {
    expect(offences(wrongCitations)).toEqual([]);
  });

  it('no comment, string or doc cites SPEC, DECISIONS, ARCHITECTURE, ../shared or a tracker issue', () => {
    expect(offences(outsideReferences)).toEqual([]);
  });

  it('the checks see a missing file, a missing heading, a wrong anchor and outside references', () => {
    const text = 'docs/nope.md; docs/testing.md "Network"; docs/testing.md "Networks"; docs/testing.md "Tests that…"; docs/testing.md#time; docs/testing.md#timing';
    expect(wrongCitations(text).map((w) => w.what)).toEqual(['docs/nope.md does not exist', 'docs/testing.md "Networks": no such heading', 'docs/testing.md#timing: no such anchor']);
    const outside = ['S', 'PEC 4.5', ' and DECISION', 'S "Caches", ../', 'shared/X, is', 'sue 13, #', '12; PKCS#8, #fff'].join('');
    expect(outsideReferences(outside).map((o) => o.what)).toEqual(['cites SPEC: "SPEC"', 'cites DECISIONS: "DECISIONS"', 'cites ../shared: "../shared"', 'cites issue N: "issue 13"', 'cites #N: "#12"']);
  });
});
