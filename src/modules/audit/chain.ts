import { createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import type { Db } from '../../platform/db/client.js';
import type { Logger } from '../../platform/logger.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { rawQuery } from '../../platform/db/raw.js';

/**
 * The audit log's hash chains (docs/decisions.md "Audit: hash chain, checkpoints, security events").
 *
 * Every entry is a link of its scope's chain: its organisation's; else (a partner-level entry) its
 * partner's; else the platform's. The database links it as it is inserted (the `audit_logs_link`
 * trigger of drizzle/0017_audit_chain.sql, in the inserting statement, under the row lock of the
 * scope's head in `audit_chain_heads`, so writers on several processes append one after the other):
 * `chain_seq` = the head's position + 1, `prev_hash` = the head's hash, and
 *
 *   hash = hex(SHA-256(UTF-8 of the text of `jsonb_build_array('keel-audit-v1', prev_hash, chain_seq,
 *          id, created_at in microseconds since 1970 UTC, actor_type, actor_id, actor_email,
 *          partner_id, org_id, action, target_type, target_id, changes, details, result, ip_address,
 *          user_agent, request_id)`))
 *
 * as PostgreSQL writes that jsonb value as text (`audit_entry_hash`): elements separated by `, `,
 * object keys in jsonb's order (shorter keys first, then bytewise), SQL null as `null`. The first link's
 * `prev_hash` is 64 zeros; after retention, the chain starts at the head's `start_seq` with
 * `start_prev_hash`.
 */

/** The platform's chain (entries with neither organisation nor partner) is kept under the zero uuid. */
export const PLATFORM_CHAIN = '00000000-0000-0000-0000-000000000000';

export type ChainKind = 'organization' | 'partner' | 'platform';

/** Why a chain is broken, at the first entry where it shows. */
export type BreakReason =
  /** The entry's content no longer gives its hash: edited. */
  | 'hash_mismatch'
  /** Entries before this one are gone (its position skips some): deleted. */
  | 'entries_missing'
  /** This entry does not follow the one before it (a position taken twice, or a link that names another entry): inserted. */
  | 'unexpected_entry'
  /** The chain's head names later entries than the log holds: deleted from the end (`id`: the last entry left, null when none). */
  | 'entries_missing_at_end'
  /** A signed checkpoint names another hash at this position: the chain was rewritten from here. */
  | 'checkpoint_mismatch';

export interface VerifyResult {
  ok: boolean;
  checked: number;
  firstBroken?: { id: string | null; reason: BreakReason };
}

interface HeadRow {
  seq: string | number;
  hash: string;
  start_seq: string | number;
  start_prev_hash: string;
}

interface LinkRow {
  id: string;
  chain_seq: string | number;
  prev_hash: string;
  hash: string;
  computed: string;
}

/**
 * Walks one chain from where it starts to its head (read first: entries appended meanwhile are
 * checked against the head read again at the end), in pages of `batch` entries, and reports the first
 * broken link. Every hash is recomputed by the database with the function that made it.
 */
export async function verifyChain(db: Db, scopeId: string, batch = 1000): Promise<VerifyResult> {
  const [head] = await rawQuery<HeadRow>(db, 'select seq, hash, start_seq, start_prev_hash from audit_chain_heads where scope_id = $1', [scopeId]);
  if (!head) {
    const [any] = await rawQuery<{ id: string }>(db, 'select id from audit_logs where audit_scope_id(org_id, partner_id) = $1 order by chain_seq, id limit 1', [scopeId]);
    return any ? { ok: false, checked: 0, firstBroken: { id: any.id, reason: 'unexpected_entry' } } : { ok: true, checked: 0 };
  }
  const headSeq = Number(head.seq);
  const checkpoints = new Map(
    (await rawQuery<{ seq: string | number; hash: string }>(db, 'select seq, hash from audit_checkpoints where scope_id = $1 and seq >= $2', [scopeId, head.start_seq])).map((c) => [Number(c.seq), c.hash]),
  );
  let expectedSeq = Number(head.start_seq);
  let expectedPrev = head.start_prev_hash;
  let checked = 0;
  let lastId: string | null = null;
  let after: { seq: number; id: string } = { seq: -1, id: PLATFORM_CHAIN };
  const broken = (id: string | null, reason: BreakReason): VerifyResult => ({ ok: false, checked, firstBroken: { id, reason } });
  for (;;) {
    const rows = await rawQuery<LinkRow>(
      db,
      `select id, chain_seq, prev_hash, hash, audit_entry_hash(prev_hash, chain_seq, a) as computed
         from audit_logs a
        where audit_scope_id(org_id, partner_id) = $1 and chain_seq <= $2 and (chain_seq, id) > ($3, $4::uuid)
        order by chain_seq, id limit ${batch}`,
      [scopeId, headSeq, after.seq, after.id],
    );
    for (const r of rows) {
      const seq = Number(r.chain_seq);
      if (r.computed !== r.hash) return broken(r.id, 'hash_mismatch');
      if (seq > expectedSeq) return broken(r.id, 'entries_missing');
      if (seq < expectedSeq || r.prev_hash !== expectedPrev) return broken(r.id, 'unexpected_entry');
      const anchored = checkpoints.get(seq);
      if (anchored !== undefined && anchored !== r.hash) return broken(r.id, 'checkpoint_mismatch');
      checked++;
      expectedSeq = seq + 1;
      expectedPrev = r.hash;
      lastId = r.id;
    }
    const last = rows[rows.length - 1];
    if (!last || rows.length < batch) break;
    after = { seq: Number(last.chain_seq), id: last.id };
  }
  if (expectedSeq - 1 < headSeq || (headSeq >= Number(head.start_seq) && expectedPrev !== head.hash)) return broken(lastId, 'entries_missing_at_end');
  // Entries past the head read at the start: appended since, or put there by hand (past the head read now).
  const [now] = await rawQuery<{ seq: string | number }>(db, 'select seq from audit_chain_heads where scope_id = $1', [scopeId]);
  const [beyond] = await rawQuery<{ id: string }>(
    db,
    'select id from audit_logs where audit_scope_id(org_id, partner_id) = $1 and chain_seq > $2 order by chain_seq, id limit 1',
    [scopeId, now?.seq ?? headSeq],
  );
  if (beyond) return broken(beyond.id, 'unexpected_entry');
  return { ok: true, checked };
}

/** Every chain the database knows (for `keel audit verify` without options). */
export async function chainScopes(db: Db): Promise<{ scopeId: string; kind: ChainKind }[]> {
  const rows = await rawQuery<{ scope_id: string; scope_kind: ChainKind }>(db, 'select scope_id, scope_kind from audit_chain_heads order by scope_kind, scope_id', []);
  return rows.map((r) => ({ scopeId: r.scope_id, kind: r.scope_kind }));
}

// ---- Checkpoints -------------------------------------------------------------------------------

const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

export interface CheckpointSigner {
  /** The Ed25519 public key, base64 of its raw 32 bytes. */
  publicKey: string;
  sign(text: string): string;
}

/** The signer of AUDIT_CHECKPOINT_KEY (base64 of a 32-byte Ed25519 seed). */
export function checkpointSigner(seedBase64: string): CheckpointSigner {
  const key: KeyObject = createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, Buffer.from(seedBase64, 'base64')]), format: 'der', type: 'pkcs8' });
  const publicKey = createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
  return { publicKey, sign: (text) => sign(null, Buffer.from(text, 'utf8'), key).toString('base64') };
}

