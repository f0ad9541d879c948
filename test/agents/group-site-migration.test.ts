/**
 * Migration 0012_devices_group_site: devices (and enrolment keys) in a device group that has a site,
 * written before the rule with another site or none, get their group's site (docs/decisions.md
 * "Devices in their group's site"); devices of a group without a site, and ungrouped ones, keep theirs.
 */
import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/platform/db/migrator.js';
import { newId } from '../../src/platform/db/columns.js';
import { copyMigrations, freshDatabase } from '../helpers/migrations.js';
import { backend, backendAvailable } from '../helpers/app.js';


describe.skipIf(!backendAvailable())(`migration 0012_devices_group_site on ${backend}`, () => {
  it('moves devices and keys of a group with a site into that site; others keep their site', async () => {
    const db = await freshDatabase();
    await migrate(db, copyMigrations(12));
    const [partnerId, orgId, siteA, siteB, groupA, groupNone] = Array.from({ length: 6 }, () => newId()) as [string, string, string, string, string, string];
    await db.query('insert into partners (id, name) values ($1, $2)', [partnerId, 'P']);
    await db.query('insert into organizations (id, partner_id, name) values ($1, $2, $3)', [orgId, partnerId, 'O']);
    await db.query('insert into sites (id, org_id, name) values ($1, $2, $3), ($4, $2, $5)', [siteA, orgId, 'A', siteB, 'B']);
    await db.query('insert into device_groups (id, org_id, site_id, name) values ($1, $2, $3, $4), ($5, $2, null, $6)', [groupA, orgId, siteA, 'GA', groupNone, 'G-']);
    const device = async (siteId: string | null, groupId: string | null) => {
      const id = newId();
      await db.query('insert into devices (id, org_id, site_id, device_group_id, hostname) values ($1, $2, $3, $4, $5)', [id, orgId, siteId, groupId, `h-${id.slice(0, 6)}`]);
      return id;
    };
    const unplaced = await device(null, groupA); // enrolled with a group-bound key before the rule
    const elsewhere = await device(siteB, groupA);
    const inGroupWithoutSite = await device(siteB, groupNone);
    const ungrouped = await device(siteB, null);
    const none = await device(null, null);
    const keyId = newId();
    await db.query("insert into enrollment_keys (id, org_id, key_hash, device_group_id) values ($1, $2, 'h', $3)", [keyId, orgId, groupA]);

    const run = await migrate(db);
    expect(run.applied).toContain('0012_devices_group_site.sql');
    const rows = await db.query<{ id: string; site_id: string | null }>('select id, site_id from devices');
    const siteOf = Object.fromEntries(rows.map((r) => [r.id, r.site_id]));
    expect(siteOf).toEqual({ [unplaced]: siteA, [elsewhere]: siteA, [inGroupWithoutSite]: siteB, [ungrouped]: siteB, [none]: null });
    expect((await db.query<{ site_id: string }>('select site_id from enrollment_keys where id = $1', [keyId]))[0]?.site_id).toBe(siteA);
  });
});
