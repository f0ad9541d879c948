import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import { agentsOf, deviceAuth, deviceOf } from './context.js';
import { createEnrollmentKey, decommission, enroll, getDevice, listDevices, listEnrollmentKeys, revokeEnrollmentKey, setAutoUpdate, updateHistory, updateNow } from './devices.js';
import { heartbeat, updateReport } from './heartbeat.js';
import { getSettings, putSettings } from './settings.js';
import { mountReleaseRoutes } from './release-routes.js';
import { getPins, putPins, type PinOwner } from './pins.js';
import { explainDecision } from './explain.js';
import { BEHIND_REASONS, behindCondition, distribution } from './distribution.js';
import { COMPONENTS } from './decision.js';
import {
  AutoUpdateBody, Device, Enrolled, EnrollBody, EnrollmentKey, EnrollmentKeyCreate, EnrollmentKeyCreated, HeartbeatAnswer, HeartbeatBody,
  SettingsBody, SettingsOut, UpdateHistoryEntry, UpdateNowAnswer, UpdateNowBody, UpdateReportBody, PinsBody, PinsOut, DecisionOut, DistributionOut,
} from './api-schemas.js';

const uuidParam = (name: string, description: string) => z.uuid().openapi({ param: { name, in: 'path' }, description });
const IdParam = z.object({ id: uuidParam('id', 'Device id') });
const OrgParam = z.object({ orgId: uuidParam('orgId', 'Organisation id') });
const OrgKeyParam = z.object({ orgId: uuidParam('orgId', 'Organisation id'), id: uuidParam('id', 'Enrolment key id') });
const PartnerParam = z.object({ partnerId: uuidParam('partnerId', 'Partner id') });
const Paging = z.object({
  page: PageQuery.shape.page.openapi({ description: 'Page (from 1)' }),
  limit: PageQuery.shape.limit.openapi({ description: 'Page size (1-100)' }),
});
const DeviceQuery = Paging.extend({
  orgId: z.uuid().optional().openapi({ description: 'Organisation (partner and system callers)' }),
  partnerId: z.uuid().optional().openapi({ description: 'Partner (system callers)' }),
  status: z.enum(['online', 'offline', 'updating']).optional().openapi({ description: 'Only devices in this status' }),
  siteId: z.uuid().optional().openapi({ description: 'Only devices of this site' }),
  deviceGroupId: z.uuid().optional().openapi({ description: 'Only devices of this device group' }),
  os: z.string().max(50).optional().openapi({ description: 'Only devices of this operating system' }),
  hostname: z.string().max(255).optional().openapi({ description: 'Host name contains this text' }),
  agentVersion: z.string().max(64).optional().openapi({ description: 'Only devices on this agent version' }),
  behind: z
    .enum(BEHIND_REASONS)
    .optional()
    .openapi({ description: 'Only devices behind the fleet target for this reason, decided as `GET /agent-versions/distribution` counts them (docs/decisions.md "Agent distribution at scale")' }),
  component: z
    .enum(COMPONENTS)
    .optional()
    .openapi({ description: 'With `behind` only (alone it is 400): the reason of this component (without it: of the first component behind, agent, helper, watchdog, as the distribution counts)' }),
}).refine((q) => q.component === undefined || q.behind !== undefined, { path: ['component'], message: '`component` narrows `behind`: give `behind` too' });
const accepted = (schema: z.ZodType, description: string) => ({ 202: json(schema, description) });

