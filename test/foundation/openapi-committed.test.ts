import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { backend } from '../helpers/app.js';
import { DOCUMENT_FILE, generateOpenApi, TYPES_FILE } from '../../scripts/openapi.js';

/**
 * The API document and the console's types generated from it are committed (docs/decisions.md,
 * "The console's API types"): each must be exactly what `npm run openapi` writes from today's routes,
 * so a route change that forgets to regenerate them fails here instead of drifting from the console.
 * The generation never touches a database backend: it runs once, on the pglite project.
 */
describe.skipIf(backend !== 'pglite')('the committed API document and console types', () => {
  let generated: { document: string; types: string } | undefined;
  const current = async () => (generated ??= await generateOpenApi());

  it('openapi.json is what `npm run openapi` writes now', async () => {
    const { document } = await current();
    expect(readFileSync(DOCUMENT_FILE, 'utf8') === document, 'openapi.json is out of date with the routes: run `npm run openapi` and commit the result').toBe(true);
  });

  it('web/src/api/schema.d.ts is what `npm run openapi` writes now', async () => {
    const { types } = await current();
    expect(readFileSync(TYPES_FILE, 'utf8') === types, 'web/src/api/schema.d.ts is out of date with the routes: run `npm run openapi` and commit the result').toBe(true);
  });
});
