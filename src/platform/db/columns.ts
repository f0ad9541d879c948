import { timestamp, uuid } from 'drizzle-orm/pg-core';
import { v7 as uuidv7 } from 'uuid';

/** Time-ordered UUIDv7 ids are generated in application code (PostgreSQL 15 has no uuidv7()). */
export const newId = (): string => uuidv7();

export const idColumn = () => uuid('id').primaryKey().$defaultFn(newId);
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
export const createdAt = () => ts('created_at').notNull().defaultNow();
export const updatedAt = () => ts('updated_at').notNull().defaultNow();
