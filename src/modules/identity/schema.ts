import { sql } from 'drizzle-orm';
import { bigint, boolean, index, jsonb, pgEnum, pgTable, text, uniqueIndex, uuid, varchar } from 'drizzle-orm/pg-core';
import { createdAt, idColumn, ts, updatedAt } from '../../platform/db/columns.js';

export const userStatus = pgEnum('user_status', ['active', 'invited', 'disabled']);
export const mfaMethod = pgEnum('mfa_method', ['totp', 'sms', 'passkey']);

export const users = pgTable(
  'users',
  {
    id: idColumn(),
    email: varchar('email', { length: 255 }).notNull(),
    name: varchar('name', { length: 255 }).notNull(),
    passwordHash: text('password_hash'),
    /** TOTP secret, AES-256-GCM sealed. */
    mfaSecret: text('mfa_secret'),
    mfaEnabled: boolean('mfa_enabled').notNull().default(false),
    /** SHA-256 hashes of the unused recovery codes; one is removed atomically when used. */
    mfaRecoveryCodes: jsonb('mfa_recovery_codes').$type<string[]>(),
    /** The last accepted TOTP time-step: a code is accepted once. */
    totpLastStep: bigint('totp_last_step', { mode: 'number' }),
    phoneNumber: text('phone_number'),
    phoneVerified: boolean('phone_verified').notNull().default(false),
    mfaMethod: mfaMethod('mfa_method'),
    status: userStatus('status').notNull().default('active'),
    isPlatformAdmin: boolean('is_platform_admin').notNull().default(false),
    avatarUrl: text('avatar_url'),
    lastLoginAt: ts('last_login_at'),
    passwordChangedAt: ts('password_changed_at'),
    /** Consecutive failed password logins, and the lockout they caused (docs/decisions.md "Limits"). */
    failedLoginCount: bigint('failed_login_count', { mode: 'number' }).notNull().default(0),
    lockedUntil: ts('locked_until'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('users_email_lower_idx').on(sql`lower(${t.email})`)],
);

/**
 * A session is one sign-in: a refresh-token family. The access token's `sid` names it; revoking it
 * stops its access tokens on the next request. `token_hash` is the SHA-256 of the current refresh
 * token; earlier tokens of the family live in session_refresh_tokens for reuse detection.
 */
export const sessions = pgTable(
  'sessions',
  {
    id: idColumn(),
    userId: uuid('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    tokenHash: varchar('token_hash', { length: 64 }).notNull(),
    ipAddress: varchar('ip_address', { length: 45 }),
    userAgent: text('user_agent'),
    mfa: boolean('mfa').notNull().default(false),
    /** Idle expiry: moves forward on every refresh, never past absolute_expires_at. */
    expiresAt: ts('expires_at').notNull(),
    absoluteExpiresAt: ts('absolute_expires_at').notNull(),
    lastUsedAt: ts('last_used_at').notNull().defaultNow(),
    revokedAt: ts('revoked_at'),
    revokedReason: varchar('revoked_reason', { length: 50 }),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('sessions_token_hash_idx').on(t.tokenHash), index('sessions_user_idx').on(t.userId)],
);

/** Refresh tokens already rotated out of a family: presenting one again is reuse (or a race). */
export const sessionRefreshTokens = pgTable(
  'session_refresh_tokens',
  {
    tokenHash: varchar('token_hash', { length: 64 }).primaryKey(),
    sessionId: uuid('session_id')
      .notNull()
      .references(() => sessions.id, { onDelete: 'cascade' }),
    rotatedAt: ts('rotated_at').notNull(),
  },
  (t) => [index('session_refresh_tokens_session_idx').on(t.sessionId)],
);
