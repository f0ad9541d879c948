/**
 * Version pins at every level over HTTP (docs/decisions.md "Agent pins and distribution"): the
 * precedence device > device group > site > organisation > partner > fleet target, told by
 * `GET /devices/:id/update-decision` and offered by the heartbeat alike; who may pin what (a
 * site-restricted technician, another tenant, API key permissions), audited; and the distribution
 * of versions and of the reasons devices are behind, counted over real enrolled devices.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, orgUserWithRole, partnerUserWithRole, ROLE, type World } from '../access/helpers.js';
import { createTenant, login } from '../helpers/fixtures.js';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { enroll, enrollmentKey, heartbeat, mfaAdmin, registerRemote, type Enrolled } from './helpers.js';

describe.skipIf(!backendAvailable())(`agent pins and distribution (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let admin: string;
  let siteA: string;
  let siteB: string;
  let groupA: string;
  let loose: string;
  let inGroupA: Enrolled;
  let inSiteB: Enrolled;
  let plain: Enrolled;
  let elsewhereDevice: Enrolled;
  let elsewhereAdmin: string;
  let techA: string;

  const decision = async (d: Enrolled, token = w.tokens.orgAdmin) => {
    const res = await app.api('GET', `/devices/${d.deviceId}/update-decision`, { token });
    expect(res.status).toBe(200);
    return (res.body.data as { component: string; offer: string | null; rule: string; detail: string }[]).find((r) => r.component === 'agent');
  };
  const put = (path: string, pinnedVersions: unknown, token = w.tokens.orgAdmin) => app.api('PUT', path, { token, body: { pinnedVersions } });
  const offered = async (d: Enrolled) => ((await heartbeat(app, d)).body.update?.version as string | undefined) ?? null;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', AGENT_AUTO_PROMOTE: 'false' } });
    w = await createWorld(app);
    admin = await mfaAdmin(app, w);
    for (const version of ['1.1.0', '1.2.0', '1.3.0', '1.4.0', '1.5.0', '2.0.0']) await registerRemote(app, admin, { version });
    expect((await app.api('POST', '/agent-versions/promote', { token: admin, body: { version: '2.0.0' } })).status).toBe(200);
    const orgAdmin = w.tokens.orgAdmin;
    const made = async (path: string, body: Record<string, unknown>) => (await app.api('POST', path, { token: orgAdmin, body })).body.id as string;
    siteA = await made(`/orgs/${w.orgId}/sites`, { name: 'Site A' });
    siteB = await made(`/orgs/${w.orgId}/sites`, { name: 'Site B' });
    groupA = await made(`/orgs/${w.orgId}/device-groups`, { name: 'Finance-PCs', siteId: siteA });
    loose = await made(`/orgs/${w.orgId}/device-groups`, { name: 'Anywhere' });
    inGroupA = await enroll(app, await enrollmentKey(app, orgAdmin, w.orgId, { deviceGroupId: groupA }));
    inSiteB = await enroll(app, await enrollmentKey(app, orgAdmin, w.orgId, { siteId: siteB }));
    plain = await enroll(app, await enrollmentKey(app, orgAdmin, w.orgId));
    const elsewhere = await createTenant(app);
    elsewhereAdmin = (await login(app, elsewhere.orgAdmin)).accessToken;
    elsewhereDevice = await enroll(app, await enrollmentKey(app, elsewhereAdmin, elsewhere.orgId));
    techA = (await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { siteIds: [siteA] })).token;
    for (const d of [inGroupA, inSiteB, plain]) expect((await heartbeat(app, d)).status).toBe(200);
  });
  afterAll(async () => app?.close());

  it('each level wins over the ones below; the decision route and the heartbeat agree; clearing one falls back', async () => {
    expect(await decision(inGroupA)).toEqual({ component: 'agent', offer: '2.0.0', rule: 'rollout', detail: 'Fleet target 2.0.0 (rollout at 100%)' });
    const steps: [string, string, string, string][] = [
      [`/partners/${w.partnerId}/agent-update-settings`, '1.1.0', 'pinned_partner', 'to 1.1.0'],
      [`/orgs/${w.orgId}/agent-update-settings`, '1.2.0', 'pinned_org', 'to 1.2.0'],
      [`/sites/${siteA}/agent-update-settings`, '1.3.0', 'pinned_site', 'Pinned by site Site A to 1.3.0'],
      [`/device-groups/${groupA}/agent-update-settings`, '1.4.0', 'pinned_group', 'Pinned by device group Finance-PCs to 1.4.0'],
      [`/devices/${inGroupA.deviceId}/agent-update-settings`, '1.5.0', 'pinned_device', 'Pinned by the device to 1.5.0'],
    ];
    for (const [path, version, rule, detail] of steps) {
      const res = await put(path, { agent: version }, w.tokens.partnerFull);
      expect(res.status, path).toBe(200);
      expect(res.body.pinnedVersions).toEqual({ agent: version });
      const r = await decision(inGroupA);
      expect(r).toMatchObject({ offer: version, rule });
      expect(r?.detail).toContain(detail);
      expect(await offered(inGroupA)).toBe(version);
    }
    // The device in site B has no site, group or device pin: the organisation's wins there.
    expect(await decision(inSiteB)).toMatchObject({ offer: '1.2.0', rule: 'pinned_org' });
    expect(await offered(inSiteB)).toBe('1.2.0');
    // Clearing the device pin (null) gives the group's back; GET reads what is set.
    expect((await put(`/devices/${inGroupA.deviceId}/agent-update-settings`, null)).body).toEqual({ pinnedVersions: null });
    expect((await app.api('GET', `/device-groups/${groupA}/agent-update-settings`, { token: w.tokens.orgAdmin })).body).toEqual({ pinnedVersions: { agent: '1.4.0' } });
    expect(await decision(inGroupA)).toMatchObject({ offer: '1.4.0', rule: 'pinned_group' });
    expect(await offered(inGroupA)).toBe('1.4.0');
    // A pin to a version without a build for the platform offers nothing (not the target either).
    expect((await put(`/devices/${inGroupA.deviceId}/agent-update-settings`, { agent: '1.9.9' })).status).toBe(200);
    expect(await decision(inGroupA)).toMatchObject({ offer: null, rule: 'no_build' });
    expect(await offered(inGroupA)).toBeNull();
    // Audited, at the pinned level, in the organisation.
    const audit = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'agent.update_pins.update'), eq(auditLogs.targetId, groupA)));
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ orgId: w.orgId, targetType: 'device_group', details: { pinnedVersions: { agent: '1.4.0' } } });
    for (const path of [`/devices/${inGroupA.deviceId}`, `/device-groups/${groupA}`, `/sites/${siteA}`, `/orgs/${w.orgId}`, `/partners/${w.partnerId}`]) {
      expect((await put(`${path}/agent-update-settings`, null, w.tokens.partnerFull)).status).toBe(200);
    }
    expect(await decision(inGroupA)).toMatchObject({ offer: '2.0.0', rule: 'rollout' });
  });

  it('a site-restricted technician pins inside its site only: not a sibling site’s device, not that site, not a group outside its sites', async () => {
    expect((await put(`/devices/${inGroupA.deviceId}/agent-update-settings`, { agent: '1.3.0' }, techA)).status).toBe(200);
    expect((await put(`/sites/${siteA}/agent-update-settings`, { agent: '1.3.0' }, techA)).status).toBe(200);
    expect((await put(`/device-groups/${groupA}/agent-update-settings`, { agent: '1.3.0' }, techA)).status).toBe(200);
    const sibling = await put(`/devices/${inSiteB.deviceId}/agent-update-settings`, { agent: '1.3.0' }, techA);
    expect(sibling.status).toBe(404);
    expect((await app.api('GET', `/devices/${inSiteB.deviceId}/update-decision`, { token: techA })).status).toBe(404);
    expect((await put(`/sites/${siteB}/agent-update-settings`, { agent: '1.3.0' }, techA)).status).toBe(404);
    const looseGroup = await put(`/device-groups/${loose}/agent-update-settings`, { agent: '1.3.0' }, techA);
    expect(looseGroup.status).toBe(403);
    expect(looseGroup.body.code).toBe('placement_forbidden');
    // A technician restricted to device groups pins its groups, never a whole site.
    const groupTech = (await orgUserWithRole(app, w.orgId, ROLE.orgTechnician, { deviceGroupIds: [groupA] })).token;
    expect((await put(`/device-groups/${groupA}/agent-update-settings`, { agent: '1.3.0' }, groupTech)).status).toBe(200);
    expect((await put(`/sites/${siteA}/agent-update-settings`, { agent: '1.3.0' }, groupTech)).body.code).toBe('placement_forbidden');
    // Nothing was written by the refused attempts.
    expect((await app.api('GET', `/devices/${inSiteB.deviceId}/agent-update-settings`, { token: w.tokens.orgAdmin })).body).toEqual({ pinnedVersions: null });
    expect((await app.api('GET', `/sites/${siteB}/agent-update-settings`, { token: w.tokens.orgAdmin })).body).toEqual({ pinnedVersions: null });
    for (const path of [`/devices/${inGroupA.deviceId}`, `/device-groups/${groupA}`, `/sites/${siteA}`]) expect((await put(`${path}/agent-update-settings`, null)).status).toBe(200);
  });

  it('another tenant’s device, group or site is a 404 both ways; API keys need devices:write to pin', async () => {
    expect((await put(`/devices/${elsewhereDevice.deviceId}/agent-update-settings`, { agent: '1.3.0' })).status).toBe(404);
    expect((await app.api('GET', `/devices/${elsewhereDevice.deviceId}/update-decision`, { token: w.tokens.orgAdmin })).status).toBe(404);
    expect((await put(`/devices/${plain.deviceId}/agent-update-settings`, { agent: '1.3.0' }, elsewhereAdmin)).status).toBe(404);
    expect((await put(`/sites/${siteA}/agent-update-settings`, { agent: '1.3.0' }, elsewhereAdmin)).status).toBe(404);
    expect((await put(`/device-groups/${groupA}/agent-update-settings`, { agent: '1.3.0' }, elsewhereAdmin)).status).toBe(404);
    const key = async (action: string) =>
      (await app.api('POST', '/api-keys', { token: w.tokens.orgAdmin, body: { name: `pins-${action}`, permissions: [{ resource: 'devices', action }] } })).body.key as string;
    const reader = await key('read');
    expect((await app.api('GET', `/devices/${plain.deviceId}/update-decision`, { token: reader })).status).toBe(200);
    expect((await put(`/devices/${plain.deviceId}/agent-update-settings`, { agent: '1.3.0' }, reader)).status).toBe(403);
    const writer = await key('write');
    expect((await put(`/devices/${plain.deviceId}/agent-update-settings`, { agent: '1.3.0' }, writer)).status).toBe(200);
    expect((await put(`/devices/${plain.deviceId}/agent-update-settings`, null, writer)).status).toBe(200);
    // A malformed version is a 400 with the envelope.
    const bad = await put(`/devices/${plain.deviceId}/agent-update-settings`, { agent: 'not a version' });
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBeDefined();
  });

  it('the distribution counts versions and reasons for being behind over real devices; per organisation, partner and fleet', async () => {
    const partner = w.tokens.partnerFull;
    const key = await enrollmentKey(app, partner, w.otherOrgId);
    const rolling = await enroll(app, key);
    const autoOff = await enroll(app, key);
    await enroll(app, key); // never heartbeats: offline
    const current = await enroll(app, key, { agentVersion: '2.0.0' });
    const pinned = await enroll(app, key);
    const arm = await enroll(app, key, { arch: 'arm64' }); // no build for its platform
    for (const d of [rolling, autoOff, pinned, arm]) expect((await heartbeat(app, d)).status).toBe(200);
    expect((await heartbeat(app, current, { components: { agent: '2.0.0' } })).status).toBe(200);
    expect((await app.api('POST', `/devices/${autoOff.deviceId}/auto-update`, { token: partner, body: { enabled: false } })).status).toBe(200);
    expect((await put(`/devices/${pinned.deviceId}/agent-update-settings`, { agent: '1.1.0' }, partner)).status).toBe(200);
    const res = await app.api('GET', `/agent-versions/distribution?orgId=${w.otherOrgId}`, { token: partner });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      versions: [
        { component: 'agent', version: '2.0.0', devices: 1 },
        { component: 'agent', version: '1.0.0', devices: 5 },
      ],
      behind: [
        { reason: 'auto_update_off', devices: 1 },
        { reason: 'pinned', devices: 1 },
        { reason: 'no_build', devices: 1 },
        { reason: 'offline', devices: 1 },
        { reason: 'rollout', devices: 1 },
      ],
    });
    // The partner's picture adds organisation A's three devices (two online behind by the rollout, one in site B).
    const ofPartner = await app.api('GET', `/agent-versions/distribution?partnerId=${w.partnerId}`, { token: admin });
    expect(ofPartner.status).toBe(200);
    const sum = (b: { devices: number }[]) => b.reduce((n, x) => n + x.devices, 0);
    expect(sum(ofPartner.body.versions)).toBe(9);
    expect(ofPartner.body.behind).toContainEqual({ reason: 'rollout', devices: 4 });
    // Without a name: a partner user's own partner; the platform's whole fleet for its administrators.
    expect((await app.api('GET', '/agent-versions/distribution', { token: partner })).body).toEqual(ofPartner.body);
    expect(sum((await app.api('GET', '/agent-versions/distribution', { token: admin })).body.versions)).toBe(10);
    // An organisation user sees its own; a site-restricted technician only its site's devices.
    expect(sum((await app.api('GET', '/agent-versions/distribution', { token: w.tokens.orgAdmin })).body.versions)).toBe(3);
    expect(sum((await app.api('GET', '/agent-versions/distribution', { token: techA })).body.versions)).toBe(1);
    // Another tenant's organisation: 404.
    expect((await app.api('GET', `/agent-versions/distribution?orgId=${w.otherOrgId}`, { token: elsewhereAdmin })).status).toBe(404);
    // A partner user restricted to organisation A does not count organisation B.
    const selected = (await partnerUserWithRole(app, w.partnerId, ROLE.partnerReadOnly, 'selected', [w.orgId])).token;
    expect(sum((await app.api('GET', '/agent-versions/distribution', { token: selected })).body.versions)).toBe(3);
  });
});
