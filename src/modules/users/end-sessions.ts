import type { Keel } from '../../keel.js';
import { transaction } from '../../platform/db/transaction.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { AccessContext } from '../access/scope.js';
import { identityOf } from '../identity/context.js';
import { assertCoversUser, targetForChange } from './service.js';

/**
 * `POST /users/:id/sessions/revoke` (ASVS 7.4.5, docs/decisions.md "Endpoints Keel adds"): an
 * administrator signs a user out everywhere (a stolen laptop, a suspected takeover) without disabling
 * the account. Every session of the user ends at once on every process (their access tokens answer
 * 401 on the next request, their refresh tokens are refused); API keys are not sessions and stay. Needs
 * `users:write` over the user and every permission the user holds; never one's own (sign out instead).
 * Audited with the number of sessions ended.
 */
export async function endUserSessions(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<{ revoked: number }> {
  const { target, membership } = await targetForChange(keel.db, access, id);
  return transaction(keel.db, async (tx) => {
    await assertCoversUser(tx.db, access, target);
    const revoked = await identityOf(keel).sessions.revokeAllForUser(tx.db, id, 'admin_sign_out', tx.afterCommit);
    await writeAudit(tx.db, info, {
      action: 'user.sessions.revoke',
      partnerId: membership?.kind === 'partner' ? membership.partnerId : access.partnerId,
      orgId: membership?.kind === 'organization' ? membership.orgId : access.orgId,
      target: { type: 'user', id },
      details: { revoked },
    });
    return { revoked };
  });
}
