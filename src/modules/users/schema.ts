import { index, pgTable, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts } from '../../platform/db/columns.js';
import { users } from '../identity/schema.js';
import { orgAccess, roleScope, roles } from '../access/schema.js';
import { organizations, partners } from '../tenancy/schema.js';

/**
 * A pending invitation: who is invited (`user_id`, the email it was sent to), what they get when they
 * accept (the grant: a partner or organisation membership with its role and restrictions), who
 * invited them and until when. The link's token is kept only as the SHA-256 in `token_hash`; accepting
 * consumes the row with one `DELETE … RETURNING` (of parallel accepts exactly one gets it). Revoking
 * deletes it; a re-invite or resend replaces the token. The tenant, role and inviter columns are set
 * to null when those are deleted, so accepting answers 409 `invitation_invalid` naming what is gone.
 */
export const invitations = pgTable(
  'invitations',
  {
    id: idColumn(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    email: varchar('email', { length: 255 }).notNull(),
    /** `partner` or `organization`: which membership the grant makes. */
    scope: roleScope('scope').notNull(),
    partnerId: uuid('partner_id').references(() => partners.id, { onDelete: 'set null' }),
    orgId: uuid('org_id').references(() => organizations.id, { onDelete: 'set null' }),
    roleId: uuid('role_id').references(() => roles.id, { onDelete: 'set null' }),
    /** Partner grants. */
    orgAccess: orgAccess('org_access'),
    orgIds: uuid('org_ids').array(),
    /** Organisation grants; null: every site / device group. */
    siteIds: uuid('site_ids').array(),
    deviceGroupIds: uuid('device_group_ids').array(),
    invitedBy: uuid('invited_by').references(() => users.id, { onDelete: 'set null' }),
    tokenHash: varchar('token_hash', { length: 64 }).notNull(),
    expiresAt: ts('expires_at').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    uniqueIndex('invitations_token_hash_idx').on(t.tokenHash),
    index('invitations_user_idx').on(t.userId),
    index('invitations_partner_idx').on(t.partnerId),
    index('invitations_org_idx').on(t.orgId),
    index('invitations_role_idx').on(t.roleId),
  ],
);
