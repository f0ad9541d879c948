import type { Db } from './db/client.js';
import { rawQuery } from './db/raw.js';
import { DecryptionError, type Sealer } from './crypto.js';

/**
 * A column that holds values sealed with `Sealer` (platform/crypto.ts), declared by the module that
 * owns it beside the context it seals with, so `keel secrets reseal` can move every value to the
 * current key after a key rotation (docs/deploy.md "Key rotation"). Names are SQL identifiers
 * written in code, never input.
 */
export interface SealedColumn {
  table: string;
  column: string;
  /** The row's columns the context is made of; the first is the row's unique id. */
  keys: readonly [string, ...string[]];
  /** The AAD the value was sealed with (the same function the module seals and opens with). */
  context(row: Record<string, string>): string;
}

export interface ResealResult {
  /** `table.column` */
  column: string;
  /** Values now sealed with the current key. */
  resealed: number;
  /** Values no configured key opens (left as they are). */
  unreadable: number;
}

const BATCH = 500;

/**
 * Re-seals every value of `columns` not sealed with the current key: opened with the key it names (one
 * of APP_ENCRYPTION_KEYS_PREVIOUS), sealed again with the current one under the same context, and
 * written only if the row still holds the value read (a value changed meanwhile is already current).
 * Runs beside serving processes (each value is one conditional UPDATE); idempotent.
 */
export async function resealAll(db: Db, sealer: Sealer, columns: readonly SealedColumn[]): Promise<ResealResult[]> {
  const current = `v1.${sealer.currentKeyId}.%`;
  const results: ResealResult[] = [];
  for (const c of columns) {
    const id = c.keys[0];
    const select = `select ${c.keys.map((k) => `${k}::text as "${k}"`).join(', ')}, ${c.column} as sealed from ${c.table}
      where ${c.column} is not null and ${c.column} not like $1 and ${id}::text > $2 order by ${id}::text limit ${BATCH}`;
    const update = `update ${c.table} set ${c.column} = $1 where ${id}::text = $2 and ${c.column} = $3`;
    const result: ResealResult = { column: `${c.table}.${c.column}`, resealed: 0, unreadable: 0 };
    for (let after = ''; ; ) {
      const rows = await rawQuery<Record<string, string>>(db, select, [current, after]);
      for (const row of rows) {
        const sealed = row.sealed ?? '';
        let plain: string;
        try {
          plain = sealer.open(sealed, c.context(row));
        } catch (err) {
          if (!(err instanceof DecryptionError)) throw err;
          result.unreadable++;
          continue;
        }
        const written = await rawQuery(db, `${update} returning 1`, [sealer.seal(plain, c.context(row)), row[id], sealed]);
        result.resealed += written.length;
      }
      if (rows.length < BATCH) break;
      after = rows[rows.length - 1]?.[id] ?? '';
    }
    results.push(result);
  }
  return results;
}
