import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, login, type Tenant } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { createOrganization } from '../../src/modules/tenancy/service.js';
import { writeAudit } from '../../src/modules/audit/service.js';
import { checkpointJob, checkpointSignatureValid, listCheckpoints, pruneAuditLog, verifyChain, writeCheckpoints, checkpointSigner } from '../../src/modules/audit/chain.js';
import { openDatabase } from '../../src/platform/db/client.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { transaction } from '../../src/platform/db/transaction.js';
import { clock } from '../../src/platform/clock.js';
import { newId } from '../../src/platform/db/columns.js';
import type { Db } from '../../src/platform/db/client.js';

describe.skipIf(!backendAvailable())('audit log: hash chain', () => {
  let app: TestApp;
  let db: Db;
  let tenant: Tenant;
  let adminToken: string;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    db = app.server.keel.db;
    tenant = await createTenant(app);
    adminToken = (await login(app, tenant.orgAdmin)).accessToken;
  });
  afterAll(async () => {
    clock.reset();
    await app?.close();
  });

  /** An organisation of the tenant's partner with `n` entries, and their ids in chain order. */
  async function orgWithEntries(n: number): Promise<{ orgId: string; ids: string[] }> {
    const org = await createOrganization(db, { name: `Chain ${randomBytes(3).toString('hex')}`, partnerId: tenant.partnerId });
    for (let i = 0; i < n; i++) await writeAudit(db, { actor: { type: 'system' } }, { action: 'test.entry', orgId: org.id, partnerId: tenant.partnerId, details: { i } });
    const rows = await rawQuery<{ id: string }>(db, 'select id from audit_logs where org_id = $1 order by chain_seq', [org.id]);
    return { orgId: org.id, ids: rows.map((r) => r.id) };
  }

  it('links every entry of a scope to the one before it, and the route reports the chain whole', async () => {
    const res = await app.api('GET', '/audit-logs?limit=100', { token: adminToken });
    expect(res.status).toBe(200);
    const entries = [...res.body.data].sort((a: { chainSeq: number }, b: { chainSeq: number }) => a.chainSeq - b.chainSeq);
    expect(entries.length).toBeGreaterThan(0);
    entries.forEach((e: { chainSeq: number; prevHash: string; hash: string }, i: number) => {
      expect(e.chainSeq).toBe(i + 1);
      expect(e.hash).toMatch(/^[0-9a-f]{64}$/);
      expect(e.prevHash).toBe(i === 0 ? '0'.repeat(64) : entries[i - 1].hash);
    });
    const verified = await app.api('GET', '/audit-logs/verify', { token: adminToken });
    expect(verified.status).toBe(200);
    expect(verified.body).toEqual({ ok: true, checked: entries.length });
    // Another tenant's chain: not reachable.
    expect((await app.api('GET', `/audit-logs/verify?orgId=${tenant.otherOrgId}`, { token: adminToken })).status).toBe(404);
  });

  it('an entry edited in the database: hash_mismatch at that entry', async () => {
    const { orgId, ids } = await orgWithEntries(4);
    expect(await verifyChain(db, orgId)).toEqual({ ok: true, checked: 4 });
    await rawQuery(db, `update audit_logs set details = '{"i": 99}' where id = $1`, [ids[2]]);
    expect(await verifyChain(db, orgId)).toEqual({ ok: false, checked: 2, firstBroken: { id: ids[2], reason: 'hash_mismatch' } });
  });

  it('an entry deleted in the database: entries_missing at the entry after it; the newest deleted: entries_missing_at_end', async () => {
    const { orgId, ids } = await orgWithEntries(4);
    await rawQuery(db, 'delete from audit_logs where id = $1', [ids[3]]);
    expect(await verifyChain(db, orgId)).toEqual({ ok: false, checked: 3, firstBroken: { id: ids[2], reason: 'entries_missing_at_end' } });
    await rawQuery(db, 'delete from audit_logs where id = $1', [ids[1]]);
    expect(await verifyChain(db, orgId)).toEqual({ ok: false, checked: 1, firstBroken: { id: ids[2], reason: 'entries_missing' } });
  });

  it('an entry inserted in the database (with a well-computed hash): unexpected_entry at that entry', async () => {
    const { orgId, ids } = await orgWithEntries(3);
    const forged = newId();
    // A forger who knows the encoding: a copy of the second entry, other details, its hash computed right.
    await rawQuery(db, 'alter table audit_logs disable trigger audit_logs_link', []);
    try {
      await rawQuery(
        db,
        `insert into audit_logs (id, created_at, actor_type, org_id, partner_id, action, details, result, chain_seq, prev_hash, hash)
         select $2::uuid, created_at, actor_type, org_id, partner_id, action, '{"i": 7}'::jsonb, result, chain_seq, prev_hash, '' from audit_logs where id = $1`,
        [ids[1], forged],
      );
    } finally {
      await rawQuery(db, 'alter table audit_logs enable trigger audit_logs_link', []);
    }
    await rawQuery(db, 'update audit_logs a set hash = audit_entry_hash(a.prev_hash, a.chain_seq, a) where id = $1', [forged]);
    // Sorted after the genuine entry of its position (a later id): the genuine entries still hold before it.
    const result = await verifyChain(db, orgId);
    expect(result.firstBroken).toEqual({ id: forged, reason: 'unexpected_entry' });
    expect(result.checked).toBe(2);
  });

  it('a chain rewritten consistently after a signed checkpoint: checkpoint_mismatch; checkpoints are signed and said once without a key', async () => {
    const { orgId, ids } = await orgWithEntries(3);
    const signer = checkpointSigner(randomBytes(32).toString('base64'));
    expect(await writeCheckpoints(db, signer, { force: true })).toBeGreaterThan(0);
    const mine = (await listCheckpoints(db)).filter((c) => c.scopeId === orgId);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ scopeKind: 'organization', seq: 3, publicKey: signer.publicKey });
    expect(checkpointSignatureValid(mine[0]!)).toBe(true);
    expect(checkpointSignatureValid({ ...mine[0]!, hash: '0'.repeat(64) })).toBe(false);
    // Unchanged heads get no second checkpoint.
    expect((await writeCheckpoints(db, signer, { force: true }))).toBe(0);
    // Rewrite entry 2 and re-link everything after it, as a forger with database access can.
    await rawQuery(db, `update audit_logs set details = '{"i": 42}' where id = $1`, [ids[1]]);
    for (const id of ids.slice(1)) {
      await rawQuery(db, `update audit_logs a set prev_hash = (select p.hash from audit_logs p where p.org_id = a.org_id and p.chain_seq = a.chain_seq - 1) where id = $1`, [id]);
      await rawQuery(db, 'update audit_logs a set hash = audit_entry_hash(a.prev_hash, a.chain_seq, a) where id = $1', [id]);
    }
    await rawQuery(db, 'update audit_chain_heads set hash = (select hash from audit_logs where id = $1) where scope_id = $2', [ids[2], orgId]);
    expect(await verifyChain(db, orgId)).toEqual({ ok: false, checked: 2, firstBroken: { id: ids[2], reason: 'checkpoint_mismatch' } });

    const lines: string[] = [];
    const log = { info: (msg: string) => lines.push(msg) } as unknown as Parameters<typeof checkpointJob>[2];
    const run = checkpointJob(db, undefined, log);
    expect(await run()).toBe(0);
    expect(await run()).toBe(0);
    expect(lines).toEqual(['audit: AUDIT_CHECKPOINT_KEY is not set: no signed checkpoints of the audit chains are written']);
  });

  it('retention deletes only the oldest entries of each chain and records where it starts: the rest still verifies', async () => {
    const org = await createOrganization(db, { name: 'Retained', partnerId: tenant.partnerId });
    const write = (i: number) => writeAudit(db, { actor: { type: 'system' } }, { action: 'test.entry', orgId: org.id, details: { i } });
    try {
      await write(1);
      await write(2);
      clock.advance(10 * 24 * 3600_000);
      const cutoff = clock.now();
      await write(3);
      await write(4);
      expect(await pruneAuditLog(db, cutoff)).toBeGreaterThanOrEqual(2);
      const left = await rawQuery<{ chain_seq: string }>(db, 'select chain_seq from audit_logs where org_id = $1 order by chain_seq', [org.id]);
      expect(left.map((r) => Number(r.chain_seq))).toEqual([3, 4]);
      const [head] = await rawQuery<{ start_seq: string }>(db, 'select start_seq from audit_chain_heads where scope_id = $1', [org.id]);
      expect(Number(head!.start_seq)).toBe(3);
      expect(await verifyChain(db, org.id)).toEqual({ ok: true, checked: 2 });
      await write(5);
      expect(await verifyChain(db, org.id)).toEqual({ ok: true, checked: 3 });
      // The first entry left deleted by hand: still detected after retention.
      const [first] = await rawQuery<{ id: string }>(db, 'select id from audit_logs where org_id = $1 and chain_seq = 3', [org.id]);
      await rawQuery(db, 'delete from audit_logs where id = $1', [first!.id]);
      expect((await verifyChain(db, org.id)).firstBroken?.reason).toBe('entries_missing');
    } finally {
      clock.reset();
    }
  });

  raceTest('concurrent writers on two connection pools append to one organisation\'s chain without a break; another organisation waits for none of them', async () => {
    const url = app.server.keel.config.DATABASE_URL!;
    const second = await openDatabase({ url, poolSize: 10 });
    try {
      const org = await createOrganization(db, { name: 'Raced', partnerId: tenant.partnerId });
      const dbs = [db, second.db];
      await together(40, (i) =>
        transaction(dbs[i % 2]!, async (tx) => {
          await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.race', orgId: org.id, details: { i } });
          await writeAudit(tx.db, { actor: { type: 'system' } }, { action: 'test.race', orgId: org.id, details: { i, second: true } });
        }),
      );
      expect(await verifyChain(db, org.id)).toEqual({ ok: true, checked: 80 });

      // A lock per scope: with one organisation's head held, another organisation's writes go on.
      const other = await createOrganization(db, { name: 'Unrelated', partnerId: tenant.partnerId });
      await writeAudit(db, { actor: { type: 'system' } }, { action: 'test.race', orgId: org.id });
      const holder = new pg.Client({ connectionString: url });
      await holder.connect();
      try {
        await holder.query('begin');
        await holder.query('select 1 from audit_chain_heads where scope_id = $1 for update', [org.id]);
        let blockedDone = false;
        const blocked = writeAudit(second.db, { actor: { type: 'system' } }, { action: 'test.race', orgId: org.id }).then(() => (blockedDone = true));
        await together(5, () => writeAudit(db, { actor: { type: 'system' } }, { action: 'test.race', orgId: other.id }));
        expect(blockedDone).toBe(false);
        await holder.query('commit');
        await blocked;
      } finally {
        await holder.end();
      }
      expect(await verifyChain(db, other.id)).toEqual({ ok: true, checked: 5 });
      expect(await verifyChain(db, org.id)).toEqual({ ok: true, checked: 82 });
    } finally {
      await second.close();
    }
  });
});
