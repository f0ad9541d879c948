import type { Keel } from '../../keel.js';
import type { Tx } from '../../platform/db/transaction.js';
import { rawQuery } from '../../platform/db/raw.js';
import { resolveRole } from '../access/role-cache.js';
import { identityOf } from '../identity/context.js';
import type { AutoFailed } from './queue.js';

/**
 * What happens when Keel sets a webhook to `failed` by itself (every delivery dead-lettered for 24
 * hours: docs/decisions.md "Retry schedules"): the organisation's other active webhooks get a
 * `webhook.disabled` event (in the transaction that moved it, so it is routed exactly when the move
 * commits), and the people who may fix it get an email once it has committed.
 */
export async function announceAutoFailed(keel: Keel, tx: Tx, moved: readonly AutoFailed[]): Promise<void> {
  for (const hook of moved) {
    await keel.events.publish(tx, 'webhook.disabled', hook.orgId, {
      webhookId: hook.id,
      name: hook.name,
      deadLettered: hook.streak,
      failingSince: new Date(hook.since).toISOString(),
    });
  }
  tx.afterCommit(() => {
    for (const hook of moved) identityOf(keel).deferred.run('webhook_disabled_notice', {}, () => emailAdministrators(keel, hook));
  });
}

/**
 * The people who may set the webhook active again: active users of the organisation, and of its
 * partner with access to it, whose role grants `webhooks:write` over the whole organisation (a user
 * restricted to some sites or device groups may not write webhooks).
 */
async function webhookAdministrators(keel: Keel, orgId: string): Promise<{ email: string; name: string }[]> {
  const rows = await rawQuery<{ email: string; name: string; role_id: string }>(
    keel.db,
    `select u.email, u.name, ou.role_id from organization_users ou join users u on u.id = ou.user_id
      where ou.org_id = $1 and u.status = 'active' and ou.site_ids is null and ou.device_group_ids is null
     union all
     select u.email, u.name, pu.role_id from organizations o
       join partner_users pu on pu.partner_id = o.partner_id join users u on u.id = pu.user_id
      where o.id = $1 and u.status = 'active' and (pu.org_access = 'all' or (pu.org_access = 'selected' and $1 = any(pu.org_ids)))`,
    [orgId],
  );
  const out: { email: string; name: string }[] = [];
  for (const r of rows) {
    const role = await resolveRole(keel, r.role_id);
    if (role?.permissions.has('webhooks', 'write')) out.push({ email: r.email, name: r.name });
  }
  return out;
}

async function emailAdministrators(keel: Keel, hook: AutoFailed): Promise<void> {
  const log = keel.log.child({ webhookId: hook.id, orgId: hook.orgId });
  const link = `${keel.config.publicUrl}/integrations/webhooks/${hook.id}`;
  for (const person of await webhookAdministrators(keel, hook.orgId)) {
    await keel.mailer.send(
      {
        to: person.email,
        subject: `Keel turned off the webhook "${hook.name.slice(0, 120)}"`,
        text: [
          `Hello ${person.name},`,
          '',
          `Every delivery to the webhook "${hook.name}" has failed since ${new Date(hook.since).toISOString()} (${hook.streak} in a row, each after all its retries), so Keel set it to failed: it gets no new events until someone sets it active again.`,
          '',
          `See its delivery history, fix the receiver, and set it active again at ${link}`,
          'The failed deliveries stay in the history and can be retried one by one.',
        ].join('\n'),
      },
      log,
    );
  }
}
