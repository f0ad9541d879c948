import type { Db } from '../../platform/db/client.js';
import { auditLogs } from './schema.js';
import { clock } from '../../platform/clock.js';

export interface AuditActor {
  type: 'user' | 'api_key' | 'system' | 'anonymous';
  id?: string | null;
  email?: string | null;
}

/** Who did it and from where; routes build it from the request (see http/audit-context). */
export interface AuditRequestInfo {
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

/**
 * Appends one audit entry with the caller's executor (a transaction, so the entry commits with the
 * change it records). Detail keys that look like secrets are dropped: an audit entry never holds one.
 */
export async function writeAudit(db: Db, info: AuditRequestInfo, entry: AuditEntry): Promise<void> {
  const details = entry.details
    ? Object.fromEntries(Object.entries(entry.details).filter(([k]) => !SECRETISH.test(k)))
    : null;
  await db.insert(auditLogs).values({
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
  });
}
