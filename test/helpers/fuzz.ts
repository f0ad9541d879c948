import fc from 'fast-check';

/**
 * Requests generated from Keel's own OpenAPI document (docs/testing.md "Fuzzing"): for an operation, values
 * that follow its declared schemas, near-valid ones (one field replaced, dropped or added) and hostile
 * ones (wrong types, huge strings, deep nesting, invalid UUIDs, unpaired surrogates, NUL), sent with
 * the right or a wrong content type, whole or cut short.
 */

type Json = Record<string, any>;

export interface Operation {
  method: string;
  /** OpenAPI path, `{param}` style. */
  path: string;
  op: Json;
}

export interface FuzzRequest {
  path: string;
  query: Record<string, string>;
  /** JSON value, raw text with a content type, or nothing. */
  body: { kind: 'json'; value: unknown } | { kind: 'raw'; contentType: string; text: string } | { kind: 'none' };
}

export function operationsOf(doc: Json): Operation[] {
  return Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([m]) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, op: op as Json })),
  );
}

function deref(doc: Json, schema: Json | undefined): Json {
  let s = schema ?? {};
  for (let i = 0; i < 20 && typeof s.$ref === 'string'; i++) {
    const parts = (s.$ref).replace(/^#\//, '').split('/');
    s = parts.reduce<Json>((node, key) => (node)[key] as Json, doc);
  }
  return s;
}

function nested(depth: number): unknown {
  let v: unknown = 'bottom';
  for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { a: v };
  return v;
}

/** A value of any JSON type that a schema would not expect, or a string that stresses the edge. */
export const hostile: fc.Arbitrary<unknown> = fc.oneof(
  fc.string({ maxLength: 30 }),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.constantFrom('\u0000', 'a\u0000b', '\ud800', 'x\udfffy', '../../etc/passwd', '%00', '\u202e', '😀'.repeat(50), ' ', ''),
  fc.constant('x'.repeat(200_000)),
  fc.constantFrom('not-a-uuid', '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '1e999', '-0', 'NaN', 'true', 'null'),
  fc.integer(),
  fc.constantFrom(Number.MAX_SAFE_INTEGER, -1, 0, 1e308, -1e-308, 2 ** 31),
  fc.double({ noNaN: true }),
  fc.boolean(),
  fc.constant(null),
  fc.constantFrom([], {}, [null], { '': 1 }, { __proto__: { polluted: true } }, { constructor: { prototype: { polluted: true } } }),
  fc.constant(nested(3_000)),
  fc.array(fc.anything({ maxDepth: 2 }), { maxLength: 5 }),
  fc.object({ maxDepth: 2 }),
);

/** Values that follow `schema` (resolved against `doc`). */
export function valid(doc: Json, schema: Json | undefined, depth = 0): fc.Arbitrary<unknown> {
  const s = deref(doc, schema);
  if (depth > 6) return fc.constant(null);
  if (Array.isArray(s.enum) && s.enum.length > 0) return fc.constantFrom(...(s.enum as unknown[]));
  if ('const' in s) return fc.constant(s.const);
  const alternatives = (s.anyOf ?? s.oneOf) as Json[] | undefined;
  if (alternatives?.length) return fc.oneof(...alternatives.map((a) => valid(doc, a, depth + 1)));
  if (Array.isArray(s.allOf) && s.allOf.length > 0) return valid(doc, s.allOf[0] as Json, depth + 1);
  const types = Array.isArray(s.type) ? (s.type as string[]) : s.type ? [s.type as string] : [];
  if (types.length > 1) return fc.oneof(...types.map((t) => valid(doc, { ...s, type: t }, depth)));
  const byType = ((): fc.Arbitrary<unknown> => {
    switch (types[0]) {
      case 'string': {
        const max = Math.min(typeof s.maxLength === 'number' ? s.maxLength : 40, 80);
        const min = Math.min(typeof s.minLength === 'number' ? s.minLength : 0, max);
        switch (s.format) {
          case 'uuid':
            return fc.uuid();
          case 'email':
            return fc.emailAddress().filter((e) => e.length <= max);
          case 'date-time':
            return fc.date({ noInvalidDate: true, min: new Date('2000-01-01'), max: new Date('2100-01-01') }).map((d) => d.toISOString());
          case 'uri':
          case 'url':
            return fc.webUrl();
          default:
            return fc.string({ minLength: min, maxLength: max });
        }
      }
      case 'integer':
        return fc.integer({ min: typeof s.minimum === 'number' ? s.minimum : -1_000, max: typeof s.maximum === 'number' ? s.maximum : 1_000 });
      case 'number':
        return fc.double({ noNaN: true, noDefaultInfinity: true, min: typeof s.minimum === 'number' ? s.minimum : -1e6, max: typeof s.maximum === 'number' ? s.maximum : 1e6 });
      case 'boolean':
        return fc.boolean();
      case 'null':
        return fc.constant(null);
      case 'array':
        return fc.array(valid(doc, s.items as Json, depth + 1), { minLength: Math.min(s.minItems ?? 0, 4), maxLength: Math.min(s.maxItems ?? 4, 4) });
      case 'object':
      default: {
        const props = (s.properties ?? {}) as Record<string, Json>;
        const keys = Object.keys(props);
        if (keys.length === 0) {
          if (s.additionalProperties && typeof s.additionalProperties === 'object') {
            return fc.dictionary(fc.string({ minLength: 1, maxLength: 10 }), valid(doc, s.additionalProperties as Json, depth + 1), { maxKeys: 3 });
          }
          return types[0] === 'object' ? fc.constant({}) : fc.anything({ maxDepth: 2 });
        }
        const model = Object.fromEntries(keys.map((k) => [k, valid(doc, props[k], depth + 1)]));
        return fc.record(model, { requiredKeys: ((s.required ?? []) as string[]).filter((k) => keys.includes(k)) });
      }
    }
  })();
  return s.example !== undefined ? fc.oneof({ arbitrary: fc.constant(s.example as unknown), weight: 1 }, { arbitrary: byType, weight: 3 }) : byType;
}

/** A valid value with one thing wrong: a field replaced by a hostile value, a required one dropped, an unknown one added. */
export function nearValid(doc: Json, schema: Json | undefined): fc.Arbitrary<unknown> {
  return fc.tuple(valid(doc, schema), fc.nat(), hostile, fc.constantFrom('replace', 'drop', 'extra')).map(([value, n, bad, how]) => {
    if (!value || typeof value !== 'object' || Array.isArray(value)) return bad;
    const entries = Object.entries(value as Record<string, unknown>);
    const key = entries.length > 0 ? entries[n % entries.length]?.[0] : undefined;
    if (how === 'extra' || key === undefined) return { ...Object.fromEntries(entries), [`unknown${n % 7}`]: bad };
    if (how === 'drop') return Object.fromEntries(entries.filter(([k]) => k !== key));
    return Object.fromEntries(entries.map(([k, v]) => [k, k === key ? bad : v]));
  });
}

/** Any generated value as the text of a parameter. */
function asText(v: unknown): string {
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v) ?? 'undefined';
  } catch {
    return 'unprintable';
  }
}

