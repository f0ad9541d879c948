import { parse, Tester, type Filter } from 'scim2-parse-filter';
import { ScimError } from './errors.js';

/** The longest `filter` parameter taken (a directory's filters are a line long). */
export const MAX_FILTER_LENGTH = 2000;

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

/**
 * The value a filter pins an indexed attribute to (`userName eq "x"`, alone or as one term of an
 * `and`), so the lookup reads by the index instead of the whole organisation; the whole filter is
 * still applied to what it reads.
 */
export function pinned(filter: Filter, attribute: 'userName' | 'externalId' | 'id'): string | null {
  if (filter.op === 'eq' && 'attrPath' in filter && typeof filter.compValue === 'string') {
    const path = filter.attrPath.toLowerCase().replace(/^urn:ietf:params:scim:schemas:core:2\.0:user:/, '');
    return path === attribute.toLowerCase() ? filter.compValue : null;
  }
  if (filter.op === 'and') {
    for (const f of filter.filters) {
      const v = pinned(f, attribute);
      if (v !== null) return v;
    }
  }
  return null;
}
