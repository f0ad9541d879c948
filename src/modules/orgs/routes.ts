import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { IdParam, OrgIdParam, ScopeQuery } from '../access/api-schemas.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import { followGroupSite } from '../agents/devices.js';
import { PARTNER_SLUG } from '../tenancy/service.js';
import {
  createGroup,
  createOrg,
  createPartnerAudited,
  createSite,
  deleteGroup,
  deleteOrg,
  deletePartner,
  deleteSite,
  getOrg,
  getPartner,
  listGroups,
  listOrgs,
  listPartners,
  listSites,
  updateGroup,
  updateOrg,
  updatePartner,
  updateSite,
} from './service.js';

/** `settings.security` (docs/decisions.md "Access and tenancy"); unknown keys are a 400. */
const Method = (name: string) => z.boolean().optional().openapi({ description: `Whether ${name} may be used as a second factor (default true; false refuses enrolling it and skips it at login)` });
const Settings = z
  .object({
    security: z
      .object({
        requireMfa: z.boolean().optional().openapi({ description: 'When true, members cannot turn their second factor off (403); default false' }),
        allowedMfaMethods: z
          .object({ totp: Method('an authenticator app (TOTP)'), sms: Method('SMS'), passkey: Method('a passkey') })
          .strict()
          .optional()
          .openapi({ description: 'Which second factors members may use; a method left out keeps its value' }),
      })
      .strict()
      .optional()
      .openapi({ description: 'Security policy for members. An organisation and its partner both apply: MFA is required if either requires it, a method allowed only if both allow it' }),
  })
  .strict()
  .openapi('TenantSettings', {
    description: 'Settings to change, merged into the current ones: keys given replace, keys left out stay; an unknown key is a 400',
    example: { security: { requireMfa: true, allowedMfaMethods: { sms: false } } },
  });

const SettingsOut = z.record(z.string(), z.unknown()).openapi({
  description: 'Stored settings: `security.requireMfa` and `security.allowedMfaMethods.{totp,sms,passkey}` (absent keys take their defaults: false and true)',
  example: { security: { requireMfa: true, allowedMfaMethods: { sms: false } } },
});
const Name = z.string().trim().min(1).max(255);
const NameIn = (what: string, example: string) => Name.openapi({ description: `Name of the ${what}, 1 to 255 characters after trimming`, example });
const Created = z.string().openapi({ description: 'When it was created, ISO 8601 UTC' });
const Updated = z.string().openapi({ description: 'Last change, ISO 8601 UTC' });
const SiteIdIn = z.uuid().nullable().optional().openapi({ description: 'The site (of the same organisation) the group belongs to; null for none' });

const Partner = z
  .object({
    id: z.uuid().openapi({ description: 'Partner id (UUID): for /partners/{id}, and the `partnerId` system callers name a partner with' }),
    name: z.string().openapi({ description: 'Display name of the partner (1 to 255 characters)', example: 'Analytical Engines Ltd' }),
    slug: z.string().openapi({ description: 'Unique lowercase name of the partner: its technicians\' sign-in page is /login/<slug>', example: 'analytical-engines' }),
    settings: SettingsOut,
    createdAt: Created,
    updatedAt: Updated,
  })
  .openapi('Partner', { description: 'A partner: a managed-service provider owning organisations' });
const Org = z
  .object({
    id: z.uuid().openapi({ description: 'Organisation id (UUID): for /orgs/{id}, and the `orgId` wherever an organisation is named' }),
    partnerId: z.uuid().nullable().openapi({ description: 'The partner that manages it; null for an organisation without a partner' }),
    name: z.string().openapi({ description: 'Display name of the organisation (1 to 255 characters)', example: 'Contoso Dental' }),
    settings: SettingsOut,
    createdAt: Created,
    updatedAt: Updated,
  })
  .openapi('Organization', { description: "An organisation: a partner's customer, owning sites, device groups and devices" });
const Site = z
  .object({
    id: z.uuid().openapi({ description: 'Site id (UUID): for /sites/{id}, and in the `siteIds` restriction of organisation users' }),
    orgId: z.uuid().openapi({ description: 'The organisation it belongs to' }),
    name: z.string().openapi({ description: 'Display name of the site (1 to 255 characters)', example: 'Head office' }),
    createdAt: Created,
    updatedAt: Updated,
  })
  .openapi('Site', { description: 'A site (location) of an organisation' });
const Group = z
  .object({
    id: z.uuid().openapi({ description: 'Device group id (UUID): for /device-groups/{id}, and in the `deviceGroupIds` restriction of organisation users' }),
    orgId: z.uuid().openapi({ description: 'The organisation it belongs to' }),
    siteId: z.uuid().nullable().openapi({ description: 'The site it belongs to; null for none' }),
    name: z.string().openapi({ description: 'Display name of the device group (1 to 255 characters)', example: 'Reception PCs' }),
    createdAt: Created,
    updatedAt: Updated,
  })
  .openapi('DeviceGroup', { description: 'A group of devices within an organisation, optionally within one site' });

