import { and, eq, isNull, ne } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery, tableWriter, type SqlPart } from '../../platform/db/raw.js';
import { sessionRefreshTokens, sessions, users } from './schema.js';
import { identityPorts, type FactorName } from './ports.js';

export const REFRESH_IDLE_MS = 7 * 24 * 3600_000;
export const REFRESH_ABSOLUTE_MS = 30 * 24 * 3600_000;
/** A rotated refresh token presented again within this window is a client race, not theft. */
export const REFRESH_GRACE_MS = 10_000;

const SESSION_TOPIC = 'session';
/** Invalidation topic for anything cached about a user (sessions, membership, profile): key = user id. */
export const USER_TOPIC = 'user';
/** Narrower: only the self-profile changed (last login, name, avatar); sessions and memberships stay cached. */
export const PROFILE_TOPIC = 'profile';
const CACHE_MAX = 50_000;

const sessionWriter = tableWriter(sessions);

/** What a request needs to know about its session and user; cached per process. */
export interface LiveSession {
  id: string;
  userId: string;
  email: string;
  isPlatformAdmin: boolean;
  mfa: boolean;
  absoluteExpiresAt: number;
  /** Second factors the user has enrolled now (invalidated with the user on any MFA change). */
  enrolled: FactorName[];
}

export type RotateResult =
  | { kind: 'ok'; sessionId: string; userId: string; mfa: boolean; refreshToken: string }
  | { kind: 'raced' }
  | { kind: 'reused' }
  | { kind: 'invalid' }
  /** The caller's `accept` refused the token's session (a CSRF value of another session): nothing changed. */
  | { kind: 'refused' };

/** The live session whose current refresh token has this hash (a cookie refresh's CSRF value is checked against it). */
const LIVE_SESSION_OF_TOKEN = prepared(
  'session_live_of_token',
  `select id from sessions where token_hash = $1 and revoked_at is null and expires_at > $2::timestamptz and absolute_expires_at > $2::timestamptz`,
);
/**
 * The rotation: the conditional swap of the current hash ($1 → $2) of a live session (only session $5
 * when given) and the old hash's entry in the family's history, in one statement.
 */
const ROTATE = prepared(
  'session_rotate',
  `with s as (
     update sessions set token_hash = $2, last_used_at = $3::timestamptz, expires_at = least($4::timestamptz, absolute_expires_at)
     where token_hash = $1 and revoked_at is null and expires_at > $3::timestamptz and absolute_expires_at > $3::timestamptz
       and ($5::uuid is null or id = $5::uuid)
     returning id, user_id, mfa),
   h as (insert into session_refresh_tokens (token_hash, session_id, rotated_at) select $1, id, $3::timestamptz from s)
   select id, user_id as "userId", mfa from s`,
);

/**
 * Sessions are refresh-token families in PostgreSQL. Live sessions are cached per process; any
 * revocation publishes an invalidation that clears the entry here at once and on every other process
 * (docs/decisions.md "Caches"), so a revoked session's access tokens fail on the very next request.
 */
export class SessionService {
  readonly #cache = new Map<string, LiveSession>();
  /** Bumped on every invalidation: a lookup that raced an invalidation does not fill the cache. */
  #epoch = 0;

