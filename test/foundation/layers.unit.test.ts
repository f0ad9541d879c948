import { readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { layerViolations, importCycles, loadImportGraph, LAYERS } from '../helpers/layers.js';

/**
 * The module layer order of docs/architecture.md, enforced (docs/decisions.md "Module layers"): a domain file of a module
 * imports only platform code and domain files of its own module or of modules below it; HTTP adapter
 * files (`routes.ts`, `api-schemas.ts`, `request.ts`, `src/http/`) sit on top and may use any module; no domain file
 * imports an HTTP adapter; and no two files import each other through a circle.
 */
describe('module layers', () => {
  const graph = loadImportGraph();

  it('reads the source tree (the check cannot pass on nothing)', () => {
    expect(graph.files.length).toBeGreaterThan(50);
    expect(graph.edges.length).toBeGreaterThan(200);
    // Every module folder has a place in the order, so a new module cannot slip past the check.
    expect(graph.unknownModules).toEqual([]);
    expect(LAYERS.length).toBeGreaterThan(5);
  });

  it('no file imports against the layer order', () => {
    expect(layerViolations(graph)).toEqual([]);
  });

  it('no import cycle between files', () => {
    expect(importCycles(graph)).toEqual([]);
  });

  it('the checker sees a violation and a cycle when there is one', () => {
    const broken = {
      ...graph,
      edges: [
        ...graph.edges,
        { from: 'src/modules/tenancy/service.ts', to: 'src/modules/access/service.ts', typeOnly: false },
        { from: 'src/modules/audit/service.ts', to: 'src/modules/access/routes.ts', typeOnly: false },
        { from: 'src/platform/crypto.ts', to: 'src/modules/identity/schema.ts', typeOnly: true },
        { from: 'src/platform/clock.ts', to: 'src/platform/crypto.ts', typeOnly: false },
        { from: 'src/platform/crypto.ts', to: 'src/platform/clock.ts', typeOnly: false },
      ],
    };
    const violations = layerViolations(broken);
    expect(violations).toContain('src/modules/tenancy/service.ts -> src/modules/access/service.ts (tenancy is below access)');
    expect(violations).toContain('src/modules/audit/service.ts -> src/modules/access/routes.ts (a domain file imports an HTTP adapter)');
    expect(violations).toContain('src/platform/crypto.ts -> src/modules/identity/schema.ts (platform imports a module)');
    expect(importCycles(broken)).toContainEqual(expect.stringContaining('src/platform/clock.ts'));
  });
});

describe('test layout', () => {
  const ROOT = resolve(import.meta.dirname, '../..');
  const testsUnder = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
      .filter((f) => /\.test\.tsx?$/.test(f))
      .map((f) => relative(ROOT, join(ROOT, dir, f)));

  it('every test lives under test/, none under src/ (docs/testing.md "Layout and running")', () => {
    expect(testsUnder('test').length).toBeGreaterThan(100);
    expect(testsUnder('test')).toEqual(expect.arrayContaining(['test/foundation/crypto.unit.test.ts', 'test/agents/decision.unit.test.ts']));
    expect(testsUnder('src')).toEqual([]);
  });
});
