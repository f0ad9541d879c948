import { parse, protocol, type PGlite } from '@electric-sql/pglite';
import type { PreparedRunner, Statement } from './raw.js';

/**
 * Prepared statements on PGlite. Its `query()` parses and plans every statement again (in
 * WebAssembly, on the main thread) and talks to Postgres in six separate calls; a hot statement here
 * is parsed once per database under its name, then each run is one call of Bind, Describe,
 * Execute and Sync. The locking is PGlite's own, as `query()` takes it: the transaction lock (not
 * inside a transaction, which already holds it) and then the query lock, and the data dir is synced
 * after a statement outside a transaction, as `query()` does.
 *
 * `_runExclusiveQuery` and `_runExclusiveTransaction` are PGlite's internal locks (its public
 * `runExclusive` is the first alone). PGlite is pinned; test/foundation/raw-sql.test.ts fails if they
 * change, and without them this returns null and the plain `query()` path is used.
 */
interface PgliteLocks {
  _runExclusiveQuery<T>(fn: () => Promise<T>): Promise<T>;
  _runExclusiveTransaction<T>(fn: () => Promise<T>): Promise<T>;
}

const { serialize } = protocol;

function concat(parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Parameters travel as text with types inferred by Postgres, as the writers in raw.ts prepare them (arrays as array literals). */
function asText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return value.toISOString();
  // A one-dimensional array as a PostgreSQL array literal (what node-postgres sends), for `unnest($1::uuid[])`.
  if (Array.isArray(value)) {
    return `{${value
      .map((v: unknown) => {
        const t = asText(v);
        return t === null ? 'NULL' : `"${t.replace(/[\\"]/g, '\\$&')}"`;
      })
      .join(',')}}`;
  }
  throw new TypeError('prepared statement parameters must be text, numbers, booleans, dates, arrays of them or null');
}

export function pglitePreparedRunner(pg: PGlite): PreparedRunner | null {
  const probe = pg as unknown as Partial<PgliteLocks>;
  if (typeof probe._runExclusiveQuery !== 'function' || typeof probe._runExclusiveTransaction !== 'function') return null;
  const locks = pg as unknown as PgliteLocks;
  const parsed = new Set<string>();

  async function run(statement: Statement, params: unknown[]): Promise<unknown[]> {
    // A customPlan statement is the unnamed one, parsed again in the same call each run, so it is
    // planned for these parameters (raw.ts); any other is parsed once under its name.
    const name = statement.customPlan ? '' : statement.name;
    if (name && !parsed.has(name)) {
      await pg.execProtocol(concat([serialize.parse({ name, text: statement.text }), serialize.sync()]), { syncToFs: false });
      parsed.add(name);
    }
    const message = concat([
      ...(name ? [] : [serialize.parse({ name: '', text: statement.text })]),
      serialize.bind({ statement: name, values: params.map(asText) }),
      serialize.describe({ type: 'P' }),
      serialize.execute({}),
      serialize.sync(),
    ]);
    const { messages } = await pg.execProtocol(message, { syncToFs: false });
    return parse.parseResults(messages, pg.parsers)[0]?.rows ?? [];
  }

  return (_client, statement, params, inTransaction) =>
    inTransaction
      ? locks._runExclusiveQuery(() => run(statement, params))
      : locks._runExclusiveTransaction(() =>
          locks._runExclusiveQuery(async () => {
            const rows = await run(statement, params);
            await pg.syncToFs();
            return rows;
          }),
        );
}