  constructor(private readonly keel: Keel) {
    keel.invalidation.on(SESSION_TOPIC, (sid) => {
      this.#epoch++;
      if (sid === '*') this.#cache.clear();
      else this.#cache.delete(sid);
    });
    keel.invalidation.on(USER_TOPIC, (userId) => {
      this.#epoch++;
      if (userId === '*') return; // memberships only: sessions stay valid
      for (const [sid, s] of this.#cache) if (s.userId === userId) this.#cache.delete(sid);
    });
    keel.invalidation.onResync(() => {
      this.#epoch++;
      this.#cache.clear();
    });
  }

  /**
   * Starts a session; returns its id and the refresh token (shown once, stored as a hash). A login
   * passes `loginAudit`, its audit entry: then the session, the user's last-login stamp (failure count
   * cleared) and the entry are one statement, so one round trip (see platform/db/raw.ts).
   */
  async create(
    db: Db,
    input: { userId: string; ip: string | null; userAgent: string | null; mfa: boolean },
    opts: { id?: string; at?: Date; loginAudit?: (first: number) => SqlPart } = {},
  ): Promise<{ sessionId: string; refreshToken: string }> {
    const refreshToken = randomToken(32);
    const sessionId = opts.id ?? newId();
    const now = opts.at ?? clock.now();
    const insert = sessionWriter.insert({
      id: sessionId,
      userId: input.userId,
      tokenHash: sha256Hex(refreshToken),
      ipAddress: input.ip?.slice(0, 45) ?? null,
      userAgent: input.userAgent?.slice(0, 1000) ?? null,
      mfa: input.mfa,
      expiresAt: new Date(now.getTime() + REFRESH_IDLE_MS),
      absoluteExpiresAt: new Date(now.getTime() + REFRESH_ABSOLUTE_MS),
      lastUsedAt: now,
      revokedAt: null,
      revokedReason: null,
      createdAt: now,
    });
    if (!opts.loginAudit) {
      await rawQuery(db, prepared('session_insert', insert.text), insert.params);
    } else {
      const n = insert.params.length;
      const audit = opts.loginAudit(n + 3);
      await rawQuery(
        db,
        prepared('session_login', `with s as (${insert.text}),
          u as (update users set last_login_at = $${n + 1}::timestamptz, failed_login_count = 0, locked_until = null where id = $${n + 2})
          ${audit.text}`),
        [...insert.params, now.toISOString(), input.userId, ...audit.params],
      );
    }
    return { sessionId, refreshToken };
  }

  /**
   * Rotates a refresh token: one conditional UPDATE swaps the family's current hash, so of parallel
   * refreshes of one token exactly one wins. A token already rotated out is a race within the grace
   * window, and reuse after it: the whole family is revoked. `accept`, when given, must approve the
   * token's session before anything changes (the cookie refresh's CSRF value is bound to it): the live
   * session of the token is read first, and the rotation then holds to that session.
   *
   * The swap and the old hash's entry in the family's history are one statement (no BEGIN/COMMIT).
   */
  async rotate(refreshToken: string, accept?: (sessionId: string) => boolean): Promise<RotateResult> {
    const oldHash = sha256Hex(refreshToken);
    const next = randomToken(32);
    const now = clock.now();
    const idleUntil = new Date(now.getTime() + REFRESH_IDLE_MS);
    let won: { id: string; userId: string; mfa: boolean } | undefined;
    let only: string | null = null;
    if (accept) {
      const [live] = await rawQuery<{ id: string }>(this.keel.db, LIVE_SESSION_OF_TOKEN, [oldHash, now.toISOString()]);
      if (live && !accept(live.id)) return { kind: 'refused' };
      only = live?.id ?? null;
    }
    if (!accept || only) {
      [won] = await rawQuery<{ id: string; userId: string; mfa: boolean }>(this.keel.db, ROTATE, [oldHash, sha256Hex(next), now.toISOString(), idleUntil.toISOString(), only]);
    }
    if (won) return { kind: 'ok', sessionId: won.id, userId: won.userId, mfa: won.mfa, refreshToken: next };
    const [old] = await this.keel.db
      .select({ sessionId: sessionRefreshTokens.sessionId, rotatedAt: sessionRefreshTokens.rotatedAt, revokedAt: sessions.revokedAt, expiresAt: sessions.expiresAt, absoluteExpiresAt: sessions.absoluteExpiresAt })
      .from(sessionRefreshTokens)
      .innerJoin(sessions, eq(sessions.id, sessionRefreshTokens.sessionId))
      .where(eq(sessionRefreshTokens.tokenHash, oldHash));
    // A session that is over (logged out, revoked, expired) answers 401 before any race logic.
    if (!old || old.revokedAt !== null || old.expiresAt <= now || old.absoluteExpiresAt <= now) return { kind: 'invalid' };
    if (accept && !accept(old.sessionId)) return { kind: 'refused' };
    if (now.getTime() - old.rotatedAt.getTime() <= REFRESH_GRACE_MS) return { kind: 'raced' };
    await this.revoke(this.keel.db, old.sessionId, 'refresh_token_reuse');
    return { kind: 'reused' };
  }

  /**
   * Marks a live session as proven with a second factor and rotates its refresh token (the old one
   * joins the family's history). Access tokens of the session keep working and now count as MFA.
   */
  async upgradeToMfa(sessionId: string, userId: string): Promise<string | null> {
    const next = randomToken(32);
    const now = clock.now();
    const done = await transaction(this.keel.db, async (tx) => {
      const [old] = await tx.db
        .select({ tokenHash: sessions.tokenHash })
        .from(sessions)
        .where(and(eq(sessions.id, sessionId), eq(sessions.userId, userId), isNull(sessions.revokedAt)))
        .for('update');
      if (!old) return false;
      await tx.db.update(sessions).set({ mfa: true, tokenHash: sha256Hex(next), lastUsedAt: now }).where(eq(sessions.id, sessionId));
      await tx.db.insert(sessionRefreshTokens).values({ tokenHash: old.tokenHash, sessionId, rotatedAt: now });
      return true;
    });
    if (!done) return null;
    await this.keel.invalidation.publish(SESSION_TOPIC, sessionId);
    return next;
  }

  /** Revokes one session. Takes effect on every process when the caller's transaction commits. */
  async revoke(db: Db, sessionId: string, reason: string, afterCommit?: (fn: () => Promise<void>) => void): Promise<boolean> {
    const rows = await db
      .update(sessions)
      .set({ revokedAt: clock.now(), revokedReason: reason })
      .where(and(eq(sessions.id, sessionId), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id });
    const publish = () => this.keel.invalidation.publish(SESSION_TOPIC, sessionId);
    if (afterCommit) afterCommit(publish);
    else await publish();
    return rows.length > 0;
  }

  /**
   * Ends every live session of every user (`keel sessions revoke-all`, after a suspected compromise):
   * every process drops its session cache at once, so each access token answers 401 on its next
   * request and each refresh token is refused. Accounts, factors and API keys stay.
   */
  async revokeEveryone(db: Db, reason: string, afterCommit?: (fn: () => Promise<void>) => void): Promise<number> {
    const rows = await db.update(sessions).set({ revokedAt: clock.now(), revokedReason: reason }).where(isNull(sessions.revokedAt)).returning({ id: sessions.id });
    const publish = () => this.keel.invalidation.publish(SESSION_TOPIC, '*');
    if (afterCommit) afterCommit(publish);
    else await publish();
    return rows.length;
  }

  /** Revokes every session of a user (logout, password change/reset, disable). */
  async revokeAllForUser(db: Db, userId: string, reason: string, afterCommit?: (fn: () => Promise<void>) => void): Promise<number> {
    const rows = await db
      .update(sessions)
      .set({ revokedAt: clock.now(), revokedReason: reason })
      .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id });
    const publish = () => this.keel.invalidation.publish(USER_TOPIC, userId);
    if (afterCommit) afterCommit(publish);
    else await publish();
    return rows.length;
  }

  /**
   * Ends every live session of a user that was not established with a second factor, except `keepSessionId`
   * (the caller's own, upgraded by the enrolment). Run when a user turns MFA on: an older password-only
   * session must not outlive the factor that now guards the account.
   */
  async revokeWithoutMfa(userId: string, keepSessionId: string | null, reason: string): Promise<number> {
    const keep = keepSessionId ? [ne(sessions.id, keepSessionId)] : [];
    const rows = await this.keel.db
      .update(sessions)
      .set({ revokedAt: clock.now(), revokedReason: reason })
      .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt), eq(sessions.mfa, false), ...keep))
      .returning({ id: sessions.id });
    if (rows.length > 0) await this.keel.invalidation.publish(USER_TOPIC, userId);
    return rows.length;
  }

  /** Drops only the cached self-profile of a user everywhere (last login, name, avatar). */
  async profileChanged(userId: string): Promise<void> {
    await this.keel.invalidation.publish(PROFILE_TOPIC, userId);
  }

  /** Drops cached knowledge of a user everywhere (status, admin flag or email changed). */
  async userChanged(userId: string): Promise<void> {
    await this.keel.invalidation.publish(USER_TOPIC, userId);
  }

  /** `lookup` without waiting, from the cache: the session, null once past its absolute expiry, undefined if not cached. */
  cached(sessionId: string): LiveSession | null | undefined {
    const cached = this.#cache.get(sessionId);
    if (!cached) return undefined;
    return cached.absoluteExpiresAt > clock.nowMs() ? cached : null;
  }

  /** The live session for an access token's `sid`, or null when revoked, expired or its user inactive. */
  async lookup(sessionId: string): Promise<LiveSession | null> {
    const cached = this.cached(sessionId);
    if (cached !== undefined) return cached;
    const now = clock.nowMs();
    const epoch = this.#epoch;
    const [row] = await this.keel.db
      .select({ session: sessions, user: users })
      .from(sessions)
      .innerJoin(users, eq(users.id, sessions.userId))
      .where(eq(sessions.id, sessionId));
    if (!row || row.session.revokedAt || row.user.status !== 'active' || row.session.absoluteExpiresAt.getTime() <= now) return null;
    const live: LiveSession = {
      id: row.session.id,
      userId: row.user.id,
      email: row.user.email,
      isPlatformAdmin: row.user.isPlatformAdmin,
      mfa: row.session.mfa,
      absoluteExpiresAt: row.session.absoluteExpiresAt.getTime(),
      enrolled: await identityPorts(this.keel).enrolledMethods(this.keel, row.user),
    };
    if (epoch === this.#epoch) {
      if (this.#cache.size >= CACHE_MAX) {
        const oldest = this.#cache.keys().next().value;
        if (oldest !== undefined) this.#cache.delete(oldest);
      }
      this.#cache.set(sessionId, live);
    }
    return live;
  }
}
