import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, partnerUserWithRole, ROLE, type World } from '../access/helpers.js';
import { createTenant, login, type Tenant } from '../helpers/fixtures.js';
import { enroll, enrollmentKey, type Enrolled } from './helpers.js';

/**
 * Devices of one organisation against another's (docs/testing.md "Tenancy tests"): the device list
 * answers exactly the caller's organisations' devices, update-now refuses a real device of another
 * organisation, enrolment refuses a real site or device group of another organisation, and a
 * deleted site leaves its devices in place without a site.
 */
describe.skipIf(!backendAvailable())(`devices across organisations (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let elsewhere: Tenant;
  let elsewhereAdmin: string;
  let inA: Enrolled[];
  let inB: Enrolled[];
  let inElsewhere: Enrolled[];
  const sorted = (list: Enrolled[]) => list.map((d) => d.deviceId).sort();
  const listed = async (token: string) => {
    const res = await app.api('GET', '/devices?limit=100', { token });
    expect(res.status).toBe(200);
    return (res.body.data as { id: string }[]).map((d) => d.id).sort();
  };

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    elsewhere = await createTenant(app);
    elsewhereAdmin = (await login(app, elsewhere.orgAdmin)).accessToken;
    const keyA = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
    const keyB = await enrollmentKey(app, w.tokens.partnerFull, w.otherOrgId);
    const keyElsewhere = await enrollmentKey(app, elsewhereAdmin, elsewhere.orgId);
    inA = [await enroll(app, keyA), await enroll(app, keyA)];
    inB = [await enroll(app, keyB), await enroll(app, keyB)];
    inElsewhere = [await enroll(app, keyElsewhere)];
  });
  afterAll(async () => app?.close());

  it('GET /devices answers exactly the devices of the caller\'s organisations', async () => {
    expect(await listed(w.tokens.orgAdmin)).toEqual(sorted(inA));
    expect(await listed(elsewhereAdmin)).toEqual(sorted(inElsewhere));
    // A partner user with `selected` access to organisation A sees A's devices, not B's.
    const selected = await partnerUserWithRole(app, w.partnerId, ROLE.partnerTechnician, 'selected', [w.orgId]);
    expect(await listed(selected.token)).toEqual(sorted(inA));
    // A partner-wide user sees both of its partner's organisations, and nothing of another partner.
    expect(await listed(w.tokens.partnerFull)).toEqual(sorted([...inA, ...inB]));
    const total = await app.api('GET', '/devices?limit=1', { token: w.tokens.orgAdmin });
    expect(total.body.pagination.total).toBe(inA.length);
  });

  it('update-now refuses a real device of another organisation, alone or beside one of its own, and marks none', async () => {
    const [own] = inA;
    const [foreign] = inB;
    for (const deviceIds of [[foreign!.deviceId], [own!.deviceId, foreign!.deviceId], [inElsewhere[0]!.deviceId]]) {
      const res = await app.api('POST', '/devices/update-now', { token: w.tokens.orgTechnician, body: { deviceIds } });
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('not_found');
    }
    const pending = async (id: string) => (await app.api('GET', `/devices/${id}`, { token: w.tokens.partnerFull })).body.updateNowPending;
    expect(await pending(own!.deviceId)).toBe(false);
    expect(await pending(foreign!.deviceId)).toBe(false);
  });

  it('a real device or enrolment key of another organisation: 404 for read, auto-update, decommission and revoke, and unchanged', async () => {
    const foreign = inB[1]!;
    for (const [method, path, body] of [
      ['GET', `/devices/${foreign.deviceId}`, undefined],
      ['POST', `/devices/${foreign.deviceId}/auto-update`, { enabled: false }],
      ['DELETE', `/devices/${foreign.deviceId}`, undefined],
    ] as const) {
      const res = await app.api(method, path, { token: w.tokens.orgAdmin, ...(body ? { body } : {}) });
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    const still = await app.api('GET', `/devices/${foreign.deviceId}`, { token: w.tokens.partnerFull });
    expect(still.body).toMatchObject({ id: foreign.deviceId, autoUpdate: true });
    // An organisation B key named under organisation A's path is not found, and still enrols in B.
    const created = await app.api('POST', `/orgs/${w.otherOrgId}/enrollment-keys`, { token: w.tokens.partnerFull, body: { name: 'B key' } });
    expect(created.status).toBe(201);
    expect((await app.api('DELETE', `/orgs/${w.orgId}/enrollment-keys/${created.body.id}`, { token: w.tokens.orgAdmin })).status).toBe(404);
    const enrolled = await enroll(app, created.body.key as string);
    expect((await app.api('GET', `/devices/${enrolled.deviceId}`, { token: w.tokens.partnerFull })).body.orgId).toBe(w.otherOrgId);
    inB.push(enrolled);
  });

  describe('enrolment places a device only in its own organisation, consistently', () => {
    const made = async (path: string, token: string, body: Record<string, unknown>) => {
      const res = await app.api('POST', path, { token, body });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    const attempt = (key: string, extra: Record<string, unknown>) =>
      app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: 'placed', os: 'linux', arch: 'amd64', agentVersion: '1.0.0', ...extra } });
    let siteA1: string;
    let siteA2: string;
    let groupA2: string;
    let siteB: string;
    let groupB: string;
    beforeAll(async () => {
      siteA1 = await made(`/orgs/${w.orgId}/sites`, w.tokens.orgAdmin, { name: 'A1' });
      siteA2 = await made(`/orgs/${w.orgId}/sites`, w.tokens.orgAdmin, { name: 'A2' });
      groupA2 = await made(`/orgs/${w.orgId}/device-groups`, w.tokens.orgAdmin, { name: 'A2 group', siteId: siteA2 });
      siteB = await made(`/orgs/${w.otherOrgId}/sites`, w.tokens.partnerFull, { name: 'B' });
      groupB = await made(`/orgs/${w.otherOrgId}/device-groups`, w.tokens.partnerFull, { name: 'B group', siteId: siteB });
    });

    it('a key without placement refuses a real site or device group of another organisation', async () => {
      const key = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
      for (const extra of [{ siteId: siteB }, { deviceGroupId: groupB }, { siteId: siteB, deviceGroupId: groupB }]) {
        const res = await attempt(key, extra);
        expect(res.status).toBe(404);
        expect(res.body.code).toBe('not_found');
      }
      expect(await listed(w.tokens.partnerFull)).toEqual(sorted([...inA, ...inB]));
    });

    it('a placed key refuses another site or group named by the agent (placement_mismatch), its own included', async () => {
      const siteKey = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: siteA1 });
      const groupKey = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: groupA2 });
      for (const [key, extra] of [[siteKey, { siteId: siteB }], [siteKey, { siteId: siteA2 }], [groupKey, { deviceGroupId: groupB }]] as const) {
        const res = await attempt(key, extra);
        expect(res.status).toBe(400);
        expect(res.body.code).toBe('placement_mismatch');
      }
      // The key's own placement named again is no mismatch.
      const same = await attempt(siteKey, { siteId: siteA1 });
      expect(same.status).toBe(201);
      expect((await app.api('GET', `/devices/${same.body.deviceId}`, { token: w.tokens.orgAdmin })).body).toMatchObject({ orgId: w.orgId, siteId: siteA1 });
      await app.api('DELETE', `/devices/${same.body.deviceId}`, { token: w.tokens.orgAdmin });
    });

    it('a device group of one site is refused beside another site (named by the agent or bound by the key)', async () => {
      const open = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId);
      const siteKey = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: siteA1 });
      const groupKey = await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { deviceGroupId: groupA2 });
      for (const [key, extra] of [[open, { siteId: siteA1, deviceGroupId: groupA2 }], [siteKey, { deviceGroupId: groupA2 }], [groupKey, { siteId: siteA1 }]] as const) {
        const res = await attempt(key, extra);
        expect(res.status).toBe(400);
        expect(res.body.code).toBe('placement_mismatch');
      }
      expect(await listed(w.tokens.partnerFull)).toEqual(sorted([...inA, ...inB]));
    });

    it('deleting a site keeps its devices, without a site (devices.site_id is ON DELETE SET NULL)', async () => {
      const site = await made(`/orgs/${w.orgId}/sites`, w.tokens.orgAdmin, { name: 'Closing' });
      const device = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: site }));
      expect((await app.api('GET', `/devices/${device.deviceId}`, { token: w.tokens.orgAdmin })).body.siteId).toBe(site);
      expect((await app.api('DELETE', `/sites/${site}`, { token: w.tokens.orgAdmin })).status).toBe(204);
      const after = await app.api('GET', `/devices/${device.deviceId}`, { token: w.tokens.orgAdmin });
      expect(after.status).toBe(200);
      expect(after.body).toMatchObject({ id: device.deviceId, orgId: w.orgId, siteId: null });
      expect(await listed(w.tokens.orgAdmin)).toEqual(sorted([...inA, device]));
      await app.api('DELETE', `/devices/${device.deviceId}`, { token: w.tokens.orgAdmin });
    });
  });
});