export interface Checkpoint {
  id: string;
  createdAt: Date;
  scopeId: string;
  scopeKind: ChainKind;
  seq: number;
  hash: string;
  publicKey: string;
  signature: string;
}

/** The text a checkpoint's signature covers (UTF-8): one field a line. */
export function checkpointText(c: Pick<Checkpoint, 'createdAt' | 'scopeId' | 'scopeKind' | 'seq' | 'hash'>): string {
  return ['keel-audit-checkpoint-v1', c.scopeKind, c.scopeId, String(c.seq), c.hash, c.createdAt.toISOString()].join('\n');
}

/** Whether a checkpoint's signature is good for its public key. */
export function checkpointSignatureValid(c: Checkpoint): boolean {
  try {
    const key = createPublicKey({ key: Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(c.publicKey, 'base64')]), format: 'der', type: 'spki' });
    return verify(null, Buffer.from(checkpointText(c), 'utf8'), key, Buffer.from(c.signature, 'base64'));
  } catch {
    return false;
  }
}

/** A checkpoint a day: the job runs hourly and writes when the newest checkpoint is this old. */
export const CHECKPOINT_EVERY_MS = 24 * 3600_000;

/**
 * Signs the head of every chain that moved since its last checkpoint, when the newest checkpoint is
 * at least `CHECKPOINT_EVERY_MS` old (or `force`). Answers how many were written.
 */
