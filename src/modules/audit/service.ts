import type { Db } from '../../platform/db/client.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { rawQuery } from '../../platform/db/raw.js';

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

/** A piece of SQL with its parameters, numbered from the `first` it was built with. */
export interface SqlPart {
  text: string;
  params: unknown[];
}

const COLUMNS = [
  'id', 'created_at', 'actor_type', 'actor_id', 'actor_email', 'partner_id', 'org_id', 'action', 'target_type', 'target_id',
  'changes', 'details', 'result', 'ip_address', 'user_agent', 'request_id',
] as const;
const CASTS: Partial<Record<(typeof COLUMNS)[number], string>> = { created_at: '::timestamptz', changes: '::jsonb', details: '::jsonb' };
const insertTexts = new Map<number, string>();

/**
 * The audit entry as one `INSERT` with parameters numbered from `first`, so a statement that makes a
 * change can record it in the same round trip (a login's session, last-login stamp and entry are one
 * statement). Detail keys that look like secrets are dropped: an audit entry never holds one.
 */
export function auditInsert(info: AuditRequestInfo, entry: AuditEntry, first = 1): SqlPart {
  const details = entry.details
    ? Object.fromEntries(Object.entries(entry.details).filter(([k]) => !SECRETISH.test(k)))
    : null;
  let text = insertTexts.get(first);
  if (!text) {
    const values = COLUMNS.map((c, i) => `$${first + i}${CASTS[c] ?? ''}`);
    text = `insert into audit_logs (${COLUMNS.join(', ')}) values (${values.join(', ')})`;
    insertTexts.set(first, text);
  }
  return {
    text,
    params: [
      newId(),
      clock.now().toISOString(),
      info.actor.type,
      info.actor.id ?? null,
      info.actor.email ?? null,
      entry.partnerId ?? null,
      entry.orgId ?? null,
      entry.action,
      entry.target?.type ?? null,
      entry.target?.id ?? null,
      entry.changes ? JSON.stringify(entry.changes) : null,
      details ? JSON.stringify(details) : null,
      entry.result ?? 'success',
      info.ip ?? null,
      info.userAgent?.slice(0, 1000) ?? null,
      info.requestId ?? null,
    ],
  };
}

/**
 * Appends one audit entry with the caller's executor (a transaction, so the entry commits with the
 * change it records).
 */
export async function writeAudit(db: Db, info: AuditRequestInfo, entry: AuditEntry): Promise<void> {
  const { text, params } = auditInsert(info, entry);
  await rawQuery(db, text, params);
}
