import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * The module layer order (docs/architecture.md), bottom first. A module's domain files (everything in
 * its folder but the HTTP adapters) import only platform code and modules at or below its own layer.
 */
export const LAYERS = ['audit', 'tenancy', 'identity', 'access', 'mfa', 'users', 'orgs', 'webhooks', 'agents', 'domains', 'sso', 'scim', 'siem'] as const;

/** Files of the platform level: they know no module. `keel.ts` is the container every module receives. */
const PLATFORM = [/^src\/platform\//, /^src\/config\.ts$/, /^src\/events\.ts$/, /^src\/event-types\.ts$/, /^src\/event-catalogue\.ts$/, /^src\/keel\.ts$/];
/** The composition root: builds the process from every module; nothing imports it but itself. */
const ROOT = [/^src\/app\.ts$/, /^src\/server\.ts$/, /^src\/main\.ts$/, /^src\/modules\/index\.ts$/, /^src\/compose\.ts$/];
/** HTTP adapters: the request path (`src/http/`) and each module's routes, API schemas and request helpers (docs/architecture.md "Inside a module"); they may use every module. */
const HTTP = [/^src\/http\//, /^src\/modules\/[^/]+\/(([\w-]+-)?routes|api-schemas|request)\.ts$/, /^src\/modules\/[^/]+\/routes\//];
/** Types of the composition (the container and the per-request variables), importable everywhere as types. */
const SHARED_TYPES = [/^src\/keel\.ts$/, /^src\/app-env\.ts$/];

export interface ImportEdge {
  from: string;
  to: string;
  typeOnly: boolean;
}

export interface ImportGraph {
  files: string[];
  edges: ImportEdge[];
  unknownModules: string[];
}

const ROOT_DIR = resolve(import.meta.dirname, '../..');

function walk(dir: string, out: string[]): void {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (name.endsWith('.ts') && !name.endsWith('.test.ts') && !name.endsWith('.d.ts')) out.push(path);
  }
}

/** `import … from`, `export … from` and `import('…')`, with whether the import brings types only. */
const IMPORT = /(?:^|\n)\s*(import|export)\s+(type\s+)?([^'";]*?)\s*from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

function typeOnlyClause(clause: string): boolean {
  // `import { type A, type B } from` brings only types too.
  const braces = /^\{([^}]*)\}$/.exec(clause.trim());
  if (!braces?.[1]) return false;
  const names = braces[1].split(',').map((s) => s.trim()).filter(Boolean);
  return names.length > 0 && names.every((n) => n.startsWith('type '));
}

export function loadImportGraph(): ImportGraph {
  const abs: string[] = [];
  walk(join(ROOT_DIR, 'src'), abs);
  const files = abs.map((f) => relative(ROOT_DIR, f)).sort();
  const known = new Set(files);
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const text = readFileSync(join(ROOT_DIR, file), 'utf8');
    for (const m of text.matchAll(IMPORT)) {
      const spec = m[4] ?? m[5];
      if (!spec?.startsWith('.')) continue;
      const target = relative(ROOT_DIR, resolve(ROOT_DIR, dirname(file), spec)).replace(/\.js$/, '.ts');
      if (!known.has(target)) continue;
      const typeOnly = Boolean(m[2]) || typeOnlyClause(m[3] ?? '');
      edges.push({ from: file, to: target, typeOnly });
    }
  }
  const modules = new Set(files.map((f) => /^src\/modules\/([^/]+)\//.exec(f)?.[1]).filter((m): m is string => Boolean(m)));
  const unknownModules = [...modules].filter((m) => !(LAYERS as readonly string[]).includes(m)).sort();
  return { files, edges, unknownModules };
}

type Kind = { kind: 'platform' } | { kind: 'root' } | { kind: 'http' } | { kind: 'shared' } | { kind: 'domain'; module: string; layer: number };

function kindOf(file: string): Kind {
  if (ROOT.some((r) => r.test(file))) return { kind: 'root' };
  if (PLATFORM.some((r) => r.test(file))) return { kind: 'platform' };
  if (HTTP.some((r) => r.test(file))) return { kind: 'http' };
  const module = /^src\/modules\/([^/]+)\//.exec(file)?.[1];
  if (module) return { kind: 'domain', module, layer: (LAYERS as readonly string[]).indexOf(module) };
  return { kind: 'shared' };
}

/** Every import that goes against the order, as `from -> to (why)`. */
export function layerViolations(graph: Pick<ImportGraph, 'edges'>): string[] {
  const out: string[] = [];
  for (const { from, to, typeOnly } of graph.edges) {
    const a = kindOf(from);
    const b = kindOf(to);
    const why = ((): string | null => {
      if (b.kind === 'root') return a.kind === 'root' ? null : 'imports the composition root';
      if (typeOnly && SHARED_TYPES.some((r) => r.test(to))) return null;
      if (a.kind === 'platform') {
        if (b.kind === 'platform') return null;
        return b.kind === 'domain' || b.kind === 'http' ? 'platform imports a module' : 'platform imports a composition file';
      }
      if (a.kind === 'domain') {
        if (b.kind === 'http') return 'a domain file imports an HTTP adapter';
        if (b.kind === 'shared') return 'a domain file imports a composition file';
        if (b.kind === 'domain' && b.layer > a.layer) return `${a.module} is below ${b.module}`;
        return null;
      }
      return null; // HTTP adapters and shared composition types use every module
    })();
    if (why) out.push(`${from} -> ${to} (${why})`);
  }
  return out;
}

/** Circles of runtime imports between files (type-only imports vanish at run time and are left out). */
export function importCycles(graph: Pick<ImportGraph, 'edges'>): string[] {
  const next = new Map<string, string[]>();
  for (const e of graph.edges) {
    if (e.typeOnly) continue;
    next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  }
  // Tarjan's strongly connected components; every component of more than one file is a circle.
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, idx.get(w) ?? 0));
    }
    if (low.get(v) === idx.get(v)) {
      const component: string[] = [];
      let w: string | undefined;
      do {
        w = stack.pop();
        if (w === undefined) break;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) cycles.push(component.sort().join(' <-> '));
    }
  };
  for (const v of next.keys()) if (!idx.has(v)) visit(v);
  return cycles.sort();
}
