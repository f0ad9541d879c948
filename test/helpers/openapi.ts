import { z } from '@hono/zod-openapi';

/**
 * Reading an OpenAPI 3.1 document the way a client (or the docs page) does: every operation, and for
 * each the schemas and parameters it shows. Used by test/foundation/openapi-document.test.ts to hold
 * every route, present and future, to the description rules (docs/decisions.md, "API descriptions").
 */

type Json = any;

export interface Operation {
  method: string;
  path: string;
  op: Json;
  /** `POST /api/v1/roles`: how failures name the operation. */
  name: string;
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

export function operationsOf(doc: Json): Operation[] {
  return Object.entries(doc.paths as Record<string, Record<string, Json>>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([m]) => METHODS.includes(m))
      .map(([method, op]) => ({ method, path, op: { ...op, parameters: [...(item.parameters ?? []), ...(op.parameters ?? [])] }, name: `${method.toUpperCase()} ${path}` })),
  );
}

/** The object a local `$ref` (`#/components/...`) points at. */
export function lookup(doc: Json, ref: string): Json {
  if (!ref.startsWith('#/')) throw new Error(`not a local reference: ${ref}`);
  let node = doc;
  for (const seg of ref.slice(2).split('/')) node = node?.[seg.replace(/~1/g, '/').replace(/~0/g, '~')];
  if (node === undefined) throw new Error(`dangling reference: ${ref}`);
  return node;
}

const hasText = (s: unknown): boolean => typeof s === 'string' && s.trim().length > 0;

/**
 * A schema a client sees described: its own `description`, or the description of what it points at
 * (`$ref`, an `allOf` part), or, for a union, every branch but `null` described.
 */
export function described(doc: Json, schema: Json, seen = new Set<Json>()): boolean {
  if (!schema || typeof schema !== 'object' || seen.has(schema)) return false;
  seen.add(schema);
  if (hasText(schema.description)) return true;
  if (typeof schema.$ref === 'string') return described(doc, lookup(doc, schema.$ref), seen);
  if (Array.isArray(schema.allOf) && schema.allOf.some((s: Json) => described(doc, s, seen))) return true;
  for (const key of ['anyOf', 'oneOf']) {
    const branches = (schema[key] ?? []).filter((s: Json) => s?.type !== 'null');
    if (branches.length > 0 && branches.every((s: Json) => described(doc, s, seen))) return true;
  }
  return false;
}

/**
 * Every property reachable from a schema that has no description, named by where it is: a component
 * (`#/components/schemas/Role.permissions[].resource`) or, inline, the operation part given as `at`.
 * Walks `$ref` components (each once per `visited`), `allOf`/`anyOf`/`oneOf`, array items, tuple items
 * and `additionalProperties`.
 */
export function undescribedProperties(doc: Json, schema: Json, at: string, visited: Set<string>): string[] {
  const missing: string[] = [];
  const walk = (node: Json, where: string): void => {
    if (!node || typeof node !== 'object') return;
    if (typeof node.$ref === 'string') {
      if (visited.has(node.$ref)) return;
      visited.add(node.$ref);
      walk(lookup(doc, node.$ref), node.$ref);
      return;
    }
    for (const [name, prop] of Object.entries((node.properties ?? {}) as Record<string, Json>)) {
      const here = `${where}.${name}`;
      if (!described(doc, prop)) missing.push(here);
      walk(prop, here);
    }
    for (const key of ['allOf', 'anyOf', 'oneOf']) for (const part of node[key] ?? []) walk(part, where);
    if (node.items && typeof node.items === 'object') walk(node.items, `${where}[]`);
    for (const item of node.prefixItems ?? []) walk(item, `${where}[]`);
    if (node.additionalProperties && typeof node.additionalProperties === 'object') walk(node.additionalProperties, `${where}{}`);
  };
  walk(schema, at);
  return missing;
}

/** The body example a client is shown: the media type's `example`/`examples`, else the schema's (through `$ref`). */
export function bodyExamples(doc: Json, media: Json): unknown[] {
  if (media.example !== undefined) return [media.example];
  if (media.examples && typeof media.examples === 'object') {
    return Object.values(media.examples as Record<string, Json>).map((e) => (typeof e.$ref === 'string' ? lookup(doc, e.$ref) : e).value);
  }
  let schema = media.schema;
  while (schema && typeof schema.$ref === 'string') {
    if (schema.example !== undefined) break;
    schema = lookup(doc, schema.$ref);
  }
  if (schema?.example !== undefined) return [schema.example];
  if (Array.isArray(schema?.examples) && schema.examples.length > 0) return schema.examples;
  return [];
}

/**
 * The document's JSON schema of a body as a zod validator (zod's JSON Schema reader), its component
 * references moved under `$defs` so the reader can follow them.
 */
export function validatorOf(doc: Json, schema: Json): z.ZodType {
  const rewrite = (v: Json): Json =>
    Array.isArray(v)
      ? v.map(rewrite)
      : v && typeof v === 'object'
        ? Object.fromEntries(
            Object.entries(v).map(([k, x]) => [k, k === '$ref' && typeof x === 'string' ? x.replace('#/components/schemas/', '#/$defs/') : rewrite(x)]),
          )
        : v;
  return z.fromJSONSchema({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...rewrite(schema), $defs: rewrite(doc.components?.schemas ?? {}) });
}
