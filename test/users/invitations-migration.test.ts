/**
 * Migration 0002_invitations: invitations pending in single_use_records (purpose 'invite') move to
 * the invitations table with their grant and the same token hash, so links already sent keep
 * working after the upgrade; records without a grant are dropped.
 */
import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrator.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { newId } from '../../src/platform/db/columns.js';
import { copyMigrations, freshDatabase } from '../helpers/migrations.js';
import { backend, backendAvailable } from '../helpers/app.js';


describe.skipIf(!backendAvailable())(`migration 0002_invitations on ${backend}`, () => {
  it('moves pending invite records into invitations with their grant and token hash', async () => {
    const db = await freshDatabase();
    await migrate(db, copyMigrations(2));
    expect((await db.query<{ t: string | null }>("select to_regclass('invitations')::text as t"))[0]?.t).toBeNull();

    const [partnerId, orgId, roleId, siteId, inviterId, invitee1, invitee2, invitee3] = Array.from({ length: 8 }, () => newId()) as [string, string, string, string, string, string, string, string];
    await db.query('insert into partners (id, name) values ($1, $2)', [partnerId, 'P']);
    await db.query('insert into organizations (id, partner_id, name) values ($1, $2, $3)', [orgId, partnerId, 'O']);
    await db.query("insert into roles (id, org_id, scope, name) values ($1, $2, 'organization', 'R')", [roleId, orgId]);
    await db.query('insert into sites (id, org_id, name) values ($1, $2, $3)', [siteId, orgId, 'S']);
    for (const [id, email, status] of [[inviterId, 'admin@example.com', 'active'], [invitee1, 'One@Example.com', 'invited'], [invitee2, 'two@example.com', 'active'], [invitee3, 'three@example.com', 'invited']]) {
      await db.query('insert into users (id, email, name, status) values ($1, $2, $3, $4)', [id, email, 'U', status]);
    }
    const expires = new Date(Date.now() + 3 * 24 * 3600_000);
    const record = async (subject: string, token: string, data: unknown) => {
      const id = newId();
      await db.query("insert into single_use_records (id, purpose, token_hash, subject_id, data, expires_at) values ($1, 'invite', $2, $3, $4, $5)", [
        id, sha256Hex(`invite:${token}`), subject, JSON.stringify(data), expires.toISOString(),
      ]);
      return id;
    };
    const orgRecord = await record(invitee1, 'tok-one', { grant: { kind: 'organization', orgId, roleId, siteIds: [siteId], deviceGroupIds: null }, invitedBy: inviterId });
    const partnerRecord = await record(invitee2, 'tok-two', { grant: { kind: 'partner', partnerId, roleId, orgAccess: 'selected', orgIds: [orgId] }, invitedBy: inviterId });
    await record(invitee3, 'tok-three', {});
    await db.query("insert into single_use_records (id, purpose, token_hash, subject_id, expires_at) values ($1, 'password_reset', 'x', $2, $3)", [newId(), invitee3, expires.toISOString()]);

    const run = await migrate(db);
    expect(run.applied).toContain('0002_invitations.sql');
    const rows = await db.query<Record<string, unknown>>('select * from invitations order by email');
    expect(rows).toHaveLength(2);
    const [one, two] = [rows.find((r) => r.user_id === invitee1), rows.find((r) => r.user_id === invitee2)];
    expect(one).toMatchObject({
      id: orgRecord, email: 'One@Example.com', scope: 'organization', org_id: orgId, partner_id: null, role_id: roleId,
      site_ids: [siteId], device_group_ids: null, org_access: null, org_ids: null, invited_by: inviterId, token_hash: sha256Hex('invite:tok-one'),
    });
    expect(new Date(one!.expires_at as string).getTime()).toBe(new Date(expires.toISOString()).getTime());
    expect(two).toMatchObject({ id: partnerRecord, scope: 'partner', partner_id: partnerId, org_id: null, org_access: 'selected', org_ids: [orgId], site_ids: null });
    const left = await db.query<{ purpose: string }>('select purpose from single_use_records');
    expect(left.map((r) => r.purpose)).toEqual(['password_reset']);
  });
});
