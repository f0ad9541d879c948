/**
 * The single-use store (platform/single-use.ts) on this project's backend: hashed tokens, sealed
 * secrets, exactly-once consumption, expiry on the shared clock, replacement and attempt counting.
 * These are tables a client cannot see, so the test reads them directly.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { clock } from '../../src/platform/clock.js';
import { newId } from '../../src/platform/db/columns.js';
import type { SingleUseStore } from '../../src/platform/single-use.js';
import type { Db } from '../../src/platform/db/client.js';

interface StoredRow extends Record<string, unknown> {
  id: string;
  purpose: string;
  token_hash: string;
  subject_id: string | null;
  data: unknown;
  sealed: string | null;
  attempts: number;
}

describe.skipIf(!backendAvailable())(`single-use store (${backend})`, () => {
  let app: TestApp;
  let store: SingleUseStore;
  let db: Db;

  const rowsOf = (id: string) => app.server.keel.database.query<StoredRow>('select * from single_use_records where id = $1', [id]);

  beforeAll(async () => {
    app = await startTestApp();
    store = app.server.keel.singleUse;
    db = app.server.keel.db;
  });
  afterAll(async () => app?.close());
  afterEach(() => clock.reset());

  it('keeps only a hash of the token and the secret sealed; the first consume gets it, the second nothing', async () => {
    const secret = 'JBSWY3DPEHPK3PXP-totp-secret-payload';
    const { token, id, expiresAt } = await store.create(db, {
      purpose: 'test.setup',
      ttlMs: 60_000,
      data: { step: 1, label: 'phone' },
      secret,
    });
    expect(token.length).toBeGreaterThanOrEqual(20);
    expect(expiresAt.getTime()).toBeGreaterThan(Date.now());

    const [row] = await rowsOf(id);
    expect(row).toBeDefined();
    const stored = JSON.stringify(row);
    expect(stored).not.toContain(token);
    expect(row!.token_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(row!.sealed).toBeTruthy();
    expect(stored).not.toContain(secret);
    expect(row!.sealed).not.toContain(Buffer.from(secret).toString('base64'));
    expect(row!.sealed).not.toContain(Buffer.from(secret).toString('base64url'));
    expect(row!.sealed).not.toContain(Buffer.from(secret).toString('hex'));

    const first = await store.consume(db, 'test.setup', token);
    expect(first).toMatchObject({ id, purpose: 'test.setup', secret, data: { step: 1, label: 'phone' }, attempts: 0 });
    expect(await store.consume(db, 'test.setup', token)).toBeNull();
    expect(await rowsOf(id)).toHaveLength(0);
  });

  it('finds a token only under its own purpose', async () => {
    const { token } = await store.create(db, { purpose: 'test.a', ttlMs: 60_000 });
    expect(await store.consume(db, 'test.b', token)).toBeNull();
    expect(await store.consume(db, 'test.a', token)).not.toBeNull();
  });

  it('never returns an expired record (time moved on the shared clock)', async () => {
    clock.freeze(); // the margin below is a second: real time must not move it
    const live = await store.create(db, { purpose: 'test.expiry', ttlMs: 5 * 60_000 });
    const expired = await store.create(db, { purpose: 'test.expiry', ttlMs: 5 * 60_000, secret: 'x-secret' });
    clock.advance(5 * 60_000 - 1_000);
    expect(await store.consume(db, 'test.expiry', live.token)).not.toBeNull();
    clock.advance(1_001);
    expect(await store.peek(db, 'test.expiry', expired.token)).toBeNull();
    expect(await store.consume(db, 'test.expiry', expired.token)).toBeNull();
    expect(await store.consumeById(db, expired.id)).toBeNull();
    expect(await store.recordAttempt(db, expired.id)).toBeNull();
    // The sweep removes it for good.
    expect(await store.sweep(db)).toBeGreaterThanOrEqual(1);
    expect(await rowsOf(expired.id)).toHaveLength(0);
  });

  it('replaceForSubject drops the subject’s older record of that purpose, and only that one', async () => {
    const subjectId = newId();
    const old = await store.create(db, { purpose: 'test.reset', ttlMs: 60_000, subjectId });
    const otherPurpose = await store.create(db, { purpose: 'test.invite', ttlMs: 60_000, subjectId });
    const otherSubject = await store.create(db, { purpose: 'test.reset', ttlMs: 60_000, subjectId: newId() });
    const fresh = await store.create(db, { purpose: 'test.reset', ttlMs: 60_000, subjectId, replaceForSubject: true });

    expect(await store.consume(db, 'test.reset', old.token)).toBeNull();
    expect((await store.findForSubject(db, 'test.reset', subjectId))?.id).toBe(fresh.id);
    expect(await store.consume(db, 'test.reset', fresh.token)).not.toBeNull();
    expect(await store.consume(db, 'test.invite', otherPurpose.token)).not.toBeNull();
    expect(await store.consume(db, 'test.reset', otherSubject.token)).not.toBeNull();
  });

  it('recordAttempt counts tries and never deletes; null once the record is gone', async () => {
    const { id, token } = await store.create(db, { purpose: 'test.code', ttlMs: 60_000, token: '123456', subjectId: newId() });
    expect(token).toBe('123456');
    expect(await store.recordAttempt(db, id)).toBe(1);
    expect(await store.recordAttempt(db, id)).toBe(2);
    expect((await store.peek(db, 'test.code', token))?.attempts).toBe(2);
    expect(await store.recordAttempt(db, id)).toBe(3);
    expect(await rowsOf(id)).toHaveLength(1);
    expect(await store.consumeById(db, id)).not.toBeNull();
    expect(await store.recordAttempt(db, id)).toBeNull();
  });

  it('putBack returns a consumed record as it was: same id, secret, data, attempts and expiry', async () => {
    const { id, token } = await store.create(db, { purpose: 'test.hold', ttlMs: 60_000, subjectId: newId(), data: { n: 1 }, secret: 'held-secret' });
    await store.recordAttempt(db, id);
    const taken = await store.consume(db, 'test.hold', token);
    expect(await store.consume(db, 'test.hold', token)).toBeNull();
    await store.putBack(db, token, taken!);
    const again = await store.consume(db, 'test.hold', token);
    expect(again).toEqual(taken);
    expect(again).toMatchObject({ id, secret: 'held-secret', data: { n: 1 }, attempts: 1 });
  });

  it('gives a token to exactly one of 20 parallel consumers', async () => {
    for (let round = 0; round < 3; round++) {
      const { token } = await store.create(db, { purpose: 'test.race', ttlMs: 60_000, secret: `race-${round}` });
      const results = await Promise.all(Array.from({ length: 20 }, () => store.consume(db, 'test.race', token)));
      const winners = results.filter((r) => r !== null);
      expect(winners).toHaveLength(1);
      expect(winners[0]!.secret).toBe(`race-${round}`);
    }
  });

  it('gives a record to exactly one of 20 parallel consumeById calls', async () => {
    const subjectId = newId();
    const { id } = await store.create(db, { purpose: 'test.race-id', ttlMs: 60_000, subjectId });
    const results = await Promise.all(Array.from({ length: 20 }, () => store.consumeById(db, id)));
    expect(results.filter((r) => r !== null)).toHaveLength(1);
  });
});
