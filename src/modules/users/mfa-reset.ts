import type { Keel } from '../../keel.js';
import { transaction } from '../../platform/db/transaction.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import type { AccessContext } from '../access/scope.js';
import { identityOf } from '../identity/context.js';
import { clearFactors } from '../mfa/service.js';
import { assertCoversUser, targetForChange } from './service.js';

/**
 * `POST /users/:id/mfa/reset`: for a user who lost their authenticator. Clears their TOTP,
 * phone and recovery codes (passkeys too with `{passkeys: true}`), ends every session of theirs, tells
 * them by email and is audited. The route needs `users:write` and a session with a second factor; here:
 * never one's own (403 `self_change_forbidden`), and the caller must hold every permission the user holds
 * (403 `privilege_escalation`). Under Force MFA the user enrols again at the next sign-in (428 until then).
 */
export async function resetUserMfa(keel: Keel, access: AccessContext, id: string, opts: { passkeys: boolean }, info: AuditRequestInfo): Promise<void> {
  const { target, membership } = await targetForChange(keel.db, access, id);
  await transaction(keel.db, async (tx) => {
    await assertCoversUser(tx.db, access, target);
    await clearFactors(keel, tx, id, { passkeys: opts.passkeys });
    await identityOf(keel).sessions.revokeAllForUser(tx.db, id, 'mfa_reset', tx.afterCommit);
    await writeAudit(tx.db, info, {
      action: 'user.mfa.reset',
      partnerId: membership?.kind === 'partner' ? membership.partnerId : access.partnerId,
      orgId: membership?.kind === 'organization' ? membership.orgId : access.orgId,
      target: { type: 'user', id },
      // The audit writer drops detail keys that look like secrets ('pass…'), so the cleared factors are values.
      details: { cleared: ['totp', 'phone', 'recovery_codes', ...(opts.passkeys ? ['passkeys'] : [])] },
    });
  });
  identityOf(keel).deferred.run('mfa_reset_email', info, (log) =>
    keel.mailer.send({
      to: target.email,
      subject: 'Your Keel sign-in factors were reset',
      text: [
        `Hello ${target.name},`,
        '',
        `An administrator reset the multi-factor authentication of your Keel account (${opts.passkeys ? 'authenticator app, phone, recovery codes and passkeys' : 'authenticator app, phone and recovery codes'}), and signed you out everywhere.`,
        'Sign in with your password and enrol a second factor again. If you did not ask for this, contact your administrator at once.',
      ].join('\n'),
    }, log),
  );
}
