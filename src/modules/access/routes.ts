import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { createApiKey, listApiKeys, revokeApiKey } from './api-keys.js';
import { BUILDER_ACTION_MAP, BUILDER_RESOURCES, CANONICAL_ACTIONS, CATALOG_RESOURCES, PERMISSION_CATALOG } from './catalog.js';
import { IdParam, ScopeQuery } from './api-schemas.js';
import { requestInfo } from '../identity/request.js';
import { cloneRole, createRole, deleteRole, effectivePermissions, getRole, listRoles, roleUsers, updateRole } from './roles.js';
import { accessOf, guard } from './scope.js';

const Permission = z
  .object({
    resource: z.string().openapi({ description: 'Resource of the permission (e.g. `devices`, `users`, `audit`), or `*` for every resource', example: 'devices' }),
    action: z.string().openapi({ description: 'Canonical action (`read`, `write`, `delete`, `execute`, or a named one such as `invite`), or `*` for every action', example: 'read' }),
  })
  .openapi('Permission', { description: 'One `resource:action` permission, in the canonical vocabulary' });
const PermissionIn = z
  .object({
    resource: z.string().trim().min(1).max(100).openapi({ description: 'A resource of GET /permissions/catalog (or `*`); at most 100 characters', example: 'devices' }),
    action: z.string().trim().min(1).max(50).openapi({
      description: 'A canonical action (`read`, `write`, `delete`, `execute`, a named one, or `*`) or a role-builder one (`view`→`read`, `create`/`update`→`write`); stored canonical. A pair not in the catalog is a 400',
      example: 'view',
    }),
  })
  .openapi('PermissionInput', { description: 'Canonical (`read`, `write`, ...) or role-builder (`view`, `create`, `update`, ...) action' });

export const Role = z
  .object({
    id: z.uuid().openapi({ description: 'Role id (UUID): for /roles/{id}, and the `roleId` of invitations and role assignments' }),
    name: z.string().openapi({ description: 'Name shown for the role (1 to 100 characters; names need not be unique)', example: 'Helpdesk' }),
    description: z.string().nullable().openapi({ description: 'Free text about the role; null when none' }),
    scope: z.enum(['system', 'partner', 'organization']).openapi({ description: 'Who may hold it: `partner` roles are held by partner users, `organization` roles by organisation users' }),
    partnerId: z.uuid().nullable().openapi({ description: 'Owning partner of a custom partner role; null for system roles and organisation roles' }),
    orgId: z.uuid().nullable().openapi({ description: 'Owning organisation of a custom organisation role; null otherwise' }),
    isSystem: z.boolean().openapi({ description: 'True for the seeded roles shared by every tenant: they cannot be changed or deleted (403 `system_role_immutable`), only cloned' }),
    parentRoleId: z.uuid().nullable().openapi({ description: 'The role it inherits from (single parent); its effective permissions include all of its ancestors\'' }),
    forceMfa: z.boolean().openapi({ description: 'Force MFA: holders get 428 `mfa_enrollment_required` on protected routes until a second factor is enrolled' }),
    permissions: z.array(Permission).openapi({ description: 'Direct permissions of the role, canonical (inherited ones: GET /roles/{id}/effective-permissions)' }),
    userCount: z.number().int().openapi({ description: 'Holders of the role the caller can see (for a system role, only those in the caller\'s partner or organisations)' }),
    createdAt: z.string().openapi({ description: 'When the role was created, ISO 8601 UTC' }),
    updatedAt: z.string().openapi({ description: 'Last change, ISO 8601 UTC' }),
  })
  .openapi('Role', { description: 'A role: a named set of permissions that users hold through their association' });

