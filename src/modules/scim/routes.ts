import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { notFound } from '../../platform/http/errors.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import { requireMfa } from '../mfa/policy.js';
import { assertCoversOrgMembers } from '../users/service.js';
import { createScimToken, listScimTokens, revokeScimToken } from './tokens.js';
import { getScimSettings, putScimSettings } from './settings.js';
import { listManagedUsers } from './users.js';
import { reevaluateBatch } from './reevaluation.js';

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

const TokenSchema = z
  .object({
    id: z.uuid().openapi(d('Token id (UUID), for …/scim-tokens/{id}')),
    name: z.string().openapi(d('What the token is for', 'Entra ID provisioning')),
    prefix: z.string().openapi(d('The first characters of the token, to tell tokens apart', 'kscim_Ab3dE6')),
    createdAt: z.string().openapi(d('When it was made (ISO 8601)')),
    lastUsedAt: z.string().nullable().openapi(d('Last request made with it (ISO 8601, to the minute); null before the first')),
    expiresAt: z.string().nullable().openapi(d('When it stops working (ISO 8601); null: never')),
    createdBy: z.uuid().nullable().openapi(d('The user who made it (null once that account is gone)')),
  })
  .openapi('ScimToken', { description: "A directory's bearer token for the organisation's SCIM service (`/scim/v2`)" });

const TokenCreated = TokenSchema.extend({
  token: z.string().openapi(d('The token, shown this once (only its hash is kept): the secret token a directory sends as `Authorization: Bearer …`', 'kscim_Ab3dE6…')),
}).openapi('ScimTokenCreated');

const TokenCreate = z
  .object({
    name: z.string().trim().min(1).max(100).openapi(d('What the token is for', 'Entra ID provisioning')),
    expiresAt: z.iso.datetime({ offset: true }).optional().openapi(d('When it stops working (ISO 8601, in the future); absent: never')),
  })
  .strict()
  .openapi('ScimTokenCreate', { example: { name: 'Entra ID provisioning' } });

const Mapping = z
  .object({
    group: z.string().trim().min(1).max(255).openapi(d("The SCIM group's displayName", 'Keel Technicians')),
    roleId: z.uuid().openapi(d('The role its members get in the organisation')),
  })
  .strict();

const SettingsSchema = z
  .object({
    defaultRoleId: z.uuid().openapi(d('The role a user the directory creates gets (assignable in the organisation, within what the caller may grant); Organization Read Only until set')),
    groupRoleMappings: z.array(Mapping).max(100).openapi(d('SCIM groups to Keel roles')),
  })
  .strict()
  .openapi('ScimSettings', { example: { defaultRoleId: '00000000-0000-7000-8000-000000000006', groupRoleMappings: [] } });

const OrgPath = z.object({
  orgId: z.uuid().openapi({ description: 'Id (UUID) of the organisation; one the caller cannot reach answers 404', param: { name: 'orgId', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90' }),
});
const ItemPath = OrgPath.extend({
  id: z.uuid().openapi({ description: 'Id (UUID) of the SCIM token; another organisation\'s answers 404', param: { name: 'id', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e9f' }),
});

const ManagedUser = z
  .object({
    id: z.uuid().openapi(d('The account id (its SCIM id), for /users/{id}')),
    userName: z.string().openapi(d('The email address (SCIM userName)', 'grace@example.com')),
    name: z.string().openapi(d('The display name Keel shows')),
    externalId: z.string().nullable().openapi(d("The directory's own id of the person; null when it sent none")),
    active: z.boolean().openapi(d('false: the directory disabled the account')),
    lastModified: z.string().openapi(d('When the directory last changed it (ISO 8601)')),
  })
  .openapi('ScimManagedUser', { description: "An account the organisation's directory manages" });

/** The organisation the guard reached from the path (else 404). */
function orgOf(c: Context<AppEnv>): { orgId: string; partnerId: string | null } {
  const access = accessOf(c);
  if (!access.orgId) throw notFound('Organization');
  return { orgId: access.orgId, partnerId: access.partnerId };
}

/**
 * SCIM tokens and settings of an organisation (docs/decisions.md "SCIM provisioning"). A directory
 * holding a token can create, change and disable any member it manages, so managing tokens and
 * settings needs `users:write` covering every member's permissions (and every role the settings
 * grant), the whole organisation, full organisation access for partner users, and an MFA session.
 */
export function mountScimRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const tags = ['scim'];
  const read = [authenticate(keel, { principal: 'user' }), ...guard(keel, { orgIdParam: 'orgId', permission: ['users', 'read'], fullOrgAccess: true })];
  const write = [authenticate(keel), ...guard(keel, { orgIdParam: 'orgId', permission: ['users', 'write'], fullOrgAccess: true, wholeOrg: true }), requireMfa(keel)];
  const userId = (c: Context<AppEnv>) => c.get('principal').userId;

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/scim-tokens', tags, summary: "The organisation's SCIM tokens (never the tokens themselves)",
      middleware: read,
      request: { params: OrgPath, query: PageQuery },
      responses: { 200: json(paginated(TokenSchema), 'Tokens, oldest first'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listScimTokens(keel.db, orgOf(c).orgId, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/orgs/{orgId}/scim-tokens', tags, summary: 'Make a SCIM token for a directory: answered once',
      middleware: write,
      request: { params: OrgPath, body: jsonBody(TokenCreate) },
      responses: { 201: json(TokenCreated, 'Made: copy the token now'), ...errors(400, 404) },
    }),
    async (c) => {
      const org = orgOf(c);
      await assertCoversOrgMembers(keel.db, accessOf(c), org.orgId);
      return c.json(await createScimToken(keel, org, c.req.valid('json'), userId(c), requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/orgs/{orgId}/scim-tokens/{id}', tags, summary: 'Revoke a SCIM token: its next request is 401',
      middleware: write,
      request: { params: ItemPath },
      responses: { 204: { description: 'Revoked' }, ...errors(404) },
    }),
    async (c) => {
      const org = orgOf(c);
      await assertCoversOrgMembers(keel.db, accessOf(c), org.orgId);
      await revokeScimToken(keel, org, c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/scim-users', tags, summary: "The accounts the organisation's directory manages",
      middleware: read,
      request: { params: OrgPath, query: PageQuery },
      responses: { 200: json(paginated(ManagedUser), 'Managed accounts, oldest first'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listManagedUsers(keel.db, orgOf(c).orgId, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/orgs/{orgId}/scim-settings', tags, summary: "The organisation's SCIM settings: the default role and the group mappings",
      middleware: read,
      request: { params: OrgPath },
      responses: { 200: json(SettingsSchema, 'Settings'), ...errors(404) },
    }),
    async (c) => c.json(await getScimSettings(keel.db, orgOf(c).orgId), 200),
  );

  api.openapi(
    createRoute({
      method: 'put', path: '/orgs/{orgId}/scim-settings', tags, summary: "Set the organisation's SCIM default role and group mappings; the managed members' roles are decided again by them",
      middleware: write,
      request: { params: OrgPath, body: jsonBody(SettingsSchema) },
      responses: { 200: json(SettingsSchema, 'Saved'), ...errors(400, 404) },
    }),
    async (c) => {
      const org = orgOf(c);
      const access = accessOf(c);
      const saved = await putScimSettings(keel, org, c.req.valid('json'), requestInfo(c), (roleIds) => assertCoversOrgMembers(keel.db, access, org.orgId, roleIds), userId(c));
      // The first batch of the re-decision is answered with the save; the worker's job does the rest.
      await reevaluateBatch(keel, org.orgId);
      return c.json(saved, 200);
    },
  );
}
