/**
 * The event bus runs subscribers inside the publisher's transaction (an outbox): what a subscriber
 * writes commits or rolls back with the change that caused it, and side effects wait for the commit
 * (tx.afterCommit). Also: an audit entry never keeps a detail that looks like a secret.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { writeAudit } from '../../src/modules/audit/service.js';
import type { KeelEvent } from '../../src/events.js';

interface AuditRow extends Record<string, unknown> {
  action: string;
  target_id: string | null;
  details: Record<string, unknown> | null;
}

describe.skipIf(!backendAvailable())(`event bus and audit writer (${backend})`, () => {
  let app: TestApp;
  const unsubscribe: (() => void)[] = [];

  const auditRows = (targetId: string) =>
    app.server.keel.database.query<AuditRow>('select action, target_id, details from audit_logs where target_id = $1', [targetId]);

  /** Subscribes a handler that records the event in the audit log with the publisher's transaction. */
  function auditingSubscriber(seen: KeelEvent[] = []): KeelEvent[] {
    unsubscribe.push(
      app.server.keel.events.subscribe('webhook.test', async (tx, event) => {
        seen.push(event);
        const marker = String((event.data as Record<string, unknown>).marker);
        await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.event', target: { type: 'event', id: marker }, details: { eventId: event.id } });
      }),
    );
    return seen;
  }

  const marker = () => `m-${randomBytes(6).toString('hex')}`;

  beforeAll(async () => {
    app = await startTestApp();
  });
  afterEach(() => {
    for (const off of unsubscribe.splice(0)) off();
  });
  afterAll(async () => app?.close());

  it('commits a subscriber’s write with the publisher’s transaction', async () => {
    const seen = auditingSubscriber();
    const m = marker();
    const { events, db } = app.server.keel;
    const event = await transaction(db, async (tx) => events.publish(tx, 'webhook.test', null, { marker: m }));
    expect(seen.map((e) => e.id)).toEqual([event.id]);
    expect(event).toMatchObject({ type: 'webhook.test', orgId: null, data: { marker: m } });
    expect(new Date(event.timestamp).toString()).not.toBe('Invalid Date');
    const rows = await auditRows(m);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ action: 'test.event', details: { eventId: event.id } });
  });

  it('rolls a subscriber’s write back when the publisher’s transaction throws', async () => {
    const seen = auditingSubscriber();
    const m = marker();
    const { events, db } = app.server.keel;
    await expect(
      transaction(db, async (tx) => {
        await events.publish(tx, 'webhook.test', null, { marker: m });
        throw new Error('the change failed after publishing');
      }),
    ).rejects.toThrow('the change failed after publishing');
    expect(seen).toHaveLength(1);
    expect(await auditRows(m)).toHaveLength(0);
  });

  it('rolls back the publisher’s change when a subscriber throws', async () => {
    const m = marker();
    const { events, db } = app.server.keel;
    unsubscribe.push(
      events.subscribe('*', () => Promise.reject(new Error('subscriber failed'))),
    );
    await expect(
      transaction(db, async (tx) => {
        await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.change', target: { type: 'event', id: m } });
        await events.publish(tx, 'webhook.test', null, { marker: m });
      }),
    ).rejects.toThrow('subscriber failed');
    expect(await auditRows(m)).toHaveLength(0);
  });

  it('delivers to subscribers of the type and of "*", and not after unsubscribing', async () => {
    const { events, db } = app.server.keel;
    const calls: string[] = [];
    const offTyped = events.subscribe('webhook.test', () => {
      calls.push('typed');
      return Promise.resolve();
    });
    unsubscribe.push(
      events.subscribe('*', () => {
        calls.push('any');
        return Promise.resolve();
      }),
    );
    await transaction(db, async (tx) => {
      await events.publish(tx, 'webhook.test', null, {});
      await events.publish(tx, 'device.online', null, { deviceId: 'd-1', hostname: 'h-1' });
    });
    expect(calls).toEqual(['typed', 'any', 'any']);
    offTyped();
    calls.length = 0;
    await transaction(db, async (tx) => events.publish(tx, 'webhook.test', null, {}));
    expect(calls).toEqual(['any']);
  });

  it('runs afterCommit callbacks only once the transaction has committed', async () => {
    const m = marker();
    const { events, db } = app.server.keel;
    const order: string[] = [];
    let visibleAfterCommit: number | null = null;
    unsubscribe.push(
      events.subscribe('webhook.test', async (tx, event) => {
        await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.event', target: { type: 'event', id: String((event.data as Record<string, unknown>).marker) } });
        tx.afterCommit(async () => {
          order.push('subscriber afterCommit');
          // Read outside the transaction: the row is already committed.
          visibleAfterCommit = (await auditRows(m)).length;
        });
      }),
    );
    const result = await transaction(db, async (tx) => {
      tx.afterCommit(() => {
        order.push('publisher afterCommit');
      });
      await events.publish(tx, 'webhook.test', null, { marker: m });
      order.push('work done');
      return 'result';
    });
    expect(result).toBe('result');
    expect(order).toEqual(['work done', 'publisher afterCommit', 'subscriber afterCommit']);
    expect(visibleAfterCommit).toBe(1);
  });

  it('never runs afterCommit callbacks of a rolled-back transaction', async () => {
    const { events, db } = app.server.keel;
    const ran: string[] = [];
    unsubscribe.push(
      events.subscribe('webhook.test', (tx) => {
        tx.afterCommit(() => {
          ran.push('subscriber');
        });
        return Promise.resolve();
      }),
    );
    await expect(
      transaction(db, async (tx) => {
        tx.afterCommit(() => {
          ran.push('publisher');
        });
        await events.publish(tx, 'webhook.test', null, {});
        throw new Error('rollback');
      }),
    ).rejects.toThrow('rollback');
    expect(ran).toEqual([]);
  });

  it('reports a failing afterCommit callback without undoing the commit or skipping the others', async () => {
    const m = marker();
    const { db } = app.server.keel;
    const errors: unknown[] = [];
    const ran: string[] = [];
    const result = await transaction(
      db,
      async (tx) => {
        await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.change', target: { type: 'event', id: m } });
        tx.afterCommit(() => {
          throw new Error('side effect failed');
        });
        tx.afterCommit(() => {
          ran.push('second');
        });
        return 42;
      },
      (err) => errors.push(err),
    );
    expect(result).toBe(42);
    expect(ran).toEqual(['second']);
    expect(errors).toHaveLength(1);
    expect((errors[0] as Error).message).toBe('side effect failed');
    expect(await auditRows(m)).toHaveLength(1);
  });

  it('drops audit detail keys that look like secrets and keeps the rest', async () => {
    const m = marker();
    await writeAudit(
      app.server.keel.db,
      { actor: { type: 'user', id: null, email: 'someone@example.com' }, ip: '10.1.2.3', userAgent: 'test-agent', requestId: 'req-1' },
      {
        action: 'test.details',
        target: { type: 'event', id: m },
        changes: ['name', 'password'],
        details: {
          password: 'hunter2-hunter2',
          newPassword: 'n3w-pa55word',
          token: 'tok_123',
          refreshToken: 'rt_456',
          apiKey: 'key_789',
          secret: 's3cr3t',
          clientSecret: 'cs_abc',
          code: '123456',
          recoveryCodes: ['aaaa-bbbb'],
          passwordHash: '$argon2id$...',
          otp: '654321',
          status: 'active',
          count: 3,
          reason: 'admin request',
        },
      },
    );
    const rows = await auditRows(m);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.details).toEqual({ status: 'active', count: 3, reason: 'admin request' });
    const stored = JSON.stringify(rows[0]);
    for (const secret of ['hunter2', 'n3w-pa55word', 'tok_123', 'rt_456', 'key_789', 's3cr3t', 'cs_abc', '123456', 'aaaa-bbbb', '654321']) {
      expect(stored).not.toContain(secret);
    }
  });
});