/** Devices, enrolment, heartbeats, update reports and update settings; releases in release-routes.ts. */
export function mountAgentRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const ctx = agentsOf(keel);
  const interval = ctx.intervalSeconds;
  const auth = authenticate(keel);
  const device = deviceAuth(keel);
  // The heartbeat's own instance counts refused tokens as `keel_agent_heartbeats_total{outcome="unauthorized"}`.
  const heartbeatDevice = deviceAuth(keel, { counts: 'heartbeat' });

  api.openapi(
    createRoute({
      method: 'post', path: '/orgs/{orgId}/enrollment-keys', tags: ['devices'], summary: 'Create an enrolment key (the key is shown once)',
      middleware: [auth, ...guard(keel, { orgIdParam: 'orgId', permission: ['devices', 'write'] })],
      request: { params: OrgParam, body: jsonBody(EnrollmentKeyCreate) },
      responses: { 201: json(EnrollmentKeyCreated, 'Created'), ...errors(404) },
    }),
    async (c) => c.json(await createEnrollmentKey(keel, accessOf(c), c.req.valid('param').orgId, c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/enrollment-keys', tags: ['devices'], summary: "An organisation's enrolment keys (never the keys themselves)",
      middleware: [auth, ...guard(keel, { orgIdParam: 'orgId', permission: ['devices', 'read'] })],
      request: { params: OrgParam, query: Paging },
      responses: { 200: json(paginated(EnrollmentKey), 'Keys'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listEnrollmentKeys(keel, accessOf(c), c.req.valid('param').orgId, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/orgs/{orgId}/enrollment-keys/{id}', tags: ['devices'], summary: 'Revoke an enrolment key',
      middleware: [auth, ...guard(keel, { orgIdParam: 'orgId', permission: ['devices', 'write'] })],
      request: { params: OrgKeyParam },
      responses: { 204: { description: 'Revoked' }, ...errors(404) },
    }),
    async (c) => {
      const p = c.req.valid('param');
      await revokeEnrollmentKey(keel, accessOf(c), p.orgId, p.id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agents/enroll', tags: ['agents'], summary: 'Enrol a device with an organisation key',
      description:
        'Answers the device id and its token (shown once). A key bound to a site or device group places the device there. ' +
        'Rate limited per client IP (`ENROLL_IP_LIMIT`, default 60 a minute; every attempt counts, a wrong key too) and per enrolment key ' +
        '(`ENROLL_KEY_LIMIT`, default 600 a minute): beyond either, 429 `rate_limited` with `Retry-After` and `retryAfter` in seconds.',
      request: { body: jsonBody(EnrollBody) },
      responses: { 201: json(Enrolled, 'Enrolled'), ...errors(401, 404, 429) },
    }),
    async (c) => c.json(await enroll(keel, c.req.valid('json'), interval, c.get('ip') || null), 201),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agents/heartbeat', tags: ['agents'], summary: 'Heartbeat: report versions, get the next interval and any update',
      description: 'Limited per device (`AGENT_HEARTBEAT_LIMIT`, default 60 a minute): beyond it, 429 `rate_limited` with `Retry-After`.',
      middleware: [heartbeatDevice],
      request: { body: jsonBody(HeartbeatBody) },
      responses: { 200: json(HeartbeatAnswer, 'Answer'), ...errors(429) },
    }),
    async (c) => {
      const { tokenHash, device: d } = deviceOf(c);
      return c.json(await heartbeat(ctx, tokenHash, d, c.req.valid('json')), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/agents/update-report', tags: ['agents'], summary: 'Report an update stage',
      description:
        'Counts towards a rollout only for an update Keel offered to this device (once per device, on its platform); a report of anything else is recorded and counts for nothing. ' +
        '`error` is stored cut to 500 characters. Limited per device (`AGENT_REPORT_LIMIT`, default 30 an hour): beyond it, 429 `rate_limited` with `Retry-After`.',
      middleware: [device],
      request: { body: jsonBody(UpdateReportBody) },
      responses: { 204: { description: 'Recorded' }, ...errors(429) },
    }),
    async (c) => {
      await updateReport(ctx, deviceOf(c).device, c.req.valid('json'));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/devices', tags: ['devices'], summary: 'Devices the caller sees (its organisations, sites and device groups)',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      request: { query: DeviceQuery },
      responses: { 200: json(paginated(Device), 'Devices'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      await ctx.state.flushLastSeen();
      const access = accessOf(c);
      const behind = q.behind ? await behindCondition(ctx, access, q.behind, q.component) : undefined;
      const { data, total } = await listDevices(keel, access, q, interval, behind);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/devices/update-now', tags: ['devices'], summary: 'Offer the current target at the next heartbeat, once',
      description:
        'Ignores the maintenance window and the rollout cohort; never overrides auto-update off, a version pin or a halted rollout. ' +
        'It is also the retry: a version a device failed or rolled back is not offered to it again until update-now names it (each lifted block is `retried` in its update history).',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'execute'] })],
      request: { body: jsonBody(UpdateNowBody) },
      responses: { ...accepted(UpdateNowAnswer, 'Accepted'), ...errors(404) },
    }),
    async (c) => c.json({ deviceIds: await updateNow(keel, accessOf(c), c.req.valid('json').deviceIds, requestInfo(c)) }, 202),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/devices/{id}', tags: ['devices'], summary: 'A device',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      request: { params: IdParam },
      responses: { 200: json(Device, 'Device'), ...errors(404) },
    }),
    async (c) => {
      await ctx.state.flushLastSeen();
      return c.json(await getDevice(keel, accessOf(c), c.req.valid('param').id, interval), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/devices/{id}/update-history', tags: ['devices'], summary: "A device's update history, newest first",
      description: 'What Keel offered (and when a retry lifted a block) and what the agent reported: started, succeeded, failed, rolled_back, with its reason.',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      request: { params: IdParam, query: Paging },
      responses: { 200: json(paginated(UpdateHistoryEntry), 'History'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await updateHistory(keel, accessOf(c), c.req.valid('param').id, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/devices/{id}', tags: ['devices'], summary: 'Decommission a device (its token stops working)',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'delete'] })],
      request: { params: IdParam },
      responses: { 204: { description: 'Decommissioned' }, ...errors(404) },
    }),
    async (c) => {
      await decommission(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/devices/{id}/auto-update', tags: ['devices'], summary: "Turn a device's automatic updates on or off",
      middleware: [auth, ...guard(keel, { permission: ['devices', 'execute'] })],
      request: { params: IdParam, body: jsonBody(AutoUpdateBody) },
      responses: { 200: json(Device, 'Device'), ...errors(404) },
    }),
    async (c) => c.json(await setAutoUpdate(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json').enabled, requestInfo(c), interval), 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/agent-update-settings', tags: ['agents'], summary: "An organisation's maintenance window and version pins",
      middleware: [auth, ...guard(keel, { orgIdParam: 'orgId', permission: ['devices', 'read'] })],
      request: { params: OrgParam },
      responses: { 200: json(SettingsOut, 'Settings'), ...errors(404) },
    }),
    async (c) => c.json(await getSettings(keel, accessOf(c), 'org', c.req.valid('param').orgId), 200),
  );

  api.openapi(
    createRoute({
      method: 'put', path: '/orgs/{orgId}/agent-update-settings', tags: ['agents'], summary: "Set an organisation's maintenance window and version pins",
      description: 'Each field optional: absent is unchanged, null clears it. The organisation window overrides the partner window.',
      middleware: [auth, ...guard(keel, { orgIdParam: 'orgId', wholeOrg: true, permission: ['devices', 'write'] })],
      request: { params: OrgParam, body: jsonBody(SettingsBody) },
      responses: { 200: json(SettingsOut, 'Settings'), ...errors(404) },
    }),
    async (c) => c.json(await putSettings(keel, accessOf(c), 'org', c.req.valid('param').orgId, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/partners/{partnerId}/agent-update-settings', tags: ['agents'], summary: "A partner's default maintenance window and version pins",
      middleware: [auth, ...guard(keel, { scopes: ['system', 'partner'], permission: ['devices', 'read'] })],
      request: { params: PartnerParam },
      responses: { 200: json(SettingsOut, 'Settings'), ...errors(404) },
    }),
    async (c) => c.json(await getSettings(keel, accessOf(c), 'partner', c.req.valid('param').partnerId), 200),
  );

  api.openapi(
    createRoute({
      method: 'put', path: '/partners/{partnerId}/agent-update-settings', tags: ['agents'], summary: "Set a partner's default maintenance window and version pins",
      middleware: [auth, ...guard(keel, { scopes: ['system', 'partner'], fullOrgAccess: true, wholeOrg: true, permission: ['devices', 'write'] })],
      request: { params: PartnerParam, body: jsonBody(SettingsBody) },
      responses: { 200: json(SettingsOut, 'Settings'), ...errors(404) },
    }),
    async (c) => c.json(await putSettings(keel, accessOf(c), 'partner', c.req.valid('param').partnerId, c.req.valid('json'), requestInfo(c)), 200),
  );

  mountPinRoutes(api, keel);
  mountReleaseRoutes(api, keel);
}

/**
 * Pins of a device, a device group or a site; the decision of a device, explained; the fleet's
 * distribution of versions (docs/decisions.md "Agent pins and distribution").
 */
function mountPinRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const ctx = agentsOf(keel);
  const auth = authenticate(keel);
  const levels: { path: string; type: PinOwner; what: string }[] = [
    { path: '/devices/{id}/agent-update-settings', type: 'device', what: 'a device' },
    { path: '/device-groups/{id}/agent-update-settings', type: 'group', what: 'a device group' },
    { path: '/sites/{id}/agent-update-settings', type: 'site', what: 'a site' },
  ];
  const PinParam = (what: string) => z.object({ id: uuidParam('id', `Id of ${what}`) });
  for (const l of levels) {
    api.openapi(
      createRoute({
        method: 'get', path: l.path, tags: ['agents'], summary: `The version pins of ${l.what}`,
        middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
        request: { params: PinParam(l.what) },
        responses: { 200: json(PinsOut, 'Pins'), ...errors(403, 404) },
      }),
      async (c) => c.json(await getPins(keel, accessOf(c), l.type, c.req.valid('param').id), 200),
    );
    api.openapi(
      createRoute({
        method: 'put', path: l.path, tags: ['agents'], summary: `Set the version pins of ${l.what}`,
        description:
          'Precedence, per component: device > device group > site > organisation > partner > fleet target. `pinnedVersions` absent is unchanged, null clears it. ' +
          'A caller restricted to some sites or device groups pins only inside its restriction: not a site when restricted to groups, not a group outside its sites (403 `placement_forbidden`).',
        middleware: [auth, ...guard(keel, { permission: ['devices', 'write'] })],
        request: { params: PinParam(l.what), body: jsonBody(PinsBody) },
        responses: { 200: json(PinsOut, 'Pins'), ...errors(403, 404) },
      }),
      async (c) => c.json(await putPins(keel, accessOf(c), l.type, c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
    );
  }

  api.openapi(
    createRoute({
      method: 'get', path: '/devices/{id}/update-decision', tags: ['devices'], summary: 'What the next heartbeat would offer, per component, and why',
      description: 'The heartbeat\'s own decision on the current settings: the version offered (or null), the rule that decided and a sentence naming the level of a pin.',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      request: { params: IdParam },
      responses: { 200: json(DecisionOut, 'Decision'), ...errors(404) },
    }),
    async (c) => c.json({ data: await explainDecision(ctx, accessOf(c), c.req.valid('param').id) }, 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/agent-versions/distribution', tags: ['agents'], summary: 'Devices per component version, and per reason for being behind the target',
      description:
        'Over the devices the caller sees: one organisation (`orgId`), a partner\'s (`partnerId`), or the whole fleet for platform administrators naming neither. ' +
        '`offline` and `updating` are the status the offline sweep keeps (within its 10 s of the last-seen times); `GET /devices?behind=<reason>` lists the devices of a reason.',
      middleware: [auth, ...guard(keel, { permission: ['devices', 'read'] })],
      responses: { 200: json(DistributionOut, 'Distribution'), ...errors(404) },
    }),
    async (c) => c.json(await distribution(ctx, accessOf(c)), 200),
  );
}
