import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { prepared, rawQuery, tableWriter, type SqlPart } from '../../platform/db/raw.js';
import { auditLogs } from './schema.js';
import type { RequestRef } from '../../platform/request-scope.js';

export interface AuditActor {
  type: 'user' | 'api_key' | 'system' | 'anonymous' | 'scim_token';
  id?: string | null;
  email?: string | null;
}

/**
 * Who did it and from where; routes build it from the request (see http/audit-context). It is also
 * the request a service's log lines name (`requestLog(keel.log, info)`, platform/request-scope.ts):
 * `traceparent` is for those lines only, never stored.
 */
export interface AuditRequestInfo extends RequestRef {
  actor: AuditActor;
  ip?: string | null;
  userAgent?: string | null;
  requestId?: string | null;
}

export interface AuditEntry {
  action: string;
  partnerId?: string | null;
  orgId?: string | null;
  target?: { type: string; id: string } | null;
  /** Names of the changed fields, never their values. */
  changes?: string[];
  /** Non-secret context (type, status, counts). */
  details?: Record<string, unknown>;
  result?: 'success' | 'failure';
}

const SECRETISH = /pass|secret|token|code|key|hash|otp/i;

const writer = tableWriter(auditLogs);

/**
 * The audit entry as one `INSERT` with parameters numbered from `first`, so a statement that makes a
 * change can record it in the same round trip (a login's session, last-login stamp and entry are one
 * statement). Detail keys that look like secrets are dropped: an audit entry never holds one.
 */
export function auditInsert(info: AuditRequestInfo, entry: AuditEntry, first = 1): SqlPart {
  const details = entry.details
    ? Object.fromEntries(Object.entries(entry.details).filter(([k]) => !SECRETISH.test(k)))
    : null;
  return writer.insert(
    {
      id: newId(),
      createdAt: clock.now(),
      actorType: info.actor.type,
      actorId: info.actor.id ?? null,
      actorEmail: info.actor.email ?? null,
      partnerId: entry.partnerId ?? null,
      orgId: entry.orgId ?? null,
      action: entry.action,
      targetType: entry.target?.type ?? null,
      targetId: entry.target?.id ?? null,
      changes: entry.changes ?? null,
      details,
      result: entry.result ?? 'success',
      ipAddress: info.ip ?? null,
      userAgent: info.userAgent?.slice(0, 1000) ?? null,
      requestId: info.requestId ?? null,
      // Linked by the database (the `audit_logs_link` trigger), whatever is given here.
      chainSeq: 0,
      prevHash: '',
      hash: '',
    },
    first,
  );
}

/**
 * Appends one audit entry with the caller's executor (a transaction, so the entry commits with the
 * change it records).
 */
export async function writeAudit(db: Db, info: AuditRequestInfo, entry: AuditEntry): Promise<void> {
  const { text, params } = auditInsert(info, entry);
  await rawQuery(db, prepared('audit_insert', text), params);
}