const SlugIn = z
  .string()
  .regex(PARTNER_SLUG, 'must be 1-63 lowercase letters, digits and inner hyphens')
  .openapi({ description: 'Unique lowercase slug (1-63 of a-z, 0-9 and inner hyphens): the sign-in page /login/<slug>; default one derived from the name. Taken by another partner: 409 `partner_slug_taken`', example: 'analytical-engines' });
const PartnerCreate = z
  .object({ name: NameIn('partner', 'Analytical Engines Ltd'), slug: SlugIn.optional(), settings: Settings.optional() })
  .openapi('PartnerCreate', { example: { name: 'Analytical Engines Ltd', settings: { security: { requireMfa: true } } } });
const PartnerPatch = z
  .object({ name: NameIn('partner', 'Analytical Engines Ltd').optional(), slug: SlugIn.optional(), settings: Settings.optional() })
  .openapi('PartnerUpdate', { example: { settings: { security: { allowedMfaMethods: { sms: false } } } } });
const OrgCreate = z
  .object({
    name: NameIn('organisation', 'Contoso Dental'),
    partnerId: z.uuid().optional().openapi({ description: 'The partner to create it under: required of platform administrators (here or as the `partnerId` query parameter; 400 naming `partnerId` without it). Partner users always create under their own partner' }),
    settings: Settings.optional(),
  })
  .openapi('OrganizationCreate', { example: { name: 'Contoso Dental', settings: { security: { requireMfa: true } } } });
const OrgPatch = z
  .object({ name: NameIn('organisation', 'Contoso Dental').optional(), settings: Settings.optional() })
  .openapi('OrganizationUpdate', { example: { name: 'Contoso Dental Group' } });
const SiteCreate = z.object({ name: NameIn('site', 'Head office') }).openapi('SiteCreate', { example: { name: 'Head office' } });
const SitePatch = z.object({ name: NameIn('site', 'Head office').optional() }).openapi('SiteUpdate', { example: { name: 'Main office' } });
const GroupCreate = z.object({ name: NameIn('device group', 'Reception PCs'), siteId: SiteIdIn }).openapi('DeviceGroupCreate', { example: { name: 'Reception PCs', siteId: null } });
const GroupPatch = z
  .object({ name: NameIn('device group', 'Reception PCs').optional(), siteId: SiteIdIn })
  .openapi('DeviceGroupUpdate', { example: { name: 'Front desk PCs' } });

const ListQuery = PageQuery.extend(ScopeQuery.shape);
const noContent = { 204: { description: 'Done' } } as const;

type Action = 'read' | 'write' | 'delete';

/**
 * Tenancy endpoints of docs/decisions.md "Endpoints Keel adds". Partners and organisations are behind
 * `organizations:*`, sites behind `sites:*`, device groups behind `devices:*` (docs/decisions.md).
 * Partner-wide writes (a partner's settings, creating or deleting an organisation) carry the guard's
 * `fullOrgAccess`: a partner user without `orgAccess: all` gets 403 `full_org_access_required`.
 */
