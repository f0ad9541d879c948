import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { prepared, rawQuery } from '../../platform/db/raw.js';

/**
 * Retention of finished deliveries (docs/decisions.md "Webhooks: limits, retention, rotation, test
 * deliveries"): a delivered or failed delivery created more than `WEBHOOK_DELIVERY_RETENTION_DAYS`
 * ago is deleted; pending and retrying ones are kept whatever their age. Then the event payloads no
 * delivery refers to any more (their deliveries swept, or deleted with their webhook) go too: an
 * event's once it is older than `WEBHOOK_EVENT_RETENTION_DAYS` (a replay may send it until then,
 * replay.ts), a test delivery's body an hour after it was made. Both in
 * batches, each its own statement, so the sweep never holds many rows locked; run hourly by the
 * worker role (runtime.ts, the `webhooks.retention` job), and by tests on the controllable clock.
 */

/** Rows one statement deletes at most. */
export const RETENTION_BATCH = 1_000;
/** How often a worker sweeps. */
export const RETENTION_SWEEP_MS = 60 * 60 * 1000;
/** A test body without deliveries is kept this long (a retry or routing in flight never loses its body). */
const ORPHAN_GRACE_MS = 60 * 60 * 1000;

// Per webhook, its oldest finished rows through the (webhook_id, created_at) index.
const deleteFinished = prepared(
  'webhook_deliveries_retention',
  `with old as (
     select x.id from webhooks w cross join lateral (
       select d.id from webhook_deliveries d
        where d.webhook_id = w.id and d.created_at < $1::timestamptz and d.status in ('delivered', 'failed')
        order by d.created_at
        limit $2
     ) x
     limit $2
   )
   delete from webhook_deliveries d using old where d.id = old.id returning d.id`,
);

const deleteOrphans = prepared(
  'webhook_payloads_orphans',
  `with orphan as (
     select p.id from webhook_payloads p
      where (p.created_at < $3::timestamptz or (p.event_type is null and p.created_at < $1::timestamptz))
        and not exists (select 1 from webhook_deliveries d where d.payload_id = p.id)
      limit $2
   )
   delete from webhook_payloads p using orphan where p.id = orphan.id returning p.id`,
);

export interface SweepResult {
  deliveries: number;
  payloads: number;
}

export async function sweepDeliveries(keel: Keel): Promise<SweepResult> {
  const now = clock.nowMs();
  const cutoff = new Date(now - keel.config.WEBHOOK_DELIVERY_RETENTION_DAYS * 24 * 60 * 60 * 1000).toISOString();
  const orphanCutoff = new Date(now - ORPHAN_GRACE_MS).toISOString();
  const eventCutoff = new Date(now - keel.config.WEBHOOK_EVENT_RETENTION_DAYS * 24 * 60 * 60 * 1000).toISOString();
  const result: SweepResult = { deliveries: 0, payloads: 0 };
  for (;;) {
    const rows = await rawQuery(keel.db, deleteFinished, [cutoff, RETENTION_BATCH]);
    result.deliveries += rows.length;
    if (rows.length < RETENTION_BATCH) break;
  }
  for (;;) {
    const rows = await rawQuery(keel.db, deleteOrphans, [orphanCutoff, RETENTION_BATCH, eventCutoff]);
    result.payloads += rows.length;
    if (rows.length < RETENTION_BATCH) break;
  }
  return result;
}
