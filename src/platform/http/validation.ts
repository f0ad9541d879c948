import { z } from '@hono/zod-openapi';
import type { FieldIssue } from './errors.js';

/*
 * What every request passes on its way to a route, whatever the route declares
 * (docs/security.md "Findings", 6, and docs/decisions.md "Security fixes and the request edge"): one mechanism each, applied where routes are registered and validated.
 *
 * - Bodies are strict: a JSON body's object schema, and every object nested in it, refuses a field it
 *   does not declare (400 `validation_failed`, the field named, "is not a known field"). A nested
 *   object that declares its own catch-all (`.loose()`, `.catchall(...)`) keeps it: that is how a
 *   route accepts a document it does not own (a WebAuthn credential); the top level never does.
 * - Queries are strict the same way: a query parameter the route does not declare (nor its middleware,
 *   route-docs.ts `withMiddlewareQuery`) is a 400 naming it (`query.<name>`, "is not a known field"),
 *   also on a route that declares no query at all. A query schema that declares its own catch-all
 *   (`.loose()`) keeps it: that is how a route takes a redirect from another party (an identity
 *   provider's callback adds parameters of its own).
 * - A missing field reads "is required", on every route.
 * - Text PostgreSQL cannot store (NUL; an unpaired UTF-16 surrogate, which JSON's `\uD800` escapes
 *   produce and which drivers would silently replace with U+FFFD) is a 400 naming the field, for
 *   every string and key of a JSON body, and (in the API gate) for the path and every query parameter.
 */

/** NUL, or a surrogate that is not half of a pair. */
const UNSTORABLE = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export const UNSTORABLE_MESSAGE = 'contains a character that cannot be stored (NUL or an unpaired surrogate)';

export function unstorable(text: string): boolean {
  return UNSTORABLE.test(text);
}

/**
 * The fields of a parsed JSON value (keys and strings, at any depth) holding unstorable text. Every
 * JSON body passes here: one walk with one path array pushed and popped, so a clean body builds no
 * path at all.
 */
export function unstorableFields(value: unknown, path: string[] = []): FieldIssue[] {
  const found: FieldIssue[] = [];
  const at = [...path];
  const visit = (v: unknown): void => {
    if (typeof v === 'string') {
      if (UNSTORABLE.test(v)) found.push({ path: at.join('.') || '(body)', message: UNSTORABLE_MESSAGE });
    } else if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        at.push(String(i));
        visit(v[i]);
        at.pop();
      }
    } else if (v !== null && typeof v === 'object') {
      for (const key in v) {
        if (UNSTORABLE.test(key)) {
          found.push({ path: [...at, printable(key)].join('.'), message: UNSTORABLE_MESSAGE });
          continue;
        }
        at.push(key);
        visit((v as Record<string, unknown>)[key]);
        at.pop();
      }
    }
  };
  visit(value);
  return found;
}

/** A field name fit to echo back: the characters that cannot be stored shown as `\u0000`-style escapes. */
export function printable(name: string): string {
  return name.replace(/[\0\uD800-\uDFFF]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The path and query parameters of a URL that hold unstorable text (NUL arrives as `%00`). */
export function unstorableInUrl(url: string): FieldIssue[] {
  if (!url.includes('%00')) return [];
  const found: FieldIssue[] = [];
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  if (path.includes('%00')) found.push({ path: 'path', message: UNSTORABLE_MESSAGE });
  if (q >= 0) {
    for (const [key, value] of new URLSearchParams(url.slice(q + 1))) {
      if (unstorable(key) || unstorable(value)) found.push({ path: `query.${printable(key)}`, message: UNSTORABLE_MESSAGE });
    }
  }
  return found;
}

// "is required" for a field that is absent, whatever its type; a schema's own message still wins.
z.config({
  customError: (issue) =>
    issue.input === undefined && (issue.code === 'invalid_type' || issue.code === 'invalid_value' || issue.code === 'invalid_union')
      ? 'is required'
      : undefined,
});

type Def = Record<string, unknown> & { type: string };
const defOf = (schema: z.ZodType): Def => schema._zod.def as unknown as Def;
const rebuild = (schema: z.ZodType, def: Def): z.ZodType => schema.clone(def as unknown as typeof schema._zod.def);

const strictCache = new WeakMap<z.ZodType, z.ZodType>();

/**
 * The same schema with every object strict (see above): `top` forces the outermost object strict
 * even if it declared a catch-all. Metadata for the OpenAPI document stays on the original, which
 * remains the documented one; this copy only validates.
 */
export function strictSchema(schema: z.ZodType, top = true): z.ZodType {
  const key = top ? schema : undefined;
  const known = key && strictCache.get(key);
  if (known) return known;
  const made = strictCopy(schema, top);
  if (key) strictCache.set(key, made);
  return made;
}

function strictCopy(schema: z.ZodType, top: boolean): z.ZodType {
  const def = defOf(schema);
  switch (def.type) {
    case 'object': {
      const shape = def.shape as Record<string, z.ZodType>;
      const strictShape = Object.fromEntries(Object.entries(shape).map(([k, v]) => [k, strictCopy(v, false)]));
      const catchall = top || def.catchall === undefined ? z.never() : (def.catchall as z.ZodType);
      return rebuild(schema, { ...def, shape: strictShape, catchall });
    }
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'readonly':
    case 'nonoptional':
    case 'catch':
      return rebuild(schema, { ...def, innerType: strictCopy(def.innerType as z.ZodType, top) });
    case 'array':
      return rebuild(schema, { ...def, element: strictCopy(def.element as z.ZodType, false) });
    case 'union':
      return rebuild(schema, { ...def, options: (def.options as z.ZodType[]).map((o) => strictCopy(o, top)) });
    case 'pipe':
      // A transform or preprocess: the input side is what the client sent.
      return rebuild(schema, { ...def, in: strictCopy(def.in as z.ZodType, top) });
    case 'record':
      return rebuild(schema, { ...def, valueType: strictCopy(def.valueType as z.ZodType, false) });
    case 'tuple':
      return rebuild(schema, { ...def, items: (def.items as z.ZodType[]).map((i) => strictCopy(i, false)) });
    default:
      // Intersections stay as they are (two strict halves would refuse each other's fields); lazy
      // schemas and scalars have nothing to make strict.
      return schema;
  }
}

interface RequestParts {
  body?: { content?: Record<string, { schema?: unknown }> };
  query?: unknown;
}

const isZod = (x: unknown): x is z.ZodType => x instanceof z.ZodType;

/**
 * A route's `request` as validated: its JSON body schema made strict, and its query strict. A route
 * that declares no query gets none here: `refuseQuery` (among its middleware) refuses every parameter.
 */
export function strictRequest(request: unknown): RequestParts {
  const parts = (request ?? {}) as RequestParts;
  const { query: declared, ...rest } = parts;
  const query = isZod(declared) ? { query: strictSchema(declared, false) } : {};
  const content = parts.body?.content;
  const media = content?.['application/json'];
  if (!content || !media || !isZod(media.schema)) return { ...rest, ...query };
  return {
    ...rest,
    ...query,
    body: { ...parts.body, content: { ...content, 'application/json': { ...media, schema: strictSchema(media.schema) } } },
  };
}

/** Whether a route's `request` declares a query (else its middleware ends with `refuseQuery`). */
export const declaresQuery = (request: unknown): boolean => isZod((request as RequestParts | undefined)?.query);