export async function writeCheckpoints(db: Db, signer: CheckpointSigner, opts: { force?: boolean } = {}): Promise<number> {
  const now = clock.now();
  if (!opts.force) {
    const [latest] = await rawQuery<{ at: string | Date | null }>(db, 'select max(created_at) as at from audit_checkpoints', []);
    if (latest?.at && now.getTime() - new Date(latest.at).getTime() < CHECKPOINT_EVERY_MS) return 0;
  }
  const heads = await rawQuery<{ scope_id: string; scope_kind: ChainKind; seq: string | number; hash: string }>(
    db,
    `select h.scope_id, h.scope_kind, h.seq, h.hash from audit_chain_heads h
      where h.seq > 0 and not exists (select 1 from audit_checkpoints c where c.scope_id = h.scope_id and c.seq = h.seq and c.hash = h.hash)`,
    [],
  );
  for (const h of heads) {
    const c = { createdAt: now, scopeId: h.scope_id, scopeKind: h.scope_kind, seq: Number(h.seq), hash: h.hash };
    await rawQuery(
      db,
      'insert into audit_checkpoints (id, created_at, scope_id, scope_kind, seq, hash, public_key, signature) values ($1, $2::timestamptz, $3, $4, $5, $6, $7, $8)',
      [newId(), now.toISOString(), c.scopeId, c.scopeKind, c.seq, c.hash, signer.publicKey, signer.sign(checkpointText(c))],
    );
  }
  return heads.length;
}

/** The job's run: no key, no checkpoint (said once in the log). */
export function checkpointJob(db: Db, key: string | undefined, log: Logger): () => Promise<number> {
  const signer = key ? checkpointSigner(key) : null;
  let said = false;
  return async () => {
    if (!signer) {
      if (!said) log.info('audit: AUDIT_CHECKPOINT_KEY is not set: no signed checkpoints of the audit chains are written');
      said = true;
      return 0;
    }
    return writeCheckpoints(db, signer);
  };
}

export async function listCheckpoints(db: Db): Promise<Checkpoint[]> {
  const rows = await rawQuery<{ id: string; created_at: string | Date; scope_id: string; scope_kind: ChainKind; seq: string | number; hash: string; public_key: string; signature: string }>(
    db,
    'select id, created_at, scope_id, scope_kind, seq, hash, public_key, signature from audit_checkpoints order by created_at, scope_kind, scope_id',
    [],
  );
  return rows.map((r) => ({ id: r.id, createdAt: new Date(r.created_at), scopeId: r.scope_id, scopeKind: r.scope_kind, seq: Number(r.seq), hash: r.hash, publicKey: r.public_key, signature: r.signature }));
}

// ---- Retention ---------------------------------------------------------------------------------

/**
 * Deletes, per chain, the entries before the first one made at or after `before`, so only the oldest
 * go and no chain gets a hole, and records on the head where the chain now starts (`start_seq`, and
 * the `prev_hash` of its new first entry, or the head's hash when none is left). One statement: the
 * heads it moves are locked against appends meanwhile. Answers how many entries were deleted.
 */
export async function pruneAuditLog(db: Db, before: Date): Promise<number> {
  const rows = await rawQuery<{ n: string | number }>(
    db,
    `with cut as (
       select h.scope_id, coalesce(
         (select min(a.chain_seq) from audit_logs a where audit_scope_id(a.org_id, a.partner_id) = h.scope_id and a.created_at >= $1::timestamptz),
         h.seq + 1) as seq
       from audit_chain_heads h
     ), moved as (
       update audit_chain_heads h
          set start_seq = cut.seq,
              start_prev_hash = coalesce(
                (select a.prev_hash from audit_logs a where audit_scope_id(a.org_id, a.partner_id) = h.scope_id and a.chain_seq = cut.seq order by a.id limit 1),
                h.hash)
         from cut
        where cut.scope_id = h.scope_id and cut.seq > h.start_seq
       returning h.scope_id, cut.seq
     ), gone as (
       delete from audit_logs a using moved
        where audit_scope_id(a.org_id, a.partner_id) = moved.scope_id and a.chain_seq < moved.seq
       returning 1
     )
     select count(*) as n from gone`,
    [before.toISOString()],
  );
  return Number(rows[0]?.n ?? 0);
}
