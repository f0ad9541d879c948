import { and, desc, eq, gte, lt, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { placementFilter, restricted, type AccessContext } from '../access/scope.js';
import { webhookDeliveries, webhookPayloads } from './schema.js';
import { eventPlacement, visibleWebhook, type DevicePlacement } from './service.js';

/**
 * A receiver's view of one webhook (docs/decisions.md "Webhook throttling and stats"): its deliveries
 * of the last 24 hours by hour, counted by state, and the latency of their latest attempts (p50, p95).
 * One query over the (webhook_id, created_at) index, reading at most STATS_ROW_CAP of the newest
 * deliveries (`capped` says when there were more); a caller restricted to some sites or device groups
 * counts only the deliveries it may list.
 */

export const STATS_HOURS = 24;
export const STATS_ROW_CAP = 100_000;
const HOUR_MS = 3_600_000;

export interface HourStats {
  /** The hour's start (ISO 8601, UTC). */
  hour: string;
  delivered: number;
  failed: number;
  retrying: number;
  pending: number;
  /** Latency of the latest attempt of the hour's deliveries that had one: median and 95th percentile, ms; null without attempts. */
  p50Ms: number | null;
  p95Ms: number | null;
}

export interface WebhookActivity {
  window: '24h';
  from: string;
  to: string;
  capped: boolean;
  totals: { delivered: number; failed: number; retrying: number; pending: number };
  hours: HourStats[];
}

export async function webhookActivity(keel: Keel, access: AccessContext, id: string, ofDevice: DevicePlacement): Promise<WebhookActivity> {
  await visibleWebhook(keel.db, access, id);
  const now = clock.nowMs();
  const lastHour = Math.floor(now / HOUR_MS) * HOUR_MS;
  const from = lastHour - (STATS_HOURS - 1) * HOUR_MS;
  const d = webhookDeliveries;
  const where = and(
    eq(d.webhookId, id),
    gte(d.createdAt, new Date(from)),
    lt(d.createdAt, new Date(now + 1)),
    restricted(access) ? placementFilter(access, eventPlacement(sql`${webhookPayloads.body}`, ofDevice)) : undefined,
  );
  const base = keel.db.select({ createdAt: d.createdAt, status: d.status, ms: d.responseTimeMs }).from(d);
  const recent = (restricted(access) ? base.innerJoin(webhookPayloads, eq(webhookPayloads.id, d.payloadId)) : base)
    .where(where)
    .orderBy(desc(d.createdAt))
    .limit(STATS_ROW_CAP)
    .as('recent');
  const hourOf = sql`date_trunc('hour', ${recent.createdAt} at time zone 'UTC')`;
  const rows = await keel.db
    .select({
      hour: sql<string>`to_char(${hourOf}, 'YYYY-MM-DD"T"HH24:00:00.000"Z"')`,
      n: sql<number>`count(*)::int`,
      delivered: sql<number>`(count(*) filter (where ${recent.status} = 'delivered'))::int`,
      failed: sql<number>`(count(*) filter (where ${recent.status} = 'failed'))::int`,
      retrying: sql<number>`(count(*) filter (where ${recent.status} = 'retrying'))::int`,
      pending: sql<number>`(count(*) filter (where ${recent.status} = 'pending'))::int`,
      p50: sql<unknown>`percentile_disc(0.5) within group (order by ${recent.ms})`,
      p95: sql<unknown>`percentile_disc(0.95) within group (order by ${recent.ms})`,
    })
    .from(recent)
    .groupBy(hourOf);
  const byHour = new Map(rows.map((r) => [r.hour, r]));
  const totals = { delivered: 0, failed: 0, retrying: 0, pending: 0 };
  let seen = 0;
  const hours: HourStats[] = [];
  for (let i = 0; i < STATS_HOURS; i++) {
    const hour = new Date(from + i * HOUR_MS).toISOString();
    const r = byHour.get(hour);
    seen += r?.n ?? 0;
    const h: HourStats = {
      hour,
      delivered: r?.delivered ?? 0,
      failed: r?.failed ?? 0,
      retrying: r?.retrying ?? 0,
      pending: r?.pending ?? 0,
      p50Ms: r?.p50 == null ? null : Number(r.p50),
      p95Ms: r?.p95 == null ? null : Number(r.p95),
    };
    for (const k of ['delivered', 'failed', 'retrying', 'pending'] as const) totals[k] += h[k];
    hours.push(h);
  }
  return { window: '24h', from: new Date(from).toISOString(), to: new Date(now).toISOString(), capped: seen >= STATS_ROW_CAP, totals, hours };
}
