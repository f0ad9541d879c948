import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/client.js';
import { newId } from '../../platform/db/columns.js';
import { rawQuery } from '../../platform/db/raw.js';
import { OutboundError, outboundRequest, type OutboundPolicy } from '../../platform/outbound.js';
import { deliveryHeaders } from '../webhooks/signing.js';
import { cursorsAfter, entryJson, nextBatch, type StreamEntry } from './entries.js';
import { octetCounted, parseSyslogUrl, sendSyslog, syslogHostname, syslogMessage } from './syslog.js';
import { openStreamSecret } from './secrets.js';

/**
 * The sender of audit streams (docs/decisions.md "Audit streaming"), run by the worker role of every
 * process. A process claims a due stream like a webhook delivery row (`claim_id` and a lease, FOR
 * UPDATE SKIP LOCKED), so one sender at a time holds a stream across processes; it sends batches in
 * order and moves the stream's cursor after each batch the receiver took, in a statement fenced by
 * its claim (a sender whose lease ran out writes nothing). A failed batch leaves the cursor where it
 * was and the stream waits `backoffMs(failures)` before the next try: at least once, in order,
 * across restarts of Keel (the cursor is in the database) and of the receiver (the batch is sent again).
 */

export const BATCH = 100;
/** A held stream's lease: longer than a batch's deadline, renewed with every batch. */
export const LEASE_MS = 60_000;
export const SEND_TIMEOUT_MS = 15_000;
/** Batches one claim sends at most before the stream goes back for any process to take. */
const BATCHES_PER_CLAIM = 20;
const BACKOFF_MAX_MS = 60_000;

/** 1 s, 2 s, 4 s … up to a minute between tries of a failing stream. */
export const backoffMs = (failures: number): number => Math.min(BACKOFF_MAX_MS, 1000 * 2 ** Math.min(failures, 16));

export interface ClaimedStream {
  id: string;
  partnerId: string | null;
  type: 'syslog' | 'https';
  url: string;
  tlsCa: string | null;
  secretSealed: string | null;
  failures: number;
  claimId: string;
}

/** Claims up to `limit` streams that no live lease holds and whose next try is due. */
export async function claimStreams(db: Db, limit: number, nowMs: number): Promise<ClaimedStream[]> {
  const claimId = newId();
  const now = new Date(nowMs).toISOString();
  const rows = await rawQuery<{ id: string; partner_id: string | null; type: 'syslog' | 'https'; url: string; tls_ca: string | null; secret_sealed: string | null; failures: number }>(
    db,
    `update audit_streams s set claim_id = $1::uuid, lease_expires_at = $2::timestamptz
      where s.id in (
        select id from audit_streams
         where (lease_expires_at is null or lease_expires_at <= $3::timestamptz)
           and (next_attempt_at is null or next_attempt_at <= $3::timestamptz)
         order by next_attempt_at nulls first, id
         limit $4
         for update skip locked)
      returning s.id, s.partner_id, s.type, s.url, s.tls_ca, s.secret_sealed, s.failures`,
    [claimId, new Date(nowMs + LEASE_MS).toISOString(), now, limit],
  );
  return rows.map((r) => ({ id: r.id, partnerId: r.partner_id, type: r.type, url: r.url, tlsCa: r.tls_ca, secretSealed: r.secret_sealed, failures: r.failures, claimId }));
}

/**
 * Moves the stream's cursors after a batch the receiver took (never back) and marks it healthy, renewing
 * the lease; only while the claim still holds it. Answers whether it did.
 */
export async function advanceCursor(db: Db, s: ClaimedStream, cursors: ReadonlyMap<string, number>, nowMs: number): Promise<boolean> {
  const rows = await rawQuery<{ id: string }>(
    db,
    `with held as (
       update audit_streams set status = 'ok', last_error = null, failures = 0, next_attempt_at = null,
              last_sent_at = $3::timestamptz, lease_expires_at = $4::timestamptz
        where id = $1::uuid and claim_id = $2::uuid
       returning id
     ), moved as (
       insert into audit_stream_cursors (stream_id, scope_id, seq)
       select held.id, c.scope_id, c.seq from held, unnest($5::uuid[], $6::bigint[]) as c(scope_id, seq)
       on conflict (stream_id, scope_id) do update set seq = greatest(audit_stream_cursors.seq, excluded.seq)
       returning 1
     )
     select id from held`,
    [s.id, s.claimId, new Date(nowMs).toISOString(), new Date(nowMs + LEASE_MS).toISOString(), [...cursors.keys()], [...cursors.values()]],
  );
  return rows.length > 0;
}

