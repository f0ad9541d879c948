import { and, asc, eq, gt } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { transaction } from '../../platform/db/transaction.js';
import { loggableError } from '../../platform/safe-error.js';
import { intervalJob, type Job } from '../../platform/module.js';
import { scimSettings, scimUsers } from './schema.js';
import { decideRoles } from './groups.js';

/** How often the worker looks for saves whose re-decision is not finished. */
const JOB_EVERY_MS = 2_000;
/** Organisations one run of the job advances (a batch each). */
const ORGS_PER_RUN = 10;

/**
 * One batch of a settings save's re-decision (docs/decisions.md "SCIM at scale"): the next
 * SCIM_REEVALUATION_BATCH managed users of the organisation after the cursor, in id order, decided
 * by `decideRoles` within the saver's permissions now and audited with the saver as actor; then the
 * cursor moves on, or the save is done. The settings row is locked for the batch (`skip locked`: a
 * batch another process is running is left to it). Answers true when more remain.
 */
export async function reevaluateBatch(keel: Keel, orgId: string): Promise<boolean> {
  const size = keel.config.SCIM_REEVALUATION_BATCH;
  return transaction(keel.db, async (tx) => {
    const [s] = await tx.db
      .select()
      .from(scimSettings)
      .where(and(eq(scimSettings.orgId, orgId), eq(scimSettings.reevaluationPending, true)))
      .for('update', { skipLocked: true });
    if (!s) return false;
    const after = s.reevaluationCursor;
    const rows = await tx.db
      .select({ id: scimUsers.userId })
      .from(scimUsers)
      .where(and(eq(scimUsers.orgId, orgId), after ? gt(scimUsers.userId, after) : undefined))
      .orderBy(asc(scimUsers.userId))
      .limit(size);
    const ids = rows.map((r) => r.id);
    await decideRoles(keel, tx, { orgId, grantorId: s.reevaluationBy, info: { actor: { type: 'user', id: s.reevaluationBy } }, source: 'scim_settings' }, ids);
    const done = ids.length < size;
    await tx.db
      .update(scimSettings)
      .set(done ? { reevaluationPending: false, reevaluationCursor: null, reevaluationBy: null } : { reevaluationCursor: ids[ids.length - 1] ?? null })
      .where(eq(scimSettings.orgId, orgId));
    return !done;
  });
}

/** The worker's job: a batch of each organisation whose settings save is still being applied. */
export function reevaluationJob(keel: Keel): Job {
  return intervalJob({
    name: 'scim.reevaluation',
    roles: ['worker'],
    everyMs: JOB_EVERY_MS,
    run: async () => {
      const pending = await keel.db.select({ orgId: scimSettings.orgId }).from(scimSettings).where(eq(scimSettings.reevaluationPending, true)).limit(ORGS_PER_RUN);
      for (const { orgId } of pending) await reevaluateBatch(keel, orgId);
    },
    failed: (err) => keel.log.warn({ error: loggableError(err) }, 'scim: re-deciding roles after a settings save failed (tried again shortly)'),
  });
}