export function mountOrgRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const orgs = (action: Action, extra: Parameters<typeof guard>[1] = {}) => [auth, ...guard(keel, { ...extra, permission: ['organizations', action] })];
  // Writes of sites and device groups shape the whole organisation: callers restricted to some sites or groups are refused (wholeOrg).
  const inOrg = (resource: 'sites' | 'devices', action: Action) => [auth, ...guard(keel, { orgIdParam: 'orgId', wholeOrg: action !== 'read', permission: [resource, action] })];
  const scoped = (resource: 'sites' | 'devices', action: Action) => [auth, ...guard(keel, { wholeOrg: action !== 'read', permission: [resource, action] })];

  api.openapi(
    createRoute({
      method: 'get', path: '/partners', tags: ['partners'], summary: 'All partners (platform administrators)',
      middleware: orgs('read', { scopes: ['system'] }),
      request: { query: PageQuery },
      responses: { 200: json(paginated(Partner), 'Partners') },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listPartners(keel.db, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/partners', tags: ['partners'], summary: 'Create a partner (platform administrators)',
      middleware: orgs('write', { scopes: ['system'] }),
      request: { body: jsonBody(PartnerCreate) },
      responses: { 201: json(Partner, 'Created'), ...errors(409) },
    }),
    async (c) => c.json(await createPartnerAudited(keel, c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/partners/{id}', tags: ['partners'], summary: 'A partner (its own for partner users)',
      middleware: orgs('read'),
      request: { params: IdParam },
      responses: { 200: json(Partner, 'Partner'), ...errors(404) },
    }),
    async (c) => c.json(await getPartner(keel.db, accessOf(c), c.req.valid('param').id), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/partners/{id}', tags: ['partners'], summary: 'Rename a partner, change its slug or its settings.security',
      middleware: orgs('write', { scopes: ['system', 'partner'], fullOrgAccess: true }),
      request: { params: IdParam, body: jsonBody(PartnerPatch) },
      responses: { 200: json(Partner, 'Updated'), ...errors(404, 409) },
    }),
    async (c) => c.json(await updatePartner(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/partners/{id}', tags: ['partners'],
      summary: 'Delete a partner (platform administrators): refused with 409 `partner_not_empty` while it has organisations; its members lose their association (the accounts stay), its roles and API keys go',
      middleware: orgs('delete', { scopes: ['system'] }),
      request: { params: IdParam },
      responses: { ...noContent, ...errors(404, 409) },
    }),
    async (c) => {
      await deletePartner(keel, c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs', tags: ['organizations'], summary: 'Organisations the caller reaches',
      middleware: orgs('read'),
      request: { query: ListQuery },
      responses: { 200: json(paginated(Org), 'Organisations'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listOrgs(keel.db, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/orgs', tags: ['organizations'], summary: "Create an organisation (under the caller's partner, or a named one)",
      middleware: orgs('write', { scopes: ['system', 'partner'], fullOrgAccess: true }),
      request: { body: jsonBody(OrgCreate) },
      responses: { 201: json(Org, 'Created'), ...errors(404) },
    }),
    async (c) => {
      const { name, settings } = c.req.valid('json');
      return c.json(await createOrg(keel, accessOf(c), { name, settings }, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{id}', tags: ['organizations'], summary: 'An organisation',
      middleware: orgs('read'),
      request: { params: IdParam },
      responses: { 200: json(Org, 'Organisation'), ...errors(404) },
    }),
    async (c) => c.json(await getOrg(keel.db, accessOf(c), c.req.valid('param').id), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/orgs/{id}', tags: ['organizations'], summary: 'Rename an organisation or change its settings.security',
      middleware: orgs('write', { wholeOrg: true }),
      request: { params: IdParam, body: jsonBody(OrgPatch) },
      responses: { 200: json(Org, 'Updated'), ...errors(404) },
    }),
    async (c) => c.json(await updateOrg(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/orgs/{id}', tags: ['organizations'], summary: 'Delete an organisation and what it owns',
      middleware: orgs('delete', { fullOrgAccess: true, wholeOrg: true }),
      request: { params: IdParam },
      responses: { ...noContent, ...errors(404) },
    }),
    async (c) => {
      await deleteOrg(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/sites', tags: ['sites'], summary: 'Sites of an organisation (within the caller’s site restriction)',
      middleware: inOrg('sites', 'read'),
      request: { params: OrgIdParam, query: PageQuery },
      responses: { 200: json(paginated(Site), 'Sites'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listSites(keel.db, accessOf(c), c.req.valid('param').orgId, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/orgs/{orgId}/sites', tags: ['sites'], summary: 'Create a site',
      middleware: inOrg('sites', 'write'),
      request: { params: OrgIdParam, body: jsonBody(SiteCreate) },
      responses: { 201: json(Site, 'Created'), ...errors(404) },
    }),
    async (c) => c.json(await createSite(keel, accessOf(c), c.req.valid('param').orgId, c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/sites/{id}', tags: ['sites'], summary: 'Rename a site',
      middleware: scoped('sites', 'write'),
      request: { params: IdParam, body: jsonBody(SitePatch) },
      responses: { 200: json(Site, 'Updated'), ...errors(404) },
    }),
    async (c) => c.json(await updateSite(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/sites/{id}', tags: ['sites'], summary: 'Delete a site (its devices and groups stay, without a site)',
      middleware: scoped('sites', 'delete'),
      request: { params: IdParam },
      responses: { ...noContent, ...errors(404) },
    }),
    async (c) => {
      await deleteSite(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/device-groups', tags: ['device-groups'], summary: 'Device groups of an organisation (within the caller’s restrictions)',
      middleware: inOrg('devices', 'read'),
      request: { params: OrgIdParam, query: PageQuery },
      responses: { 200: json(paginated(Group), 'Device groups'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listGroups(keel.db, accessOf(c), c.req.valid('param').orgId, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/orgs/{orgId}/device-groups', tags: ['device-groups'], summary: 'Create a device group',
      middleware: inOrg('devices', 'write'),
      request: { params: OrgIdParam, body: jsonBody(GroupCreate) },
      responses: { 201: json(Group, 'Created'), ...errors(404) },
    }),
    async (c) => c.json(await createGroup(keel, accessOf(c), c.req.valid('param').orgId, c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/device-groups/{id}', tags: ['device-groups'], summary: 'Rename a device group or move it to another site',
      middleware: scoped('devices', 'write'),
      request: { params: IdParam, body: jsonBody(GroupPatch) },
      responses: { 200: json(Group, 'Updated'), ...errors(404) },
    }),
    async (c) => c.json(await updateGroup(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c), (tx, id, siteId) => followGroupSite(keel, tx, id, siteId)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/device-groups/{id}', tags: ['device-groups'], summary: 'Delete a device group (its devices stay, ungrouped)',
      middleware: scoped('devices', 'delete'),
      request: { params: IdParam },
      responses: { ...noContent, ...errors(404) },
    }),
    async (c) => {
      await deleteGroup(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );
}
