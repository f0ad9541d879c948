import { bigint, boolean, index, jsonb, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts } from '../../platform/db/columns.js';
import { users } from '../identity/schema.js';

/** A WebAuthn credential. `counter` is the signature counter used for clone/replay detection. */
export const passkeys = pgTable(
  'passkeys',
  {
    id: idColumn(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    credentialId: text('credential_id').notNull(),
    publicKey: text('public_key').notNull(),
    counter: bigint('counter', { mode: 'number' }).notNull().default(0),
    transports: jsonb('transports').$type<string[]>().notNull().default([]),
    aaguid: varchar('aaguid', { length: 36 }),
    backupEligible: boolean('backup_eligible').notNull().default(false),
    backupState: boolean('backup_state').notNull().default(false),
    name: varchar('name', { length: 255 }).notNull(),
    /** A sign-in credential (docs/decisions.md "Sign-in options"): discoverable, registered with user verification; it signs in alone. */
    signIn: boolean('sign_in').notNull().default(false),
    createdAt: createdAt(),
    lastUsedAt: ts('last_used_at'),
  },
  (t) => [uniqueIndex('passkeys_credential_idx').on(t.credentialId), index('passkeys_user_idx').on(t.userId)],
);