const RoleName = z.string().trim().min(1).max(100).openapi({ description: 'Role name, 1 to 100 characters after trimming', example: 'Helpdesk' });
const Description = z.string().max(5000).nullable().optional().openapi({ description: 'Free text about the role, at most 5000 characters; null clears it', example: 'First-line support: sees devices and alerts' });
const ScopeBody = {
  orgId: z.uuid().optional().openapi({ description: 'Organisation to act in, for partner and system callers (as the `orgId` query parameter; when both are given they must agree)' }),
  partnerId: z.uuid().optional().openapi({ description: 'Partner to act in, for system callers (as the `partnerId` query parameter)' }),
};
const RolePermissions = z.array(PermissionIn).max(500).optional().openapi({
  description: 'Direct permissions (at most 500), each one the caller holds itself (else 403 `privilege_escalation`); on update, replaces the whole list',
  example: [{ resource: 'devices', action: 'view' }, { resource: 'alerts', action: 'acknowledge' }],
});
const ParentRoleId = z.uuid().nullable().optional().openapi({
  description: 'Role to inherit from: same scope, and a system role or one of the same owner; a cycle is a 400. Null for none',
});
const ForceMfa = z.boolean().optional().openapi({ description: 'Force MFA for holders (428 until they enrol a second factor); default false' });
const RoleCreate = z
  .object({
    name: RoleName,
    description: Description,
    permissions: RolePermissions,
    parentRoleId: ParentRoleId,
    forceMfa: ForceMfa,
    ...ScopeBody,
  })
  .openapi('RoleCreate', {
    example: { name: 'Helpdesk', description: 'First-line support: sees devices and alerts', permissions: [{ resource: 'devices', action: 'view' }, { resource: 'alerts', action: 'acknowledge' }], parentRoleId: null, forceMfa: false },
  });
const RolePatch = z
  .object({
    name: RoleName.optional(),
    description: Description,
    permissions: RolePermissions,
    parentRoleId: ParentRoleId,
    forceMfa: ForceMfa,
    ...ScopeBody,
  })
  .openapi('RoleUpdate', { example: { name: 'Helpdesk (tier 1)', permissions: [{ resource: 'devices', action: 'read' }] } });
const RoleClone = z
  .object({ name: RoleName.openapi({ description: 'Name of the new custom role, 1 to 100 characters', example: 'Technician (night shift)' }), ...ScopeBody })
  .openapi('RoleClone', { example: { name: 'Technician (night shift)' } });

const Effective = z
  .object({
    direct: z.array(Permission).openapi({ description: 'Permissions the role itself grants' }),
    inherited: z
      .array(
        Permission.extend({
          sourceRoleId: z.uuid().openapi({ description: 'The ancestor role that grants it' }),
          sourceRoleName: z.string().openapi({ description: 'Name of that ancestor role' }),
        }),
      )
      .openapi({ description: 'Permissions granted by its ancestors (parent, grandparent, ...), each naming the ancestor it comes from' }),
  })
  .openapi('EffectivePermissions');

const RoleUser = z
  .object({
    id: z.uuid().openapi({ description: 'User id (UUID), for /users/{id}' }),
    email: z.string().openapi({ description: 'Email address (sign-in name)' }),
    name: z.string().openapi({ description: 'Display name (1 to 255 characters)' }),
    status: z.enum(['active', 'invited', 'disabled']).openapi({ description: '`active` can sign in; `invited` has not accepted its invitation; `disabled` cannot sign in' }),
    avatarUrl: z.string().nullable().openapi({ description: 'https URL of the avatar image, or null' }),
    isPlatformAdmin: z.boolean().openapi({ description: 'True for platform administrators' }),
    scope: z.enum(['partner', 'organization']).openapi({ description: 'Kind of association through which the user holds the role' }),
    partnerId: z.uuid().nullable().openapi({ description: 'The partner of a partner user; null for organisation users' }),
    orgId: z.uuid().nullable().openapi({ description: 'The organisation of an organisation user; null for partner users' }),
    roleId: z.uuid().openapi({ description: 'The role held (this one)' }),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable().openapi({ description: 'Partner users: which of the partner\'s organisations they reach (`selected`: those in `orgIds`); null for organisation users' }),
    orgIds: z.array(z.uuid()).openapi({ description: 'Partner users with `orgAccess: selected`: the organisations they reach; empty otherwise' }),
    siteIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation users: the only sites they reach; null means all sites' }),
    deviceGroupIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation users: the only device groups they reach; null means all device groups' }),
    mfaEnabled: z.boolean().openapi({ description: 'True when a second factor is enrolled' }),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable().openapi({ description: 'Primary second factor; null without one' }),
    lastLoginAt: z.string().nullable().openapi({ description: 'Last completed sign-in, ISO 8601 UTC; null before the first' }),
    createdAt: z.string().openapi({ description: 'When the account was created, ISO 8601 UTC' }),
  })
  .openapi('RoleUser', { description: 'A user holding the role, with the association through which they hold it' });

