import { index, pgTable, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';
import { deviceGroups, organizations, sites } from '../tenancy/schema.js';

/** Minimal device record; the agents issue adds enrolment, tokens, versions and update state. */
export const devices = pgTable(
  'devices',
  {
    id: idColumn(),
    orgId: uuid('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    siteId: uuid('site_id').references(() => sites.id, { onDelete: 'set null' }),
    deviceGroupId: uuid('device_group_id').references(() => deviceGroups.id, { onDelete: 'set null' }),
    hostname: varchar('hostname', { length: 255 }).notNull(),
    os: varchar('os', { length: 50 }),
    arch: varchar('arch', { length: 50 }),
    status: varchar('status', { length: 20 }).notNull().default('offline'),
    lastSeenAt: ts('last_seen_at'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('devices_org_idx').on(t.orgId)],
);
