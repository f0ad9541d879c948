import { X509Certificate } from 'node:crypto';
import { and, count, eq, isNull } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { rawQuery } from '../../platform/db/raw.js';
import { transaction } from '../../platform/db/transaction.js';
import { notFound } from '../../platform/http/errors.js';
import { OutboundError, vetHost, vetTarget } from '../../platform/outbound.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { oldestUnsentMs } from './entries.js';
import { siemError } from './errors.js';
import { auditStreams } from './schema.js';
import { sealStreamSecret } from './secrets.js';
import { parseSyslogUrl } from './syslog.js';

/**
 * Audit streams of a partner or of the platform (docs/decisions.md "Audit streaming"): who may reach
 * them is the routes' guard; here, a stream is found only under its own owner (a partner's id, or
 * null for the platform), so another tenant's id answers 404.
 */

/** Streams per owner (a partner, or the platform). */
export const STREAM_LIMIT = 5;

export type StreamType = 'syslog' | 'https';

export interface StreamInput {
  type: StreamType;
  url: string;
  tls?: { ca?: string | null | undefined } | null | undefined;
  secret?: string | null | undefined;
}

export interface StreamPatch {
  type?: StreamType | undefined;
  url?: string | undefined;
  tls?: StreamInput['tls'];
  secret?: string | null | undefined;
}

export interface StreamView {
  id: string;
  partnerId: string | null;
  type: StreamType;
  url: string;
  tls: { ca: string | null };
  hasSecret: boolean;
  status: 'pending' | 'ok' | 'failing';
  lagSeconds: number;
  lastError: string | null;
  lastSentAt: string | null;
  createdAt: string;
  updatedAt: string;
}

type Row = typeof auditStreams.$inferSelect;

const ownerIs = (partnerId: string | null) => (partnerId === null ? isNull(auditStreams.partnerId) : eq(auditStreams.partnerId, partnerId));

/** Seconds since the oldest unsent entry of the stream's scope was written; 0 when caught up. */
export async function streamLagSeconds(keel: Keel, streamId: string, partnerId: string | null): Promise<number> {
  const oldest = await oldestUnsentMs(keel.db, streamId, partnerId);
  return oldest === null ? 0 : Math.max(0, Math.floor((clock.nowMs() - oldest) / 1000));
}

async function view(keel: Keel, r: Row): Promise<StreamView> {
  return {
    id: r.id,
    partnerId: r.partnerId,
    type: r.type,
    url: r.url,
    tls: { ca: r.tlsCa },
    hasSecret: r.secretSealed !== null,
    status: r.status,
    lagSeconds: await streamLagSeconds(keel, r.id, r.partnerId),
    lastError: r.lastError,
    lastSentAt: r.lastSentAt?.toISOString() ?? null,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
  };
}

const urlError = (message: string) => siemError('invalid_stream_url', { message: `Invalid audit stream URL: ${message}`, details: { fields: [{ path: 'url', message }] } });

/** The URL fits the type and passes the outbound guard now (it is checked again at every send). */
async function checkUrl(keel: Keel, type: StreamType, url: string): Promise<void> {
  try {
    if (type === 'syslog') {
      const target = parseSyslogUrl(url);
      if (typeof target === 'string') throw urlError(target);
      if (!target.tls && !keel.outbound.allowInsecure) throw urlError('plain syslog:// is refused here: use syslog+tls://');
      await vetHost(target.host, keel.outbound);
      return;
    }
    const parsed = URL.canParse(url) ? new URL(url) : null;
    if (parsed && (parsed.username !== '' || parsed.password !== '')) throw urlError('must not carry credentials (user:password@)');
    await vetTarget(url, keel.outbound);
  } catch (err) {
    if (err instanceof OutboundError) throw urlError(err.message);
    throw err;
  }
}

function checkCa(ca: string | null | undefined): void {
  if (ca === null || ca === undefined) return;
  try {
    if (!ca.includes('-----BEGIN CERTIFICATE-----')) throw new Error('not PEM');
    new X509Certificate(ca);
  } catch {
    throw siemError('invalid_stream_tls', { details: { fields: [{ path: 'tls.ca', message: 'not a PEM certificate' }] } });
  }
}

function checkSecret(type: StreamType, secret: string | null | undefined): void {
  const ok = type === 'https' ? typeof secret === 'string' && secret.length >= 16 && secret.length <= 256 : secret === null || secret === undefined;
  if (!ok) throw siemError('stream_secret_invalid', { details: { fields: [{ path: 'secret', message: type === 'https' ? 'required, 16 to 256 characters' : 'a syslog stream takes no secret' }] } });
}

