import { and, eq, gt, inArray, lte, sql } from 'drizzle-orm';
import type { Db } from './db/client.js';
import { singleUseRecords } from './db/schema.js';
import { clock } from './clock.js';
import { randomToken, sha256Hex, type Sealer } from './crypto.js';
import type { SealedColumn } from './reseal.js';

const sealedContext = (purpose: string, tokenHash: string) => `single-use:${purpose}:${tokenHash}`;

/** The sealed column of single-use records, for `keel secrets reseal` (platform/reseal.ts). */
export const SINGLE_USE_SEALED: SealedColumn[] = [
  { table: 'single_use_records', column: 'sealed', keys: ['id', 'purpose', 'token_hash'], context: (r) => sealedContext(r.purpose ?? '', r.token_hash ?? '') },
];

const SWEEP_INTERVAL_MS = 60_000;
const SWEEP_BATCH = 1000;

export interface SingleUseRecord {
  id: string;
  purpose: string;
  subjectId: string | null;
  data: Record<string, unknown>;
  /** The unsealed secret payload, when one was stored. */
  secret: string | null;
  attempts: number;
  expiresAt: Date;
  createdAt: Date;
}

export interface CreateOptions {
  purpose: string;
  ttlMs: number;
  subjectId?: string | null;
  /** Non-secret fields, stored as JSON. */
  data?: Record<string, unknown>;
  /** A secret payload (a TOTP secret, PKCE verifier), stored AES-256-GCM sealed. */
  secret?: string;
  /** Use this token instead of a random one (e.g. a short code bound to a subject). */
  token?: string;
  /** Delete the subject's other records of this purpose first (a new link replaces the old). */
  replaceForSubject?: boolean;
}

/**
 * The one store for single-use, short-lived records. Only the SHA-256 of a token is kept; a record
 * is consumed by one `DELETE … RETURNING`, so of any number of parallel callers exactly one gets it,
 * on any instance. Expired records are never returned and are swept in the background.
 */
export class SingleUseStore {
  /** When this process last swept expired records (clock ms); `create` sweeps at most once a minute. */
  #lastSweepMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly sealer: Sealer) {}

  /** Stores a record; returns the token to hand out (shown once, never stored). */
  async create(db: Db, opts: CreateOptions): Promise<{ token: string; id: string; expiresAt: Date }> {
    const token = opts.token ?? randomToken();
    const tokenHash = this.#hash(opts.purpose, token);
    const expiresAt = new Date(clock.nowMs() + opts.ttlMs);
    if (opts.replaceForSubject && opts.subjectId) await this.deleteForSubject(db, opts.purpose, opts.subjectId);
    // Whoever creates records clears out expired ones now and then, so the table holds what is live
    // plus at most about a minute's worth of expired records, in every process, with no timer to run.
    if (clock.nowMs() - this.#lastSweepMs >= SWEEP_INTERVAL_MS) {
      this.#lastSweepMs = clock.nowMs();
      await this.sweep(db);
    }
    const [row] = await db
      .insert(singleUseRecords)
      .values({
        purpose: opts.purpose,
        tokenHash,
        subjectId: opts.subjectId ?? null,
        data: opts.data ?? {},
        sealed: opts.secret === undefined ? null : this.sealer.seal(opts.secret, sealedContext(opts.purpose, tokenHash)),
        expiresAt,
        createdAt: clock.now(),
      })
      .returning({ id: singleUseRecords.id });
    if (!row) throw new Error('single-use insert returned nothing');
    return { token, id: row.id, expiresAt };
  }

  /** Consumes the record for `token` atomically: the first caller gets it, every other gets null. */
  async consume(db: Db, purpose: string, token: string): Promise<SingleUseRecord | null> {
    const tokenHash = this.#hash(purpose, token);
    const rows = await db
      .delete(singleUseRecords)
      .where(and(eq(singleUseRecords.purpose, purpose), eq(singleUseRecords.tokenHash, tokenHash), gt(singleUseRecords.expiresAt, clock.now())))
      .returning();
    return rows[0] ? this.#toRecord(rows[0]) : null;
  }

  /**
   * Puts a record taken by `consume` back as it was (id, token, expiry, attempts, secret), when the
   * use it was taken for failed on the caller's side (a wrong second factor at sign-in). Taking the
   * record before the costly or spending step makes it the one thing parallel requests contend for;
   * putting it back lets the holder try again. A process that dies in between loses the record: the
   * token is then expired, which is the safe side.
   */
  async putBack(db: Db, token: string, record: SingleUseRecord): Promise<void> {
    const tokenHash = this.#hash(record.purpose, token);
    await db
      .insert(singleUseRecords)
      .values({
        id: record.id,
        purpose: record.purpose,
        tokenHash,
        subjectId: record.subjectId,
        data: record.data,
        sealed: record.secret === null ? null : this.sealer.seal(record.secret, sealedContext(record.purpose, tokenHash)),
        attempts: record.attempts,
        expiresAt: record.expiresAt,
        createdAt: record.createdAt,
      })
      .onConflictDoNothing();
  }

