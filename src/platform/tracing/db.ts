import { SpanKind, type Attributes, type Span } from '@opentelemetry/api';
import type { PGlite } from '@electric-sql/pglite';
import type pg from 'pg';
import type { PreparedRunner } from '../db/raw.js';
import { childSpan, endSpan, endWhenSettled } from './index.js';

/*
 * A span per database statement (docs/deploy.md "Tracing"), at the driver: every statement drizzle,
 * the hot statements (platform/db/raw.ts) and the migrator send passes here, on PGlite and on
 * PostgreSQL. The span carries the statement's operation and table, never its text's values or its
 * parameters. Installed by platform/db/client.ts only while tracing is on.
 */

interface Described {
  name: string;
  attributes: Attributes;
}

const OPERATION = /^\s*([A-Za-z]+)/;
/** A table after FROM, INTO, UPDATE or JOIN (schema-qualified or not); a function call there (`from unnest(…)`) is no table. */
const TABLE = /\b(?:from|into|update|join)\s+(?:only\s+)?(?:"?[A-Za-z_]\w*"?\s*\.\s*)?"?([A-Za-z_]\w*)\b"?(?!\s*\()/i;
const described = new Map<string, Described>();

/** The operation (first keyword) and the first table a statement names: `SELECT users`. */
export function describeStatement(text: string): Described {
  let d = described.get(text);
  if (d) return d;
  const operation = (OPERATION.exec(text)?.[1] ?? 'QUERY').toUpperCase();
  const table = TABLE.exec(text)?.[1];
  const attributes: Attributes = { 'db.system.name': 'postgresql', 'db.operation.name': operation };
  if (table) attributes['db.collection.name'] = table;
  d = { name: table ? `${operation} ${table}` : operation, attributes };
  if (described.size >= 2_000) described.clear();
  described.set(text, d);
  return d;
}

function statementSpan(text: string | undefined): Span | null {
  if (typeof text !== 'string') return null;
  const { name, attributes } = describeStatement(text);
  return childSpan(name, attributes, SpanKind.CLIENT);
}

function traced<T>(text: string | undefined, run: () => Promise<T>): Promise<T> {
  const span = statementSpan(text);
  return span ? endWhenSettled(span, run()) : run();
}

type Queryable = Pick<PGlite, 'query' | 'exec'>;

function traceQueryable(target: Queryable): void {
  const query = target.query.bind(target);
  const exec = target.exec.bind(target);
  target.query = ((text: string, params?: unknown[], options?: object) => traced(text, () => query(text, params, options))) as PGlite['query'];
  target.exec = ((text: string, options?: object) => traced(text, () => exec(text, options)));
}

/** PGlite: its `query` and `exec`, and those of each transaction it opens. */
export function tracePglite(client: PGlite): void {
  traceQueryable(client);
  const transaction = client.transaction.bind(client);
  client.transaction = (<T>(fn: (tx: Parameters<Parameters<PGlite['transaction']>[0]>[0]) => Promise<T>) =>
    transaction((tx) => {
      traceQueryable(tx);
      return fn(tx);
    }));
}

/** The prepared-statement runner of PGlite (platform/db/pglite-statements.ts), which talks to the protocol directly. */
export function tracedRunner(run: PreparedRunner): PreparedRunner {
  return (client, statement, params, inTransaction) => traced(statement.text, () => run(client, statement, params, inTransaction));
}

/** PostgreSQL: every connection of the pool, as it connects (`pool.query` and transactions both run on one). */
export function tracePool(pool: pg.Pool): void {
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]): unknown => {
      const config = args[0];
      const text = typeof config === 'string' ? config : (config as { text?: unknown; submit?: unknown } | null)?.submit ? undefined : ((config as { text?: string } | null)?.text ?? undefined);
      const span = statementSpan(text);
      if (!span) return query(...args);
      // pg-pool's `pool.query` passes a callback; drizzle awaits the promise.
      const last = args.length - 1;
      const callback = args[last];
      if (typeof callback === 'function') {
        args[last] = (err: unknown, res: unknown) => {
          endSpan(span, err ?? undefined);
          (callback as (e: unknown, r: unknown) => void)(err, res);
        };
        return query(...args);
      }
      return endWhenSettled(span, query(...args) as Promise<unknown>);
    };
  });
}
