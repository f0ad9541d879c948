import { and, gt, gte, lt, lte, not, or, type AnyColumn, type SQL } from 'drizzle-orm';
import { parse, Tester, type Compare, type Filter } from 'scim2-parse-filter';
import { ScimError } from './errors.js';

/** The longest `filter` parameter taken (a directory's filters are a line long). */
export const MAX_FILTER_LENGTH = 2000;

/**
 * A filter SQL cannot say whole is applied in memory to at most SCIM_FILTER_SCAN_LIMIT rows
 * (docs/decisions.md "SCIM"): beyond it the request is refused 400 `tooMany`, to be narrowed with a
 * term SQL answers.
 */
export const tooManyToFilter = (cap: number) =>
  new ScimError(400, `The filter would be applied to more than ${cap} resources; narrow it with userName, externalId, id, active or meta.lastModified`, 'tooMany');

const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * The comparisons of RFC 7643 §2.2 for the attributes Keel keeps: strings compare case-insensitively
 * (none of them is `caseExact` but `id` and `externalId`, which Keel treats alike: directories
 * send them back as they got them), and `gt`/`ge`/`lt`/`le` on two ISO 8601 date-times compare the
 * instants, not the text.
 */
class CaseInsensitiveTester extends Tester {
  override eq(r: unknown, v: unknown): boolean {
    if (typeof r === 'string' && typeof v === 'string') return r.toLowerCase() === v.toLowerCase();
    return r === v;
  }
  override ne(r: unknown, v: unknown): boolean {
    return !this.eq(r, v);
  }
  override co(r: unknown, v: unknown): boolean {
    return typeof r === 'string' && typeof v === 'string' && r.toLowerCase().includes(v.toLowerCase());
  }
  override sw(r: unknown, v: unknown): boolean {
    return typeof r === 'string' && typeof v === 'string' && r.toLowerCase().startsWith(v.toLowerCase());
  }
  override ew(r: unknown, v: unknown): boolean {
    return typeof r === 'string' && typeof v === 'string' && r.toLowerCase().endsWith(v.toLowerCase());
  }
  override gt(r: unknown, v: unknown): boolean {
    return order(r, v, (d) => d > 0);
  }
  override ge(r: unknown, v: unknown): boolean {
    return order(r, v, (d) => d >= 0);
  }
  override lt(r: unknown, v: unknown): boolean {
    return order(r, v, (d) => d < 0);
  }
  override le(r: unknown, v: unknown): boolean {
    return order(r, v, (d) => d <= 0);
  }
}

function order(r: unknown, v: unknown, ok: (d: number) => boolean): boolean {
  if (typeof r === 'string' && typeof v === 'string') {
    if (ISO_DATE.test(r) && ISO_DATE.test(v)) {
      const a = Date.parse(r);
      const b = Date.parse(v);
      return !Number.isNaN(a) && !Number.isNaN(b) && ok(a - b);
    }
    return ok(r.toLowerCase().localeCompare(v.toLowerCase()));
  }
  if (typeof r === 'number' && typeof v === 'number') return ok(r - v);
  return false;
}

const tester = new CaseInsensitiveTester();

/** Parses a `filter` (RFC 7644 §3.4.2.2); 400 `invalidFilter` for one that does not parse. */
export function parseFilter(text: string): Filter {
  if (text.length > MAX_FILTER_LENGTH) throw new ScimError(400, `filter is longer than ${MAX_FILTER_LENGTH} characters`, 'invalidFilter');
  try {
    return parse(text);
  } catch (err) {
    throw new ScimError(400, `filter does not parse: ${err instanceof Error ? err.message.slice(0, 200) : 'invalid'}`, 'invalidFilter');
  }
}

/** Whether a resource (as the API answers it) matches. */
export function matches(filter: Filter, resource: unknown): boolean {
  return tester.test(resource, filter);
}

/** What a field of a filter becomes in SQL: a condition for `op value`, or null where SQL cannot say it alike. */
export type SqlField = (op: Compare['op'], value: Compare['compValue']) => SQL | null;

/** `userName`, `urn:…:core:2.0:User:userName`, `meta.lastModified` → the path in lower case without the core schema's URN. */
export const pathKey = (attrPath: string): string => attrPath.toLowerCase().replace(/^urn:ietf:params:scim:schemas:core:2\.0:(user|group):/, '');

/**
 * The part of a filter SQL can evaluate with the organisation's indexes (`fields`, by `pathKey`):
 * `where` narrows the rows read, `exact` says it is the whole filter. A term SQL cannot say (`co`,
 * value paths, a field not in `fields`) is left to `matches` on what was read; an `and` keeps the
 * terms SQL can say, an `or` or a `not` only when SQL says all of it.
 */
export function pushDown(filter: Filter, fields: Record<string, SqlField>): { where: SQL | undefined; exact: boolean } {
  switch (filter.op) {
    case 'and': {
      const parts = filter.filters.map((f) => pushDown(f, fields));
      const wheres = parts.map((p) => p.where).filter((w): w is SQL => w !== undefined);
      return { where: wheres.length > 0 ? and(...wheres) : undefined, exact: parts.every((p) => p.exact) };
    }
    case 'or': {
      const parts = filter.filters.map((f) => pushDown(f, fields));
      return parts.every((p) => p.exact) ? { where: or(...parts.map((p) => p.where)), exact: true } : { where: undefined, exact: false };
    }
    case 'not': {
      const inner = pushDown(filter.filter, fields);
      return inner.exact && inner.where ? { where: not(inner.where), exact: true } : { where: undefined, exact: false };
    }
    case '[]':
    case 'pr':
      return { where: undefined, exact: false };
    default: {
      const field = fields[pathKey(filter.attrPath)];
      const where = field ? field(filter.op, filter.compValue) : null;
      return where ? { where, exact: true } : { where: undefined, exact: false };
    }
  }
}

/** An ISO 8601 date-time as a Date, or null (a filter's `gt`/`ge`/`lt`/`le` on dates). */
export function isoDate(v: unknown): Date | null {
  if (typeof v !== 'string' || !ISO_DATE.test(v)) return null;
  const ms = Date.parse(v);
  return Number.isNaN(ms) ? null : new Date(ms);
}

/** A date column compared as RFC 7643 compares date-times (instants). */
export function dateField(column: AnyColumn): SqlField {
  return (op, value) => {
    const d = isoDate(value);
    if (!d) return null;
    switch (op) {
      case 'gt': return gt(column, d);
      case 'ge': return gte(column, d);
      case 'lt': return lt(column, d);
      case 'le': return lte(column, d);
      default: return null;
    }
  };
}
