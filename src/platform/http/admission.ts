import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { AppError } from './errors.js';
import { documentAccess } from './route-docs.js';
import { hashAdmission } from '../argon2-pool.js';

/**
 * Admission before a request is read (docs/decisions.md "Speed: embedded backend and floods").
 *
 * A route whose work is bounded by a queue (a password hash) declares an admission gate among its
 * middleware. The gate decides from the moment alone (the queue, not the request), so the decision is
 * taken first, in `requestContext`, from the method and path: a refused request costs no body read,
 * no JSON parse, no validation and no access line of its own (refusals are counted per source and
 * second: platform/http/refusal-log.ts). The gate also runs where it is declared, for a request
 * that reached the route some other way.
 */

/** Null admits; an error refuses (a 503 `overloaded` with Retry-After). Must not look at the request. */
export type AdmissionCheck = () => AppError | null;

const CHECK = Symbol.for('keel.admission');

type Tagged = { [CHECK]?: AdmissionCheck };

/** A route middleware refusing with `check`'s error; documented as the overload gate (503). */
export function admissionGate(check: AdmissionCheck): MiddlewareHandler<AppEnv> {
  const gate: MiddlewareHandler<AppEnv> = (_c, next) => {
    const refusal = check();
    if (refusal) throw refusal;
    return next();
  };
  (gate as Tagged)[CHECK] = check;
  return documentAccess(gate, { overloadGate: true });
}

/** The gate of routes that hash a password: refused while the hash queue is full (HASH_QUEUE_MAX). */
export const hashGate = admissionGate(hashAdmission);

interface Declared {
  method: string;
  /** The route's path as declared (`/users/{id}`). */
  path: string;
  check: AdmissionCheck;
}

const declared = new WeakMap<object, Declared[]>();

/** Records the admission gate among a route's middleware, if any (createRouter calls it for every route). */
export function recordAdmission(router: object, method: string, path: string, middleware: unknown): void {
  const list: unknown[] = Array.isArray(middleware) ? middleware : middleware ? [middleware] : [];
  for (const m of list) {
    const check = (m as Tagged | null)?.[CHECK];
    if (!check) continue;
    const entries = declared.get(router) ?? [];
    entries.push({ method: method.toUpperCase(), path, check });
    declared.set(router, entries);
  }
}

/** Finds the admission check of a request by method and path (undefined: no gate); the path is asked only for a method some gate has. */
export type Admission = (method: string, path: () => string) => AdmissionCheck | undefined;

/**
 * The admission checks of a router's routes, `prefix` being where it is mounted; built on first use,
 * after every module has mounted its routes. A method without any gate costs one Set lookup.
 */
export function earlyAdmission(router: object, prefix: string): Admission {
  let table: { methods: Set<string>; exact: Map<string, AdmissionCheck>; patterns: { method: string; re: RegExp; check: AdmissionCheck }[] } | null = null;
  const build = () => {
    const t = { methods: new Set<string>(), exact: new Map<string, AdmissionCheck>(), patterns: [] as { method: string; re: RegExp; check: AdmissionCheck }[] };
    for (const d of declared.get(router) ?? []) {
      t.methods.add(d.method);
      const full = `${prefix}${d.path}`;
      if (!full.includes('{')) t.exact.set(`${d.method} ${full}`, d.check);
      else {
        const re = new RegExp(`^${full.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^/}]+\}/g, '[^/]+')}$`);
        t.patterns.push({ method: d.method, re, check: d.check });
      }
    }
    return t;
  };
  return (method, pathOf) => {
    table ??= build();
    if (!table.methods.has(method)) return undefined;
    const path = pathOf();
    return table.exact.get(`${method} ${path}`) ?? table.patterns.find((p) => p.method === method && p.re.test(path))?.check;
  };
}
