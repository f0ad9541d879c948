/**
 * A site restriction holds everywhere: organisation-wide writes need whole-organisation access
 * (`wholeOrg`, 403 `whole_org_access_required`), and every read that spans sites (devices, audit
 * entries, device counts per agent version) shows only what the caller's sites and groups give,
 * decided by the access module's placement filters. Real objects of the other site throughout.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, orgUserWithRole, ROLE, type World } from '../access/helpers.js';
import { enroll, enrollmentKey, mfaAdmin, registerRemote, type Enrolled } from '../agents/helpers.js';

const WHOLE_ORG = 'whole_org_access_required';

describe.skipIf(!backendAvailable())(`site restrictions across organisation-wide writes and reads (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let s1a: string;
  let s1b: string;
  let inA: Enrolled;
  let inB: Enrolled;
  let tech: string;
  let reader: string;
  let restrictedAdmin: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false' } });
    w = await createWorld(app);
    const site = async (name: string) => (await app.api('POST', `/orgs/${w.orgId}/sites`, { token: w.tokens.orgAdmin, body: { name } })).body.id as string;
    s1a = await site('S1a');
    s1b = await site('S1b');
    inA = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: s1a }));
    inB = await enroll(app, await enrollmentKey(app, w.tokens.orgAdmin, w.orgId, { siteId: s1b }));
    // Audit entries about the S1b device beyond its enrolment.
    expect((await app.api('POST', '/devices/update-now', { token: w.tokens.orgAdmin, body: { deviceIds: [inB.deviceId, inA.deviceId] } })).status).toBe(202);
    tech = (await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { siteIds: [s1a] })).token;
    reader = (await orgUserWithRole(app, w.orgId, ROLE.orgReadOnly, { siteIds: [s1a] })).token;
    restrictedAdmin = (await orgUserWithRole(app, w.orgId, ROLE.orgAdmin, { siteIds: [s1a] })).token;
    await registerRemote(app, await mfaAdmin(app, w), { version: '1.0.0' });
  });
  afterAll(async () => app?.close());

  it('an S1a-restricted technician gets 403 whole_org_access_required on the organisation’s update settings (an unrestricted admin 200)', async () => {
    const body = { pinnedVersions: { agent: '1.0.0' } };
    const refused = await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: tech, body });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe(WHOLE_ORG);
    expect((await app.api('GET', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin })).body.pinnedVersions).toBeNull();
    expect((await app.api('PUT', `/orgs/${w.orgId}/agent-update-settings`, { token: w.tokens.orgAdmin, body })).status).toBe(200);
  });

  it('enrolment keys: a restricted technician creates keys only for a site it sees (no site, or S1b: 403)', async () => {
    const key = (body: Record<string, unknown>) => app.api('POST', `/orgs/${w.orgId}/enrollment-keys`, { token: tech, body });
    expect((await key({})).status).toBe(403);
    expect((await key({ siteId: s1b })).status).toBe(403);
    expect((await key({ siteId: s1a })).status).toBe(201);
  });

  it('every other organisation-wide write refuses a restricted caller: organisation settings and delete, sites, device groups, users, roles', async () => {
    const group = (await app.api('POST', `/orgs/${w.orgId}/device-groups`, { token: w.tokens.orgAdmin, body: { name: 'G', siteId: s1a } })).body.id as string;
    const writes: [string, string, unknown?][] = [
      ['PATCH', `/orgs/${w.orgId}`, { name: 'Renamed' }],
      ['DELETE', `/orgs/${w.orgId}`],
      ['POST', `/orgs/${w.orgId}/sites`, { name: 'S1c' }],
      ['PATCH', `/sites/${s1a}`, { name: 'Mine now' }],
      ['DELETE', `/sites/${s1b}`],
      ['POST', `/orgs/${w.orgId}/device-groups`, { name: 'G2', siteId: s1a }],
      ['PATCH', `/device-groups/${group}`, { name: 'G3' }],
      ['DELETE', `/device-groups/${group}`],
      ['POST', '/users/invite', { email: 'wide@example.com', name: 'Wide', roleId: ROLE.orgAdmin, siteIds: null }],
      ['POST', '/roles', { name: 'Wide', permissions: ['devices:read'] }],
    ];
    for (const [method, path, body] of writes) {
      const res = await app.api(method, path, { token: restrictedAdmin, ...(body ? { body } : {}) });
      expect({ method, path, status: res.status, code: res.body?.code }).toEqual({ method, path, status: 403, code: WHOLE_ORG });
    }
    // The organisation and its sites are untouched.
    const org = await app.api('GET', `/orgs/${w.orgId}`, { token: w.tokens.orgAdmin });
    expect(org.body.name).not.toBe('Renamed');
  });

  it('a restricted read-only user sees no S1b device in any read that spans sites: devices, audit entries, device counts per version', async () => {
    const devices = await app.api('GET', '/devices?limit=100', { token: reader });
    expect(devices.body.data.map((d: { id: string }) => d.id)).toEqual([inA.deviceId]);
    expect((await app.api('GET', `/devices/${inB.deviceId}`, { token: reader })).status).toBe(404);

    const audit = await app.api('GET', '/audit-logs?limit=100', { token: reader });
    expect(audit.status).toBe(200);
    const targets = audit.body.data.map((e: { targetId: string | null }) => e.targetId);
    expect(targets).toContain(inA.deviceId);
    expect(targets).not.toContain(inB.deviceId);
    expect(targets).not.toContain(s1b);
    const byId = await app.api('GET', `/audit-logs?targetId=${inB.deviceId}`, { token: reader });
    expect(byId.body.data).toEqual([]);
    // The unrestricted administrator sees both.
    const all = (await app.api('GET', `/audit-logs?targetId=${inB.deviceId}`, { token: w.tokens.orgAdmin })).body.data;
    expect(all.map((e: { action: string }) => e.action).sort()).toEqual(['device.enroll', 'device.update_now']);

    const count = async (token: string) => (await app.api('GET', '/agent-versions?limit=100', { token })).body.data.find((v: { version: string }) => v.version === '1.0.0')?.deviceCount;
    expect(await count(w.tokens.orgAdmin)).toBe(2);
    expect(await count(reader)).toBe(1);
  });
});