const CatalogEntry = Permission.extend({ description: z.string().openapi({ description: 'What the permission allows, for people', example: 'Read devices' }) }).openapi('CatalogEntry');
const CatalogQuery = z.object({
  page: z.coerce.number().int().min(1).default(1).openapi({ description: 'Page number, from 1 (default 1)', example: 1 }),
  limit: z.coerce.number().int().min(1).max(100).default(100).openapi({ description: 'Entries per page, 1 to 100 (default 100, the whole catalog on one page)', example: 100 }),
});
const Available = z
  .object({
    resources: z.array(z.string()).openapi({ description: 'Resources of the role builder', example: ['devices', 'scripts', 'alerts'] }),
    actions: z.array(z.string()).openapi({ description: 'Actions of the role builder: `view`, `create`, `update`, `delete`, `execute`' }),
    mapping: z.record(z.string(), z.string()).openapi({ description: 'Builder action → canonical action it is stored as', example: { view: 'read', create: 'write', update: 'write', delete: 'delete', execute: 'execute' } }),
    canonicalActions: z.array(z.string()).openapi({ description: 'Canonical actions every builder resource has: `read`, `write`, `delete`, `execute`' }),
    catalogResources: z.array(z.string()).openapi({ description: 'Every resource of GET /permissions/catalog, builder resources and those only named permissions use (`audit`, `webhooks`, ...)' }),
  })
  .openapi('AvailablePermissions');

const ApiKey = z
  .object({
    id: z.uuid().openapi({ description: 'API key id (for DELETE /api-keys/{id})' }),
    name: z.string().openapi({ description: 'The name given at creation', example: 'Billing export' }),
    keyPrefix: z.string().openapi({ description: 'The first 11 characters of the key (`kk_` and 8 more), to recognise it; the key itself is never shown again', example: 'kk_Qz3v9LmX' }),
    permissions: z.array(Permission).openapi({ description: 'The key\'s permissions; what it may do is these intersected with its creator\'s current permissions, checked on every request' }),
    scope: z.enum(['system', 'partner', 'organization']).openapi({ description: 'The scope of its creator when it was made; the key acts there' }),
    partnerId: z.uuid().nullable().openapi({ description: 'The partner it acts for (partner scope); null otherwise' }),
    orgId: z.uuid().nullable().openapi({ description: 'The organisation it acts for (organisation scope); null otherwise' }),
    expiresAt: z.string().nullable().openapi({ description: 'When it stops working, ISO 8601 UTC; null for never' }),
    lastUsedAt: z.string().nullable().openapi({ description: 'Last request made with it, ISO 8601 UTC; null if never used' }),
    createdAt: z.string().openapi({ description: 'When it was created, ISO 8601 UTC' }),
  })
  .openapi('ApiKey', { description: 'An API key, without the key (it stops working when its creator is disabled or removed)' });
const ApiKeyCreated = ApiKey.extend({ key: z.string().openapi({ description: 'The key itself: shown once, never again' }) }).openapi('ApiKeyCreated');
const ApiKeyCreate = z
  .object({
    name: z.string().trim().min(1).max(255).openapi({ description: 'A name to recognise the key by, 1 to 255 characters', example: 'Billing export' }),
    permissions: z.array(PermissionIn).min(1).max(500).openapi({
      description: 'Its permissions, 1 to 500, each one the creator holds (else 403 `privilege_escalation`)',
      example: [{ resource: 'devices', action: 'read' }],
    }),
    expiresAt: z.iso
      .datetime({ offset: true })
      .nullable()
      .optional()
      .openapi({ description: 'When it stops working: an ISO 8601 date-time with offset, in the future (else 400 `invalid_expiry`); null or omitted for never', example: '2027-01-01T00:00:00Z' }),
  })
  .openapi('ApiKeyCreate', { example: { name: 'Billing export', permissions: [{ resource: 'devices', action: 'read' }], expiresAt: '2027-01-01T00:00:00Z' } });

const ListQuery = PageQuery.extend(ScopeQuery.shape);
const noContent = { 204: { description: 'Done' } } as const;

