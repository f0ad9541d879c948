/**
 * What a publish costs (docs/decisions.md "Speed: publishing and deliveries"): a test delivery is one
 * statement (its body, its pending row and its audit entry), with no transaction around it, and a
 * failure of any part of it writes nothing.
 */
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { webhookDeliveries } from '../../src/modules/webhooks/schema.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { startReceiver, type Receiver } from './receiver.js';
import { createHook, createWebhookWorld, deliveriesUntil, type WebhookWorld } from './setup.js';

describe.skipIf(!backendAvailable())('the cost of a publish', () => {
  let app: TestApp;
  let w: WebhookWorld;
  let rx: Receiver;

  beforeAll(async () => {
    app = await startTestApp();
    w = await createWebhookWorld(app);
    rx = await startReceiver();
  });
  afterAll(async () => {
    await rx?.close();
    await app?.close();
  });

  it('a test delivery opens no transaction: its row and its audit entry are written by one statement, and it is delivered', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['device.online'] });
    const keel = app.server.keel;
    const spy = vi.spyOn(keel.db, 'transaction');
    try {
      const res = await app.api('POST', `/webhooks/${hook.id}/test`, { token: w.admin });
      expect(res.status).toBe(202);
      expect(spy).not.toHaveBeenCalled();
      const [row] = await keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.id, res.body.delivery.id));
      expect(row).toMatchObject({ webhookId: hook.id, orgId: w.orgId, eventType: 'webhook.test' });
      const audit = await keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'webhook.test'), eq(auditLogs.targetId, hook.id)));
      expect(audit).toHaveLength(1);
      expect(audit[0]).toMatchObject({ orgId: w.orgId, details: { event: 'webhook.test' } });
      await deliveriesUntil(app, w.admin, hook.id, (d) => d.some((x) => x.id === res.body.delivery.id && x.status === 'delivered'));
    } finally {
      spy.mockRestore();
    }
  });

  it('a test delivery whose audit entry cannot be written writes nothing: no row, no body', async () => {
    const hook = await createHook(app, w.admin, { url: rx.url, events: ['device.online'] });
    const keel = app.server.keel;
    const before = await keel.database.query<{ n: number }>('select count(*)::int as n from webhook_payloads');
    await keel.database.query(`create function refuse_test_audit() returns trigger language plpgsql as $$ begin raise exception 'audit refused'; end $$`);
    await keel.database.query(`create trigger refuse_test_audit before insert on audit_logs for each row when (new.action = 'webhook.test') execute function refuse_test_audit()`);
    try {
      const res = await app.api('POST', `/webhooks/${hook.id}/test`, { token: w.admin });
      expect(res.status).toBe(500);
    } finally {
      await keel.database.query('drop trigger refuse_test_audit on audit_logs');
      await keel.database.query('drop function refuse_test_audit()');
    }
    expect(await keel.db.select().from(webhookDeliveries).where(eq(webhookDeliveries.webhookId, hook.id))).toEqual([]);
    expect(await keel.database.query<{ n: number }>('select count(*)::int as n from webhook_payloads')).toEqual(before);
  });
});
