import type { Keel } from '../../keel.js';
import type { Tx } from '../../platform/db/transaction.js';
import { rawQuery } from '../../platform/db/raw.js';
import { resolveRole } from '../access/role-cache.js';
import { identityOf } from '../identity/context.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import type { AutoFailed } from './queue.js';
import { eventBody } from './model.js';
import { enqueueDeliveries, webhooksRuntime } from './service.js';

/**
 * What happens when Keel sets a webhook to `failed` by itself (every delivery dead-lettered for 24
 * hours: docs/decisions.md "Retry schedules"): the organisation's other active webhooks get a
 * `webhook.disabled` event (in the transaction that moved it, so it is routed exactly when the move
 * commits), and the people who may fix it get an email once it has committed.
 */
export async function announceAutoFailed(keel: Keel, tx: Tx, moved: readonly AutoFailed[]): Promise<void> {
  for (const hook of moved) {
    const data = { webhookId: hook.id, name: hook.name, deadLettered: hook.streak, failingSince: new Date(hook.since).toISOString() };
    if (hook.orgId) await keel.events.publish(tx, 'webhook.disabled', hook.orgId, data);
    else if (hook.partnerId) await announceToPartner(keel, tx, hook.partnerId, data);
  }
  tx.afterCommit(() => {
    for (const hook of moved) identityOf(keel).deferred.run('webhook_disabled_notice', {}, () => emailAdministrators(keel, hook));
  });
}

/**
 * A partner-wide webhook set to `failed`: its partner's other active partner-wide webhooks get the
 * `webhook.disabled` event (no organisation's: the webhook belongs to none), `orgId` null in its body
 * (docs/decisions.md "Webhook replay and partner-wide webhooks").
 */
async function announceToPartner(keel: Keel, tx: Tx, partnerId: string, data: Record<string, unknown>): Promise<void> {
  const hooks = await rawQuery<{ id: string }>(tx.db, `select id from webhooks where partner_id = $1 and status = 'active'`, [partnerId]);
  if (hooks.length === 0) return;
  const id = newId();
  const type = 'webhook.disabled';
  const body = JSON.stringify(eventBody({ id, type, timestamp: clock.now().toISOString(), orgId: null, data }));
  const webhookIds = hooks.map((h) => h.id);
  const ids = await enqueueDeliveries(tx.db, webhookIds, null, type, id, body, type);
  tx.afterCommit(() => webhooksRuntime(keel).announce(ids, webhookIds));
}

/**
 * The people who may set the webhook active again: active users of the organisation, and of its
 * partner with access to it, whose role grants `webhooks:write` over the whole organisation (a user
 * restricted to some sites or device groups may not write webhooks).
 */
async function webhookAdministrators(keel: Keel, hook: AutoFailed): Promise<{ email: string; name: string }[]> {
  const orgId = hook.orgId;
  // A partner-wide webhook's: the partner's users with access to every organisation of it.
  const rows = await rawQuery<{ email: string; name: string; role_id: string }>(
    keel.db,
    orgId === null
      ? `select u.email, u.name, pu.role_id from partner_users pu join users u on u.id = pu.user_id
          where pu.partner_id = $1 and u.status = 'active' and pu.org_access = 'all'`
      : `select u.email, u.name, ou.role_id from organization_users ou join users u on u.id = ou.user_id
      where ou.org_id = $1 and u.status = 'active' and ou.site_ids is null and ou.device_group_ids is null
     union all
     select u.email, u.name, pu.role_id from organizations o
       join partner_users pu on pu.partner_id = o.partner_id join users u on u.id = pu.user_id
      where o.id = $1 and u.status = 'active' and (pu.org_access = 'all' or (pu.org_access = 'selected' and $1 = any(pu.org_ids)))`,
    [orgId ?? hook.partnerId],
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
  for (const person of await webhookAdministrators(keel, hook)) {
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
