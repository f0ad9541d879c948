import { timestamp, uuid } from 'drizzle-orm/pg-core';
import { randomFillSync, randomUUID } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';

/*
 * Random bytes for ids, drawn 4 KiB at a time. `uuid` draws 16 bytes from the system for each id (a
 * `getRandomValues` call): under load that call was 2-3% of a webhook benchmark's samples, for two
 * ids per event. Node's own randomUUID buffers the same way.
 */
const pool = new Uint8Array(4096);
let drawn = pool.length;
/** `uuid`'s monotonic v7 rule, kept with the pooled bytes: ids of one process sort as they were made. */
const v7State = { msecs: -Infinity, seq: 0 };

/** Time-ordered UUIDv7 ids are generated in application code (PostgreSQL 15 has no uuidv7()). */
export function newId(): string {
  if (drawn === pool.length) {
    randomFillSync(pool);
    drawn = 0;
  }
  const random = pool.subarray(drawn, (drawn += 16));
  const now = Date.now();
  if (now > v7State.msecs) {
    v7State.msecs = now;
    // uuid's v7Sequence: 31 random bits seed the counter of a new millisecond.
    v7State.seq = (((random[6] as number) & 0x7f) << 24) | ((random[7] as number) << 16) | ((random[8] as number) << 8) | (random[9] as number);
  } else {
    v7State.seq = (v7State.seq + 1) | 0;
    if (v7State.seq === 0) v7State.msecs++;
  }
  return uuidv7({ random, msecs: v7State.msecs, seq: v7State.seq });
}

/**
 * A UUIDv7 whose bits after the timestamp are all random (`uuid`'s v7 keeps a counter in them, a
 * library detail not to rely on): for a statement that makes several ids from one by replacing its
 * last bytes (webhooks/service.ts, routing).
 */
export function randomV7(): string {
  const r = randomUUID();
  const ms = Date.now().toString(16).padStart(12, '0');
  return `${ms.slice(0, 8)}-${ms.slice(8)}-7${r.slice(15)}`;
}

export const idColumn = () => uuid('id').primaryKey().$defaultFn(newId);
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
export const createdAt = () => ts('created_at').notNull().defaultNow();
export const updatedAt = () => ts('updated_at').notNull().defaultNow();
