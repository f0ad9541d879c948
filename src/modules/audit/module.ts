import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { intervalJob, type KeelModule } from '../../platform/module.js';
import { loggableError } from '../../platform/safe-error.js';
import { checkpointJob, pruneAuditLog } from './chain.js';
import { flushSecurityEvents } from './security-events.js';

// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface Audit {}

declare module '../../platform/module.js' {
  interface ModuleHandles {
    audit: Audit;
  }
}

const HOUR_MS = 3600_000;
/** Aggregated security events are written shortly after their minute ends. */
export const SECURITY_FLUSH_MS = 15_000;

/**
 * The audit module's worker jobs (docs/decisions.md "Audit: hash chain, checkpoints, security events"):
 * the daily signed checkpoint of every chain (checked hourly), the retention sweep (hourly, when
 * AUDIT_RETENTION_DAYS is set) and the flush of aggregated security events.
 */
export function installAudit(keel: Keel): KeelModule<Audit> {
  const retentionDays = keel.config.AUDIT_RETENTION_DAYS;
  return {
    handle: {},
    jobs: [
      intervalJob({
        name: 'audit.checkpoint',
        roles: ['worker'],
        everyMs: HOUR_MS,
        run: checkpointJob(keel.db, keel.config.AUDIT_CHECKPOINT_KEY, keel.log),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'audit: checkpoint failed (tried again within the hour)'),
      }),
      intervalJob({
        name: 'audit.retention',
        roles: ['worker'],
        everyMs: HOUR_MS,
        run: async () => (retentionDays > 0 ? pruneAuditLog(keel.db, new Date(clock.nowMs() - retentionDays * 24 * HOUR_MS)) : 0),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'audit: retention sweep failed (tried again within the hour)'),
      }),
      intervalJob({
        name: 'audit.security-events',
        roles: ['worker'],
        everyMs: SECURITY_FLUSH_MS,
        run: () => flushSecurityEvents(keel.db),
        failed: (err) => keel.log.warn({ error: loggableError(err) }, 'audit: writing aggregated security events failed (tried again shortly)'),
      }),
    ],
  };
}