  /** Reads without consuming (to check a token before a costly step); never trust it for single use. */
  async peek(db: Db, purpose: string, token: string): Promise<SingleUseRecord | null> {
    const tokenHash = this.#hash(purpose, token);
    const rows = await db
      .select()
      .from(singleUseRecords)
      .where(and(eq(singleUseRecords.purpose, purpose), eq(singleUseRecords.tokenHash, tokenHash), gt(singleUseRecords.expiresAt, clock.now())));
    return rows[0] ? this.#toRecord(rows[0]) : null;
  }

  /** The newest live record of a purpose for a subject (e.g. a pending TOTP setup). */
  async findForSubject(db: Db, purpose: string, subjectId: string): Promise<SingleUseRecord | null> {
    const rows = await db
      .select()
      .from(singleUseRecords)
      .where(and(eq(singleUseRecords.purpose, purpose), eq(singleUseRecords.subjectId, subjectId), gt(singleUseRecords.expiresAt, clock.now())))
      .orderBy(sql`${singleUseRecords.createdAt} desc`)
      .limit(1);
    return rows[0] ? this.#toRecord(rows[0]) : null;
  }

  /** Consumes a subject's record of a purpose by id (the record found by findForSubject), once. */
  async consumeById(db: Db, id: string): Promise<SingleUseRecord | null> {
    const rows = await db
      .delete(singleUseRecords)
      .where(and(eq(singleUseRecords.id, id), gt(singleUseRecords.expiresAt, clock.now())))
      .returning();
    return rows[0] ? this.#toRecord(rows[0]) : null;
  }

  /**
   * Counts one attempt against a record (codes allow a few tries). Returns the attempts made, or null
   * when the record is gone or expired. It never deletes: with parallel checks of one code, a request
   * over the limit must not delete it under requests that counted within the limit and are about to
   * consume it (the caller deletes on its last wrong guess; the sweep removes the rest).
   */
  async recordAttempt(db: Db, id: string): Promise<number | null> {
    const rows = await db
      .update(singleUseRecords)
      .set({ attempts: sql`${singleUseRecords.attempts} + 1` })
      .where(and(eq(singleUseRecords.id, id), gt(singleUseRecords.expiresAt, clock.now())))
      .returning({ attempts: singleUseRecords.attempts });
    return rows[0]?.attempts ?? null;
  }

  /** How many live (unexpired) records of `purpose` a subject holds, counting at most `cap` of them. */
  async countLive(db: Db, purpose: string, subjectId: string, cap: number): Promise<number> {
    const live = db
      .select({ id: singleUseRecords.id })
      .from(singleUseRecords)
      .where(and(eq(singleUseRecords.purpose, purpose), eq(singleUseRecords.subjectId, subjectId), gt(singleUseRecords.expiresAt, clock.now())))
      .limit(cap)
      .as('live');
    const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(live);
    return row?.n ?? 0;
  }

  async deleteForSubject(db: Db, purpose: string, subjectId: string): Promise<void> {
    await db.delete(singleUseRecords).where(and(eq(singleUseRecords.purpose, purpose), eq(singleUseRecords.subjectId, subjectId)));
  }

  /** Removes expired records (at most `SWEEP_BATCH` per call, oldest first); returns how many. */
  async sweep(db: Db): Promise<number> {
    const expired = db
      .select({ id: singleUseRecords.id })
      .from(singleUseRecords)
      .where(lte(singleUseRecords.expiresAt, clock.now()))
      .orderBy(singleUseRecords.expiresAt)
      .limit(SWEEP_BATCH);
    const rows = await db.delete(singleUseRecords).where(inArray(singleUseRecords.id, expired)).returning({ id: singleUseRecords.id });
    return rows.length;
  }

  #hash(purpose: string, token: string): string {
    return sha256Hex(`${purpose}:${token}`);
  }

  #toRecord(row: typeof singleUseRecords.$inferSelect): SingleUseRecord {
    return {
      id: row.id,
      purpose: row.purpose,
      subjectId: row.subjectId,
      data: row.data,
      secret: row.sealed === null ? null : this.sealer.open(row.sealed, sealedContext(row.purpose, row.tokenHash)),
      attempts: row.attempts,
      expiresAt: row.expiresAt,
      createdAt: row.createdAt,
    };
  }
}