/** A failed batch: the cursor stays, the stream says why and waits its backoff; the claim is let go. */
export async function streamFailed(db: Db, s: ClaimedStream, error: string, nowMs: number): Promise<void> {
  await rawQuery(
    db,
    `update audit_streams set status = 'failing', last_error = $3, failures = failures + 1, next_attempt_at = $4::timestamptz,
            claim_id = null, lease_expires_at = null
      where id = $1::uuid and claim_id = $2::uuid`,
    [s.id, s.claimId, error.slice(0, 500), new Date(nowMs + backoffMs(s.failures)).toISOString()],
  );
}

/** Caught up (or its share of batches sent): healthy, the claim let go. */
async function streamReleased(db: Db, s: ClaimedStream, caughtUp: boolean): Promise<void> {
  await rawQuery(
    db,
    `update audit_streams set claim_id = null, lease_expires_at = null${caughtUp ? ", status = 'ok', last_error = null, failures = 0" : ''}
      where id = $1::uuid and claim_id = $2::uuid`,
    [s.id, s.claimId],
  );
}

/** What a receiver may see of an error: the guard's or the network's words, never a secret. */
function describe(err: unknown): string {
  if (err instanceof OutboundError) return `${err.code}: ${err.message}`;
  if (err instanceof Error) return err.message;
  return String(err);
}

/** The outbound policy of a stream: Keel's, with the stream's own CA beside the system's when it has one. */
function policyFor(keel: Keel, ca: string | null, cache: Map<string, OutboundPolicy>): OutboundPolicy {
  if (!ca) return keel.outbound;
  let p = cache.get(ca);
  if (!p) {
    p = { ...keel.outbound, ca };
    cache.set(ca, p);
  }
  return p;
}

/** Sends one batch to the stream's receiver; throws when the receiver did not take it whole. */
export async function sendBatch(keel: Keel, s: ClaimedStream, batch: readonly StreamEntry[], policies: Map<string, OutboundPolicy>): Promise<void> {
  if (s.type === 'syslog') {
    const target = parseSyslogUrl(s.url);
    if (typeof target === 'string') throw new Error(`invalid syslog URL: ${target}`);
    const hostname = syslogHostname(new URL(keel.config.publicUrl).hostname);
    await sendSyslog(target, batch.map((e) => octetCounted(syslogMessage(e, hostname))), { policy: keel.outbound, ca: s.tlsCa, timeoutMs: SEND_TIMEOUT_MS });
    return;
  }
  const secret = openStreamSecret(keel, s.id, s.secretSealed);
  const batchId = newId();
  const body = `{"streamId":${JSON.stringify(s.id)},"batchId":${JSON.stringify(batchId)},"entries":[${batch.map(entryJson).join(',')}]}`;
  const headers = deliveryHeaders({ deliveryId: batchId, eventId: batchId, eventType: 'audit.entries', body, secrets: secret ? [secret] : [], nowMs: clock.nowMs(), custom: [] });
  const res = await outboundRequest(s.url, { method: 'POST', headers, body, timeoutMs: SEND_TIMEOUT_MS, maxResponseBytes: 4096, truncate: true }, policyFor(keel, s.tlsCa, policies));
  if (res.status < 200 || res.status > 299) throw new Error(`the receiver answered ${res.status}`);
}

/**
 * One round of the sender: claims due streams and, for each, sends batches until it is caught up
 * (or has sent its share), moving the cursor after each; a failure stops that stream until its backoff.
 */
export async function sendRound(keel: Keel, policies: Map<string, OutboundPolicy>): Promise<number> {
  const streams = await claimStreams(keel.db, 4, clock.nowMs());
  let sent = 0;
  for (const s of streams) {
    // Whether this process still holds the stream (a failure, a release or a lost lease ends it).
    let held = true;
    try {
      for (let i = 0; held; i++) {
        const batch = await nextBatch(keel.db, s.id, s.partnerId, BATCH);
        if (batch.length === 0) {
          await streamReleased(keel.db, s, true);
          held = false;
          break;
        }
        try {
          await sendBatch(keel, s, batch, policies);
        } catch (err) {
          held = false;
          await streamFailed(keel.db, s, describe(err), clock.nowMs());
          keel.log.warn({ streamId: s.id, reason: describe(err) }, 'audit stream: a batch was not delivered (tried again after a backoff)');
          break;
        }
        held = await advanceCursor(keel.db, s, cursorsAfter(batch), clock.nowMs());
        if (held) sent += batch.length;
        if (held && i === BATCHES_PER_CLAIM - 1) {
          await streamReleased(keel.db, s, false);
          held = false;
        }
      }
    } finally {
      if (held) await streamReleased(keel.db, s, false).catch(() => undefined);
    }
  }
  return sent;
}