async function find(keel: Keel, partnerId: string | null, id: string): Promise<Row> {
  const [row] = await keel.db.select().from(auditStreams).where(and(eq(auditStreams.id, id), ownerIs(partnerId)));
  if (!row) throw notFound('Audit stream');
  return row;
}

const audit = (partnerId: string | null, action: string, id: string, extra: { changes?: string[]; details?: Record<string, unknown> } = {}) => ({
  action,
  partnerId,
  target: { type: 'audit_stream', id },
  ...extra,
});

export async function listStreams(keel: Keel, partnerId: string | null): Promise<StreamView[]> {
  const rows = await keel.db.select().from(auditStreams).where(ownerIs(partnerId)).orderBy(auditStreams.createdAt, auditStreams.id);
  return Promise.all(rows.map((r) => view(keel, r)));
}

export async function getStream(keel: Keel, partnerId: string | null, id: string): Promise<StreamView> {
  return view(keel, await find(keel, partnerId, id));
}

export async function createStream(keel: Keel, partnerId: string | null, input: StreamInput, info: AuditRequestInfo): Promise<StreamView> {
  await checkUrl(keel, input.type, input.url);
  checkCa(input.tls?.ca);
  checkSecret(input.type, input.secret);
  const id = newId();
  const row = await transaction(keel.db, async (tx) => {
    // The owner's streams, counted under the lock of the partner's row (the platform's: unlocked, a soft limit).
    if (partnerId) await rawQuery(tx.db, 'select 1 from partners where id = $1::uuid for update', [partnerId]);
    const [{ n } = { n: 0 }] = await tx.db.select({ n: count() }).from(auditStreams).where(ownerIs(partnerId));
    if (n >= STREAM_LIMIT) throw siemError('audit_stream_limit_reached');
    const [created] = await tx.db
      .insert(auditStreams)
      .values({
        id,
        partnerId,
        type: input.type,
        url: input.url,
        tlsCa: input.tls?.ca ?? null,
        secretSealed: input.secret ? sealStreamSecret(keel, id, input.secret) : null,
      })
      .returning();
    await writeAudit(tx.db, info, audit(partnerId, 'audit_stream.create', id, { details: { type: input.type } }));
    return created as Row;
  });
  return view(keel, row);
}

export async function updateStream(keel: Keel, partnerId: string | null, id: string, patch: StreamPatch, info: AuditRequestInfo): Promise<StreamView> {
  const current = await find(keel, partnerId, id);
  const type = patch.type ?? current.type;
  const url = patch.url ?? current.url;
  if (patch.type !== undefined || patch.url !== undefined) await checkUrl(keel, type, url);
  if (patch.tls !== undefined) checkCa(patch.tls?.ca);
  // A type change or a new secret is checked against the type the stream will have.
  const secretGiven = patch.secret !== undefined;
  if (secretGiven) checkSecret(type, patch.secret);
  else if (patch.type !== undefined && patch.type !== current.type) checkSecret(type, type === 'https' ? null : undefined);
  const changes = (['type', 'url', 'tls', 'secret'] as const).filter((k) => patch[k] !== undefined);
  const set: Partial<typeof auditStreams.$inferInsert> = {
    type,
    url,
    updatedAt: clock.now(),
    // A changed destination is tried at once, its health unknown until then; the cursor stays.
    status: 'pending',
    lastError: null,
    failures: 0,
    nextAttemptAt: null,
  };
  if (patch.tls !== undefined) set.tlsCa = patch.tls?.ca ?? null;
  if (secretGiven) set.secretSealed = patch.secret ? sealStreamSecret(keel, id, patch.secret) : null;
  else if (type === 'syslog') set.secretSealed = null;
  const row = await transaction(keel.db, async (tx) => {
    const [updated] = await tx.db.update(auditStreams).set(set).where(and(eq(auditStreams.id, id), ownerIs(partnerId))).returning();
    if (!updated) throw notFound('Audit stream');
    await writeAudit(tx.db, info, audit(partnerId, 'audit_stream.update', id, { changes }));
    return updated;
  });
  return view(keel, row);
}

export async function deleteStream(keel: Keel, partnerId: string | null, id: string, info: AuditRequestInfo): Promise<void> {
  await transaction(keel.db, async (tx) => {
    const gone = await tx.db.delete(auditStreams).where(and(eq(auditStreams.id, id), ownerIs(partnerId))).returning({ id: auditStreams.id });
    if (gone.length === 0) throw notFound('Audit stream');
    await writeAudit(tx.db, info, audit(partnerId, 'audit_stream.delete', id));
  });
}
