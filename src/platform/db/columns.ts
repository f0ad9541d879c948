import { timestamp, uuid } from 'drizzle-orm/pg-core';
import { randomUUID } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';

/** Time-ordered UUIDv7 ids are generated in application code (PostgreSQL 15 has no uuidv7()). */
export const newId = (): string => uuidv7();

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
