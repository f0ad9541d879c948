import { isNull, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { rowsOf } from '../../platform/db/client.js';
import { METRIC, type CounterHandle, type GaugeHandle } from '../../platform/metrics.js';
import { devices } from './schema.js';
import { statusExpr, type DeviceStatus } from './devices.js';
import type { UpdateReport } from './heartbeat.js';

/**
 * The agents module's metrics (README "Operating"), through the container's port (`keel.metrics`):
 * no-ops unless METRICS_ENABLED.
 *
 * - `keel_agent_heartbeats_total{outcome}`: `ok` (answered), `overloaded` (shed) or `unauthorized` (no, wrong or revoked
 *   device token); counted in memory, no statement per heartbeat.
 * - `keel_agent_update_reports_total{state}`: update reports recorded, by state.
 * - `keel_devices{status}`: enrolled (not decommissioned) devices by the status clients see
 *   (`online`, `offline`, `updating`: silent or stuck devices read `offline` before the timer stores
 *   it), across every process: one grouped query per scrape, never kept up per heartbeat.
 */

export type HeartbeatOutcome = 'ok' | 'unauthorized' | 'overloaded';

export interface AgentMetrics {
  heartbeat(outcome: HeartbeatOutcome): void;
  updateReport(state: UpdateReport['state']): void;
}

const STATUSES: readonly DeviceStatus[] = ['online', 'offline', 'updating'];
// One label object per value, made once (the heartbeat is the hottest route).
const OUTCOME_LABELS: Record<HeartbeatOutcome, { outcome: HeartbeatOutcome }> = { ok: { outcome: 'ok' }, unauthorized: { outcome: 'unauthorized' }, overloaded: { outcome: 'overloaded' } };

const NO_METRICS: AgentMetrics = { heartbeat: () => undefined, updateReport: () => undefined };

/** The module's counters, resolved once per Keel. */
export function agentMetrics(keel: Keel): AgentMetrics {
  if (!keel.metrics.enabled) return NO_METRICS;
  const heartbeats: CounterHandle = keel.metrics.counter(METRIC.agentHeartbeats, 'Agent heartbeats received, by outcome: ok (answered), unauthorized (no, wrong or revoked device token), overloaded (shed with 503 past AGENT_MAX_IN_FLIGHT)', ['outcome']);
  const reports: CounterHandle = keel.metrics.counter(METRIC.agentUpdateReports, 'Agent update reports recorded, by state: started, succeeded, failed, rolled_back', ['state']);
  return {
    heartbeat: (outcome) => heartbeats.inc(OUTCOME_LABELS[outcome]),
    updateReport: (state) => reports.inc({ state }),
  };
}

/** Devices by status, counted by the database: one grouped statement. */
export async function devicesByStatus(keel: Keel, intervalSeconds: number): Promise<Record<DeviceStatus, number>> {
  const result = await keel.db.execute(sql`
    select s.status, count(*)::int as n
    from (select ${statusExpr(intervalSeconds)} as status from ${devices} where ${isNull(devices.decommissionedAt)}) s
    group by s.status`);
  const counts: Record<DeviceStatus, number> = { online: 0, offline: 0, updating: 0 };
  for (const r of rowsOf<{ status: string; n: number | string }>(result)) {
    if ((STATUSES as readonly string[]).includes(r.status)) counts[r.status as DeviceStatus] = Number(r.n);
  }
  return counts;
}

/**
 * Registers the devices-by-status gauge (once per Keel, by context.ts `installAgents`). `beforeCount` runs first:
 * the serving process writes its buffered last-seen stamps, so its own heartbeats are counted. A
 * scrape that arrives while another one's count runs shares that count (one statement at a time).
 */
export function registerDevicesGauge(keel: Keel, beforeCount: () => Promise<void>): void {
  if (!keel.metrics.enabled) return;
  let running: Promise<Record<DeviceStatus, number>> | null = null;
  keel.metrics.gauge(METRIC.devices, 'Enrolled devices by status (online, offline, updating), as clients see them, across every process', ['status'], async (g: GaugeHandle) => {
    running ??= beforeCount()
      .then(() => devicesByStatus(keel, keel.config.AGENT_HEARTBEAT_SECONDS))
      .finally(() => {
        running = null;
      });
    const counts = await running;
    for (const status of STATUSES) g.set({ status }, counts[status]);
  });
}
