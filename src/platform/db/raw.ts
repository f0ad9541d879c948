import { getTableColumns, getTableName, type InferInsertModel, type InferSelectModel } from 'drizzle-orm';
import type { PgTable } from 'drizzle-orm/pg-core';
import type { Db } from './client.js';

/**
 * Hand-written SQL for the few hottest statements (a login, a refresh), run straight on the driver.
 *
 * Drizzle builds each statement from its query tree on every call and maps every row; for a login
 * that was most of its database time (bench/README.md). A statement here is text with positional
 * parameters, derived once from the drizzle schema (`tableReader`, `tableWriter`), and runs on the
 * same connection as the drizzle handle it is given, so it takes part in that handle's transaction.
 * Everything else uses drizzle.
 *
 * A `Statement` (from `prepared`) is also prepared once per connection and afterwards only bound and
 * executed: PostgreSQL parses and plans it once (on PGlite, whose parse and plan run in WebAssembly
 * on the main thread, that halves a lookup's cost: docs/decisions.md "Cost on the request path…", Prepared hot statements).
 */

export interface DriverClient {
  query(text: string | { name: string; text: string; values: unknown[] }, params?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A hot statement: one name for one text, prepared once per connection. */
export interface Statement {
  readonly name: string;
  readonly text: string;
  /**
   * Planned for its parameters on every run, never from a cached generic plan: PostgreSQL switches a
   * prepared statement to a generic plan after five runs when that looks no dearer, and for the
   * webhook claim (a lateral LIMIT per webhook, an UPDATE joined back) the generic plan it sometimes
   * picked scanned the whole deliveries table: 320 ms a claim instead of 16 on PGlite, deliveries
   * 2,000/s → 360/s, in about one benchmark run of two. Such a statement is sent unnamed each time
   * (still one round trip); the parse costs little next to what it saves.
   */
  readonly customPlan?: boolean;
}

const statementNames = new Map<string, string>();
const declared = new Map<string, Statement>();

/** The statement declared under `name` in this process (tests check how a hot statement is run). */
export function declaredStatement(name: string): Statement | undefined {
  return declared.get(name);
}

/** Declares a prepared statement. A name stands for one text in the whole process; reusing it for another text throws. */
export function prepared(name: string, text: string, opts: { customPlan?: boolean } = {}): Statement {
  const known = statementNames.get(name);
  if (known !== undefined && known !== text) throw new Error(`prepared statement ${name} is already declared with another text`);
  statementNames.set(name, text);
  const statement: Statement = opts.customPlan ? { name, text, customPlan: true } : { name, text };
  declared.set(name, statement);
  return statement;
}

/**
 * Runs a prepared statement on a driver connection: node-postgres prepares a named statement per
 * connection itself; PGlite needs platform/db/pglite-statements.ts. Registered per database client
 * when it opens; a transaction started with `transaction()` shares its database's runner
 * (`shareRunner`). A handle without one (a drizzle transaction opened directly) runs the text unprepared.
 */
export type PreparedRunner = (client: DriverClient, statement: Statement, params: unknown[], inTransaction: boolean) => Promise<unknown[]>;

const runners = new WeakMap<object, { run: PreparedRunner; inTransaction: boolean }>();

export function registerRunner(client: object, run: PreparedRunner): void {
  runners.set(client, { run, inTransaction: false });
}

/** node-postgres: a named query is parsed once per connection (Pool or the transaction's client). */
export const nodePostgresRunner: PreparedRunner = async (client, statement, params) =>
  statement.customPlan
    ? (await client.query(statement.text, params)).rows // unnamed: planned for these parameters
    : (await client.query({ name: statement.name, text: statement.text, values: params })).rows;

/** Lets a transaction handle use its database's runner (called when the transaction starts). */
export function shareRunner(tx: Db, db: Db): void {
  const root = runners.get(clientOf(db));
  if (root) runners.set(clientOf(tx), { run: root.run, inTransaction: true });
}

/** The driver client behind a drizzle database or transaction: PGlite or its transaction, a pg Pool or PoolClient. */
function clientOf(db: Db): DriverClient {
  const client = (db as unknown as { session?: { client?: DriverClient } }).session?.client;
  if (typeof client?.query !== 'function') throw new Error('raw SQL: this drizzle handle exposes no driver client');
  return client;
}

/** Runs one statement on `db`'s connection (inside its transaction, if it is one) and answers the rows. */
export async function rawQuery<T = Record<string, unknown>>(db: Db, sql: string | Statement, params: unknown[]): Promise<T[]> {
  const client = clientOf(db);
  if (typeof sql === 'string') return (await client.query(sql, params)).rows as T[];
  const runner = runners.get(client);
  if (runner) return (await runner.run(client, sql, params, runner.inTransaction)) as T[];
  return (await client.query(sql.text, params)).rows as T[];
}

/** Reads a table's rows from raw SQL into the exact shape drizzle answers (camelCase keys, mapped values). */
export interface TableReader<T extends PgTable> {
  /** The select list: `"t"."password_hash" as "passwordHash", …` for every column. */
  columns: string;
  read(row: Record<string, unknown>): InferSelectModel<T>;
}

export function tableReader<T extends PgTable>(table: T, alias?: string): TableReader<T> {
  const columns = Object.entries(getTableColumns(table));
  const prefix = alias ? `"${alias}".` : '';
  return {
    columns: columns.map(([key, col]) => `${prefix}"${col.name}" as "${key}"`).join(', '),
    read(row) {
      const out: Record<string, unknown> = {};
      // The column's own driver mapping (bigint mode number, timestamps as Date, jsonb): what drizzle does.
      for (const [key, col] of columns) {
        const value = row[key];
        out[key] = value === null || value === undefined ? null : col.mapFromDriverValue(value);
      }
      return out as InferSelectModel<T>;
    },
  };
}

/** A piece of SQL with its parameters, numbered from the `first` it was built with. */
export interface SqlPart {
  text: string;
  params: unknown[];
}

/** Every column of a table's insert, none left out: adding a column to the schema breaks the writer's callers at compile time. */
export type FullRow<T extends PgTable> = { [K in keyof InferInsertModel<T>]-?: Exclude<InferInsertModel<T>[K], undefined> };

/** Writes a table's rows from raw SQL: the column list, placeholders and parameter order all come from the drizzle schema. */
export interface TableWriter<T extends PgTable> {
  /** `insert into "t" ("a", "b", …) values ($first, $first+1::jsonb, …)` with the row's parameters. */
  insert(row: FullRow<T>, first?: number): SqlPart;
}

export function tableWriter<T extends PgTable>(table: T): TableWriter<T> {
  const columns = Object.entries(getTableColumns(table));
  const name = getTableName(table);
  // Parameters travel as text: timestamps as ISO strings and JSON serialised, cast back here.
  const casts = columns.map(([, col]) => {
    const type = col.getSQLType();
    if (type === 'jsonb' || type === 'json') return `::${type}`;
    if (type.startsWith('timestamp')) return type.includes('with time zone') ? '::timestamptz' : '::timestamp';
    return '';
  });
  const head = `insert into "${name}" (${columns.map(([, col]) => `"${col.name}"`).join(', ')}) values `;
  const texts = new Map<number, string>();
  return {
    insert(row, first = 1) {
      let text = texts.get(first);
      if (!text) {
        text = `${head}(${casts.map((cast, i) => `$${first + i}${cast}`).join(', ')})`;
        texts.set(first, text);
      }
      const values = row as Record<string, unknown>;
      const params = columns.map(([key], i) => {
        const value = values[key];
        if (value === null || value === undefined) return null;
        if (value instanceof Date) return value.toISOString();
        return casts[i] === '::jsonb' || casts[i] === '::json' ? JSON.stringify(value) : value;
      });
      return { text, params };
    },
  };
}
