/**
 * Migration 0012_devices_group_site: devices (and enrolment keys) in a device group that has a site,
 * written before the rule with another site or none, get their group's site (docs/decisions.md
 * "Devices in their group's site"); devices of a group without a site, and ungrouped ones, keep theirs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { migrate, MIGRATIONS_DIR } from '../../src/platform/db/migrator.js';
import { newId } from '../../src/platform/db/columns.js';
import { backend, backendAvailable } from '../helpers/app.js';
import { createPgDatabase } from '../helpers/backends.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()?.();
});

async function freshDatabase(): Promise<Database> {
  if (backend === 'postgres') {
    const pg = await createPgDatabase();
    const db = await openDatabase({ url: pg.url });
    cleanups.push(() => pg.drop(), () => db.close());
    return db;
  }
  const db = await openDatabase({ pgliteDir: 'memory://' });
  cleanups.push(() => db.close());
  return db;
}

/** The migrations numbered below 0012 only. */
function migrationsBefore0012(): string {
  const dir = mkdtempSync(join(tmpdir(), 'keel-mig-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(MIGRATIONS_DIR, dir, { recursive: true, filter: (src) => !/\/(\d{4})_[^/]*\.sql$/.test(src) || Number(/\/(\d{4})_[^/]*\.sql$/.exec(src)?.[1]) < 12 });
  return dir;
}

describe.skipIf(!backendAvailable())(`migration 0012_devices_group_site on ${backend}`, () => {
  it('moves devices and keys of a group with a site into that site; others keep their site', async () => {
    const db = await freshDatabase();
    await migrate(db, migrationsBefore0012());
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
