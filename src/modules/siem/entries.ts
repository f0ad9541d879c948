import type { Db } from '../../platform/db/client.js';
import { rawQuery } from '../../platform/db/raw.js';

/**
 * What an audit stream sends, read in the hash chains' order (docs/decisions.md "Audit streaming").
 *
 * A stream's scope is a set of chains (audit/chain.ts): a partner's stream takes the partner's chain and
 * the chain of each of its organisations; the platform's takes every chain. Within a chain, positions
 * are given under the lock of the chain's head, which the inserting transaction holds until it
 * commits, so position n+1 is never visible before position n: a cursor per chain (the last position
 * sent) loses nothing and a stream resumes exactly after it. Across chains a batch interleaves entries
 * by creation time.
 */

export interface StreamEntry {
  id: string;
  createdAt: string;
  chainSeq: number;
  prevHash: string;
  hash: string;
  actorType: string;
  actorId: string | null;
  actorEmail: string | null;
  partnerId: string | null;
  orgId: string | null;
  action: string;
  targetType: string | null;
  targetId: string | null;
  changes: string[] | null;
  details: Record<string, unknown> | null;
  result: string;
  ipAddress: string | null;
  userAgent: string | null;
  requestId: string | null;
  /** The entry's chain (not sent: the cursor's key). */
  scopeId: string;
}

/** The entry as sent: a JSON object with its keys in this fixed order (the chain's scope left out). */
export function entryJson(e: StreamEntry): string {
  return JSON.stringify({
    id: e.id,
    createdAt: e.createdAt,
    chainSeq: e.chainSeq,
    prevHash: e.prevHash,
    hash: e.hash,
    actorType: e.actorType,
    actorId: e.actorId,
    actorEmail: e.actorEmail,
    partnerId: e.partnerId,
    orgId: e.orgId,
    action: e.action,
    targetType: e.targetType,
    targetId: e.targetId,
    changes: e.changes,
    details: e.details,
    result: e.result,
    ipAddress: e.ipAddress,
    userAgent: e.userAgent,
    requestId: e.requestId,
  });
}

/**
 * The chains of the stream's scope with entries not yet sent, each with the position sent so far and
 * the creation time of its next entry. $1: the stream, $2: its partner (null: the platform).
 */
const CHAINS = `
  chains as (
    select h.scope_id, coalesce(c.seq, 0) as sent
      from audit_chain_heads h
      left join audit_stream_cursors c on c.stream_id = $1::uuid and c.scope_id = h.scope_id
     where h.seq > coalesce(c.seq, 0)
       and ($2::uuid is null or h.scope_id = $2::uuid or h.scope_id in (select o.id from organizations o where o.partner_id = $2::uuid))
  ), nexts as (
    select ch.scope_id, ch.sent,
           (select a.created_at from audit_logs a
             where audit_scope_id(a.org_id, a.partner_id) = ch.scope_id and a.chain_seq > ch.sent
             order by a.chain_seq limit 1) as next_at
      from chains ch
  )`;

/** Chains looked at per batch (those whose next entry is oldest). */
const CHAINS_PER_BATCH = 20;

interface EntryRow {
  scope_id: string;
  id: string;
  created_at: string | Date;
  chain_seq: string | number;
  prev_hash: string;
  hash: string;
  actor_type: string;
  actor_id: string | null;
  actor_email: string | null;
  partner_id: string | null;
  org_id: string | null;
  action: string;
  target_type: string | null;
  target_id: string | null;
  changes: string[] | null;
  details: Record<string, unknown> | null;
  result: string;
  ip_address: string | null;
  user_agent: string | null;
  request_id: string | null;
}

const toEntry = (r: EntryRow): StreamEntry => ({
  id: r.id,
  createdAt: new Date(r.created_at).toISOString(),
  chainSeq: Number(r.chain_seq),
  prevHash: r.prev_hash,
  hash: r.hash,
  actorType: r.actor_type,
  actorId: r.actor_id,
  actorEmail: r.actor_email,
  partnerId: r.partner_id,
  orgId: r.org_id,
  action: r.action,
  targetType: r.target_type,
  targetId: r.target_id,
  changes: r.changes,
  details: r.details,
  result: r.result,
  ipAddress: r.ip_address,
  userAgent: r.user_agent,
  requestId: r.request_id,
  scopeId: r.scope_id,
});

/**
 * The next batch of at most `limit` unsent entries: each chain's next entries in position order,
 * merged across chains by creation time (then id). The cursor of a chain may move to the last
 * position of the batch taken from it: a batch holds a prefix of each chain's unsent entries.
 */
export async function nextBatch(db: Db, streamId: string, partnerId: string | null, limit: number): Promise<StreamEntry[]> {
  const rows = await rawQuery<EntryRow>(
    db,
    `with ${CHAINS}, picked as (
       select scope_id, sent from nexts where next_at is not null order by next_at, scope_id limit ${CHAINS_PER_BATCH}
     )
     select p.scope_id, e.id, e.created_at, e.chain_seq, e.prev_hash, e.hash, e.actor_type, e.actor_id, e.actor_email, e.partner_id,
            e.org_id, e.action, e.target_type, e.target_id, e.changes, e.details, e.result, e.ip_address, e.user_agent, e.request_id
       from picked p
       cross join lateral (
         select a.* from audit_logs a
          where audit_scope_id(a.org_id, a.partner_id) = p.scope_id and a.chain_seq > p.sent
          order by a.chain_seq limit $3
       ) e`,
    [streamId, partnerId, limit],
  );
  const queues = new Map<string, StreamEntry[]>();
  for (const r of rows) {
    const e = toEntry(r);
    const q = queues.get(e.scopeId) ?? [];
    q.push(e);
    queues.set(e.scopeId, q);
  }
  for (const q of queues.values()) q.sort((a, b) => a.chainSeq - b.chainSeq);
  const out: StreamEntry[] = [];
  while (out.length < limit) {
    let best: StreamEntry[] | null = null;
    for (const q of queues.values()) {
      const head = q[0];
      const top = best?.[0];
      if (head && (!top || head.createdAt < top.createdAt || (head.createdAt === top.createdAt && head.id < top.id))) best = q;
    }
    const taken = best?.shift();
    if (!taken) break;
    out.push(taken);
  }
  return out;
}

/** The time of the oldest unsent entry of the stream's scope (ms since 1970), null when it is caught up. */
export async function oldestUnsentMs(db: Db, streamId: string, partnerId: string | null): Promise<number | null> {
  const [row] = await rawQuery<{ at: string | Date | null }>(db, `with ${CHAINS} select min(next_at) as at from nexts`, [streamId, partnerId]);
  return row?.at ? new Date(row.at).getTime() : null;
}

/** The last position per chain of a batch: where each chain's cursor moves once it is sent. */
export function cursorsAfter(batch: readonly StreamEntry[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of batch) out.set(e.scopeId, Math.max(out.get(e.scopeId) ?? 0, e.chainSeq));
  return out;
}