function paramArb(doc: Json, param: Json, known: string[]): fc.Arbitrary<string> {
  const s = deref(doc, param.schema as Json);
  const fromSchema = valid(doc, s).map(asText);
  const hostileText = hostile.map(asText).map((t) => t.slice(0, 3_000));
  return known.length > 0 && s.format === 'uuid'
    ? fc.oneof({ arbitrary: fc.constantFrom(...known), weight: 3 }, { arbitrary: fromSchema, weight: 2 }, { arbitrary: hostileText, weight: 1 })
    : fc.oneof({ arbitrary: fromSchema, weight: 3 }, { arbitrary: hostileText, weight: 1 });
}

/** Percent-encodes a path segment; an unpaired surrogate goes out as the invalid UTF-8 bytes ED A0 80. */
function encodePathSegment(text: string): string {
  return text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]|[^]/gu, (ch) => {
    const code = ch.charCodeAt(0);
    if (ch.length === 1 && code >= 0xd800 && code <= 0xdfff) return '%ED%A0%80';
    return encodeURIComponent(ch);
  });
}

/** Requests for one operation; `known` ids (of things that exist) stand in for UUID parameters often. */
export function requestsFor(doc: Json, operation: Operation, known: string[]): fc.Arbitrary<FuzzRequest> {
  const params = ((operation.op.parameters ?? []) as Json[]).map((p) => deref(doc, p));
  const pathParams = params.filter((p) => p.in === 'path');
  const queryParams = params.filter((p) => p.in === 'query');
  const pathArb = fc
    .tuple(...pathParams.map((p) => paramArb(doc, p, known)))
    .map((values) => pathParams.reduce((path, p, i) => path.replace(`{${p.name as string}}`, encodePathSegment(values[i] ?? '')), operation.path));
  const queryArb = fc
    .tuple(
      fc.tuple(...queryParams.map((p) => fc.option(paramArb(doc, p, known), { nil: undefined, freq: 2 }))),
      fc.option(fc.tuple(fc.string({ minLength: 1, maxLength: 8 }), hostile.map((v) => asText(v).slice(0, 200))), { nil: undefined, freq: 4 }),
    )
    .map(([values, extra]) => {
      const q: Record<string, string> = {};
      queryParams.forEach((p, i) => {
        const v = values[i];
        if (v !== undefined) q[p.name as string] = v;
      });
      if (extra) q[extra[0]] = extra[1];
      return q;
    });
  const schema = operation.op.requestBody?.content?.['application/json']?.schema as Json | undefined;
  const bodyValue = schema
    ? fc.oneof({ arbitrary: valid(doc, schema), weight: 3 }, { arbitrary: nearValid(doc, schema), weight: 3 }, { arbitrary: hostile, weight: 1 })
    : fc.oneof({ arbitrary: fc.constant({}), weight: 1 }, { arbitrary: hostile, weight: 1 });
  const bodyArb: fc.Arbitrary<FuzzRequest['body']> = fc.oneof(
    { arbitrary: bodyValue.map((value) => ({ kind: 'json' as const, value })), weight: 6 },
    // A body that ends early.
    { arbitrary: fc.tuple(bodyValue, fc.nat()).map(([v, n]) => {
        const text = asText(v);
        return { kind: 'raw' as const, contentType: 'application/json', text: text.slice(0, text.length > 1 ? n % (text.length - 1) : 0) };
      }), weight: 1 },
    // The right text under a wrong type.
    { arbitrary: fc.tuple(bodyValue, fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json; charset=utf-16')).map(([v, contentType]) => ({ kind: 'raw' as const, contentType, text: asText(v) })), weight: 1 },
    { arbitrary: fc.constant({ kind: 'none' as const }), weight: 1 },
  );
  return fc.record({ path: pathArb, query: queryArb, body: bodyArb });
}
