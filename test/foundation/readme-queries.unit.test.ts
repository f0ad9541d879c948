import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DOCUMENT_FILE } from '../../scripts/openapi.js';

/**
 * Every query parameter the README shows on an API URL is one the OpenAPI document describes for that
 * path (docs/decisions.md "Query parameters"): the API refuses a parameter it does not declare, so a
 * README example with an undocumented one would be a 400 for whoever copies it. URLs of console pages
 * (`/login?org=`) are not API paths and are left to the console's tests.
 */
const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8').replace(/\n\s*/g, ' ');
const doc = JSON.parse(readFileSync(DOCUMENT_FILE, 'utf8')) as { paths: Record<string, Record<string, { parameters?: { in: string; name: string }[] }>> };
const CONSOLE_PAGES = ['/login'];

interface Example {
  text: string;
  method: string | null;
  path: string;
  names: string[];
}

function examples(): Example[] {
  const out: Example[] = [];
  const re = /(?:\b(GET|POST|PUT|PATCH|DELETE)\s+)?((?:\{PUBLIC_URL\})?\/[\w\-/:{}<>.]*)\?([\w=<>{}\-/.&…]+)/g;
  for (const m of README.matchAll(re)) {
    const names = [...new URLSearchParams(m[3] ?? '').keys()].filter(Boolean);
    out.push({ text: m[0], method: m[1]?.toLowerCase() ?? null, path: (m[2] ?? '').replace('{PUBLIC_URL}', ''), names });
  }
  return out;
}

/** The documented path a README path names (`:id`, `<id>` and `{orgId}` stand for any segment). */
function documentedPath(path: string): string | undefined {
  const api = path.startsWith('/api/v1/') ? path : `/api/v1${path}`;
  const segments = api.split('/');
  return Object.keys(doc.paths).find((p) => {
    const parts = p.split('/');
    return parts.length === segments.length && parts.every((part, i) => part.startsWith('{') || part === segments[i] || /^[:<{]/.test(segments[i] ?? ''));
  });
}

describe("the README's example URLs against the API document", () => {
  it('finds the examples (the check is not empty)', () => {
    expect(examples().length).toBeGreaterThanOrEqual(6);
  });

  it('describes every query parameter the README uses on an API path', () => {
    const wrong: string[] = [];
    for (const ex of examples()) {
      const path = documentedPath(ex.path);
      if (!path) {
        if (!CONSOLE_PAGES.includes(ex.path)) wrong.push(`${ex.text}: no such API path`);
        continue;
      }
      const ops = Object.entries(doc.paths[path] ?? {}).filter(([method]) => ex.method === null || method === ex.method);
      if (ops.length === 0) wrong.push(`${ex.text}: ${path} has no ${ex.method}`);
      for (const name of ex.names) {
        if (!ops.some(([, op]) => (op.parameters ?? []).some((p) => p.in === 'query' && p.name === name))) wrong.push(`${ex.text}: query ${name} is not documented on ${path}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
