import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { rawQuery } from '../../platform/db/raw.js';
import { transaction } from '../../platform/db/transaction.js';
import { writeAudit, type AuditEntry, type AuditRequestInfo } from './service.js';

/**
 * Failed and refused security events (failed sign-ins, lockouts, rate-limit refusals, refused
 * cross-tenant attempts: docs/decisions.md "Audit: hash chain, checkpoints, security events"), bounded
 * under a flood. Each event counts in its bucket (scope, action, source address, minute, in
 * `audit_event_buckets`): the first of a bucket is written to the log at once, with its details; the
 * others of that minute only count, and once the minute is over `flushSecurityEvents` writes one entry
 * with the bucket's total (`details.count`, `details.aggregated: true`). A flood from one address
 * thus writes two entries per action and scope a minute, whatever its size.
 */

export const MINUTE_MS = 60_000;

export interface SecurityEvent extends AuditEntry {
  action: string;
}

/** Records one failed or refused event (result `failure`); the source is the request's address. */
export async function recordSecurityEvent(db: Db, info: AuditRequestInfo, event: SecurityEvent): Promise<void> {
  const now = clock.nowMs();
  const minute = new Date(now - (now % MINUTE_MS)).toISOString();
  const source = (info.ip ?? 'unknown').slice(0, 64);
  const [bucket] = await rawQuery<{ count: number | string }>(
    db,
    `insert into audit_event_buckets as b (scope_id, action, source, minute, org_id, partner_id, count, first_at, last_at)
     values (audit_scope_id($1::uuid, $2::uuid), $3, $4, $5::timestamptz, $1::uuid, $2::uuid, 1, $6::timestamptz, $6::timestamptz)
     on conflict (scope_id, action, source, minute) do update set count = b.count + 1, last_at = excluded.last_at
     returning count`,
    [event.orgId ?? null, event.partnerId ?? null, event.action, source, minute, new Date(now).toISOString()],
  );
  if (bucket && Number(bucket.count) === 1) {
    await writeAudit(db, info, { ...event, result: 'failure', details: { ...event.details, count: 1 } });
  }
}

/**
 * Writes one entry for each bucket of a minute now over that counted more than its first event
 * (`details.count`: every event of the minute, the first included) and drops the minute's buckets, in
 * one transaction. Answers how many entries were written.
 */
export async function flushSecurityEvents(db: Db): Promise<number> {
  const now = clock.nowMs();
  const current = new Date(now - (now % MINUTE_MS)).toISOString();
  return transaction(db, async (tx) => {
    const rows = await rawQuery<{ action: string; source: string; minute: string | Date; org_id: string | null; partner_id: string | null; count: number | string; first_at: string | Date; last_at: string | Date }>(
      tx.db,
      'delete from audit_event_buckets where minute < $1::timestamptz returning action, source, minute, org_id, partner_id, count, first_at, last_at',
      [current],
    );
    let written = 0;
    for (const r of rows) {
      if (Number(r.count) <= 1) continue;
      await writeAudit(tx.db, { actor: { type: 'anonymous' }, ip: r.source === 'unknown' ? null : r.source }, {
        action: r.action,
        orgId: r.org_id,
        partnerId: r.partner_id,
        result: 'failure',
        details: {
          count: Number(r.count),
          aggregated: true,
          minute: new Date(r.minute).toISOString(),
          firstAt: new Date(r.first_at).toISOString(),
          lastAt: new Date(r.last_at).toISOString(),
        },
      });
      written++;
    }
    return written;
  });
}