export function mountAccessRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  // Partner users without full organisation access get 403 on every roles route, reads included
  // (docs/specification.md "Tenant hierarchy and scopes": they cannot administer users and roles).
  // Roles are organisation-wide: writing them needs whole-organisation access (wholeOrg).
  const roleGuard = (action: 'read' | 'write' | 'delete') => [auth, ...guard(keel, { fullOrgAccess: true, wholeOrg: action !== 'read', permission: ['users', action] })];
  const rolesTag = ['roles'];

  api.openapi(
    createRoute({
      method: 'get', path: '/permissions/catalog', tags: rolesTag, summary: 'The authoritative list of assignable permissions',
      middleware: [auth],
      request: { query: CatalogQuery },
      responses: { 200: json(paginated(CatalogEntry), 'Catalog') },
    }),
    (c) => {
      const q = c.req.valid('query');
      const data = PERMISSION_CATALOG.slice((q.page - 1) * q.limit, q.page * q.limit);
      return c.json(page(data, q, PERMISSION_CATALOG.length), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/roles/permissions/available', tags: rolesTag, summary: 'Role-builder resources and actions, and their canonical mapping',
      middleware: roleGuard('read'),
      request: { query: ScopeQuery },
      responses: { 200: json(Available, 'Resources and actions'), ...errors(404) },
    }),
    (c) =>
      c.json(
        {
          resources: [...BUILDER_RESOURCES],
          actions: Object.keys(BUILDER_ACTION_MAP),
          mapping: { ...BUILDER_ACTION_MAP },
          canonicalActions: [...CANONICAL_ACTIONS],
          catalogResources: [...CATALOG_RESOURCES],
        },
        200,
      ),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/roles', tags: rolesTag, summary: 'System and custom roles of the scope, with user counts',
      middleware: roleGuard('read'),
      request: { query: ListQuery },
      responses: { 200: json(paginated(Role), 'Roles'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listRoles(keel.db, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/roles', tags: rolesTag, summary: "Create a custom role in the caller's partner or organisation",
      middleware: roleGuard('write'),
      request: { query: ScopeQuery, body: jsonBody(RoleCreate) },
      responses: { 201: json(Role, 'Created'), ...errors(404) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...input } = c.req.valid('json');
      return c.json(await createRole(keel, accessOf(c), input, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/roles/{id}', tags: rolesTag, summary: 'A role with its direct permissions and user count',
      middleware: roleGuard('read'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(Role, 'Role'), ...errors(404) },
    }),
    async (c) => c.json(await getRole(keel.db, accessOf(c), c.req.valid('param').id), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/roles/{id}', tags: rolesTag, summary: 'Change a custom role',
      middleware: roleGuard('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(RolePatch) },
      responses: { 200: json(Role, 'Updated'), ...errors(404) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...input } = c.req.valid('json');
      return c.json(await updateRole(keel, accessOf(c), c.req.valid('param').id, input, requestInfo(c)), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/roles/{id}', tags: rolesTag, summary: 'Delete a custom role with no users and no child roles',
      middleware: roleGuard('delete'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { ...noContent, ...errors(404) },
    }),
    async (c) => {
      await deleteRole(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/roles/{id}/clone', tags: rolesTag, summary: 'Copy a role (system roles too) into a new custom role',
      middleware: roleGuard('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(RoleClone) },
      responses: { 201: json(Role, 'Created'), ...errors(404) },
    }),
    async (c) => {
      const { name } = c.req.valid('json');
      return c.json(await cloneRole(keel, accessOf(c), c.req.valid('param').id, { name }, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/roles/{id}/users', tags: rolesTag, summary: 'Users holding the role (in the caller’s context)',
      middleware: roleGuard('read'),
      request: { params: IdParam, query: ListQuery },
      responses: { 200: json(paginated(RoleUser), 'Users'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await roleUsers(keel, accessOf(c), c.req.valid('param').id, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/roles/{id}/effective-permissions', tags: rolesTag,
      summary: 'Direct and inherited permissions; each inherited one names its source role',
      middleware: roleGuard('read'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(Effective, 'Effective permissions'), ...errors(404) },
    }),
    async (c) => c.json(await effectivePermissions(keel, accessOf(c), c.req.valid('param').id), 200),
  );

  const keysTag = ['api-keys'];
  // API keys are managed by their users only: a key never creates, lists or revokes keys (403 user_required).
  const keyGuard = [authenticate(keel, { principal: 'user' }), ...guard(keel)];

  api.openapi(
    createRoute({
      method: 'get', path: '/api-keys', tags: keysTag, summary: "The caller's API keys (never the key itself)",
      middleware: keyGuard,
      request: { query: PageQuery },
      responses: { 200: json(paginated(ApiKey), 'Keys') },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listApiKeys(keel, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/api-keys', tags: keysTag,
      summary: "Create an API key; its permissions are a subset of the creator's, checked again on every request",
      middleware: keyGuard,
      request: { body: jsonBody(ApiKeyCreate) },
      responses: { 201: json(ApiKeyCreated, 'Created: the key is shown once') },
    }),
    async (c) => c.json(await createApiKey(keel, accessOf(c), c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/api-keys/{id}', tags: keysTag, summary: 'Revoke an API key at once',
      middleware: keyGuard,
      request: { params: IdParam },
      responses: { ...noContent, ...errors(404) },
    }),
    async (c) => {
      await revokeApiKey(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );
}
