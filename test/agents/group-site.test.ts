/**
 * A device enrolled with a key bound to a device group belongs to the group's site, and devices
 * and keys follow their group when it moves to another site (docs/decisions.md "Devices in their
 * group's site"): the site filter, a site-restricted technician's list and the device's own view
 * all see it there. Real devices of a sibling site stay hidden.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, orgUserWithRole, ROLE, type World } from '../access/helpers.js';
import { enroll, enrollmentKey, heartbeat, type Enrolled } from './helpers.js';
import { raceTest, together } from '../helpers/race.js';

describe.skipIf(!backendAvailable())(`devices in their group's site (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let siteA: string;
  let siteB: string;
  let groupA: string;
  let inGroupA: Enrolled;
  let inSiteB: Enrolled;
  let namedGroup: Enrolled;
  let techA: string;
  const ids = (res: { body: { data: { id: string }[] } }) => res.body.data.map((d) => d.id).sort();

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    const admin = w.tokens.orgAdmin;
    const site = async (name: string) => (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: admin, body: { name } })).body.id as string;
    siteA = await site('Site A');
    siteB = await site('Site B');
    groupA = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: admin, body: { name: 'Group A', siteId: siteA } })).body.id as string;
    // The key names the group only: the device takes the group's site.
    inGroupA = await enroll(app, await enrollmentKey(app, admin, w.orgId, { deviceGroupId: groupA }));
    inSiteB = await enroll(app, await enrollmentKey(app, admin, w.orgId, { siteId: siteB }));
    // A key without placement, the agent naming the group: the device takes the group's site too.
    namedGroup = await enroll(app, await enrollmentKey(app, admin, w.orgId), { deviceGroupId: groupA });
    techA = (await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { siteIds: [siteA] })).token;
  });
  afterAll(async () => app?.close());

  it('a device enrolled with a group-bound key carries the group’s site; GET /devices?siteId= finds it', async () => {
    const device = await app.api('GET', `/devices/${inGroupA.deviceId}`, { token: w.tokens.orgAdmin });
    expect(device.body).toMatchObject({ siteId: siteA, deviceGroupId: groupA });
    expect((await app.api('GET', `/devices/${namedGroup.deviceId}`, { token: w.tokens.orgAdmin })).body).toMatchObject({ siteId: siteA, deviceGroupId: groupA });
    expect(ids(await app.api('GET', `/devices?siteId=${siteA}`, { token: w.tokens.orgAdmin }))).toEqual([inGroupA.deviceId, namedGroup.deviceId].sort());
    expect(ids(await app.api('GET', `/devices?siteId=${siteB}`, { token: w.tokens.orgAdmin }))).toEqual([inSiteB.deviceId]);
  });

  it('a technician restricted to the group’s site lists the device; the sibling site’s device stays hidden', async () => {
    expect(ids(await app.api('GET', '/devices', { token: techA }))).toEqual([inGroupA.deviceId, namedGroup.deviceId].sort());
    expect((await app.api('GET', `/devices/${inGroupA.deviceId}`, { token: techA })).status).toBe(200);
    expect((await app.api('GET', `/devices/${inSiteB.deviceId}`, { token: techA })).status).toBe(404);
  });

  it('a group-bound key carries the group’s site, so a technician of that site may create and list it', async () => {
    const made = await app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: techA, body: { deviceGroupId: groupA } });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ siteId: siteA, deviceGroupId: groupA });
    // No PUBLIC_URL configured: no server URL to tell (the console uses its own origin).
    expect(made.body.serverUrl).toBeNull();
    const listed = await app.api('GET', `/orgs/${w.orgId}/enrollment-keys`, { token: techA });
    expect(listed.body.data.map((k: { id: string }) => k.id)).toContain(made.body.id);
  });

  it('a group moved to another site takes its devices and keys along; a heartbeat keeps them there', async () => {
    const admin = w.tokens.orgAdmin;
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: admin, body: { name: 'Movers', siteId: siteA } })).body.id as string;
    const keyRes = await app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: admin, body: { deviceGroupId: group } });
    const mover = await enroll(app, keyRes.body.key as string);
    expect((await heartbeat(app, mover)).status).toBe(200);
    const moved = await app.api('PATCH', `/device-groups/${group}`, { token: admin, body: { siteId: siteB } });
    expect(moved.status).toBe(200);
    expect((await app.api('GET', `/devices/${mover.deviceId}`, { token: admin })).body.siteId).toBe(siteB);
    expect(ids(await app.api('GET', `/devices?siteId=${siteB}`, { token: admin }))).toEqual([inSiteB.deviceId, mover.deviceId].sort());
    expect(ids(await app.api('GET', '/devices', { token: techA }))).toEqual([inGroupA.deviceId, namedGroup.deviceId].sort());
    const keys = await app.api('GET', `/orgs/${w.orgId}/enrollment-keys?limit=100`, { token: admin });
    expect(keys.body.data.find((k: { id: string }) => k.id === keyRes.body.id)).toMatchObject({ siteId: siteB, deviceGroupId: group });
    // The key still enrols (its site and its group agree), in the group's new site.
    const again = await enroll(app, keyRes.body.key as string);
    expect((await app.api('GET', `/devices/${again.deviceId}`, { token: admin })).body).toMatchObject({ siteId: siteB, deviceGroupId: group });
    // The move is audited with the devices it took along.
    const audit = await app.api('GET', `/audit-logs?action=device_group.update&orgId=${w.orgId}`, { token: w.tokens.orgAdmin });
    expect(audit.body.data.find((e: { targetId: string }) => e.targetId === group)?.details).toEqual({ devicesMoved: 1 });
  });

  raceTest('devices enrolling while their group moves to another site all end in the group’s final site', async () => {
    const admin = w.tokens.orgAdmin;
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: admin, body: { name: 'Raced', siteId: siteA } })).body.id as string;
    const key = await enrollmentKey(app, admin, w.orgId, { deviceGroupId: group });
    const answers = await together(9, (i) =>
      i === 4
        ? app.api('PATCH', `/device-groups/${group}`, { token: admin, body: { siteId: siteB } })
        : app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: `raced-${i}`, os: 'linux', arch: 'amd64', agentVersion: '1.0.0' } }),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 201, 201, 201, 201, 201, 201, 201, 201]);
    const listed = await app.api('GET', `/devices?deviceGroupId=${group}&limit=100`, { token: admin });
    expect(listed.body.data).toHaveLength(8);
    expect(new Set(listed.body.data.map((d: { siteId: string }) => d.siteId))).toEqual(new Set([siteB]));
  });
});
