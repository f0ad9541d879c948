import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { createApiKey, listApiKeys, revokeApiKey } from './api-keys.js';
import { BUILDER_ACTION_MAP, BUILDER_RESOURCES, CANONICAL_ACTIONS, CATALOG_RESOURCES, PERMISSION_CATALOG } from './catalog.js';
import { IdParam, ScopeQuery } from './http.js';
import { requestInfo } from '../identity/http.js';
import { roleCacheFor } from './role-cache.js';
import { membershipCacheFor } from './service.js';
import { cloneRole, createRole, deleteRole, effectivePermissions, getRole, listRoles, roleUsers, updateRole } from './roles.js';
import { accessOf, guard } from './scope.js';

const Permission = z.object({ resource: z.string(), action: z.string() }).openapi('Permission');
const PermissionIn = z
  .object({ resource: z.string().trim().min(1).max(100), action: z.string().trim().min(1).max(50) })
  .openapi('PermissionInput', { description: 'Canonical (`read`, `write`, ...) or role-builder (`view`, `create`, `update`, ...) action' });

export const Role = z
  .object({
    id: z.uuid(),
    name: z.string(),
    description: z.string().nullable(),
    scope: z.enum(['system', 'partner', 'organization']),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    isSystem: z.boolean(),
    parentRoleId: z.uuid().nullable(),
    forceMfa: z.boolean(),
    permissions: z.array(Permission),
    userCount: z.number().int(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Role');

const RoleName = z.string().trim().min(1).max(100);
const Description = z.string().max(5000).nullable().optional();
const ScopeBody = { orgId: z.uuid().optional(), partnerId: z.uuid().optional() };
const RoleCreate = z
  .object({
    name: RoleName,
    description: Description,
    permissions: z.array(PermissionIn).max(500).optional(),
    parentRoleId: z.uuid().nullable().optional(),
    forceMfa: z.boolean().optional(),
    ...ScopeBody,
  })
  .openapi('RoleCreate');
const RolePatch = z
  .object({
    name: RoleName.optional(),
    description: Description,
    permissions: z.array(PermissionIn).max(500).optional(),
    parentRoleId: z.uuid().nullable().optional(),
    forceMfa: z.boolean().optional(),
    ...ScopeBody,
  })
  .openapi('RoleUpdate');
const RoleClone = z.object({ name: RoleName, ...ScopeBody }).openapi('RoleClone');

const Effective = z
  .object({
    direct: z.array(Permission),
    inherited: z.array(Permission.extend({ sourceRoleId: z.uuid(), sourceRoleName: z.string() })),
  })
  .openapi('EffectivePermissions');

const RoleUser = z
  .object({
    id: z.uuid(),
    email: z.string(),
    name: z.string(),
    status: z.enum(['active', 'invited', 'disabled']),
    avatarUrl: z.string().nullable(),
    isPlatformAdmin: z.boolean(),
    scope: z.enum(['partner', 'organization']),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    roleId: z.uuid(),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable(),
    orgIds: z.array(z.uuid()),
    siteIds: z.array(z.uuid()).nullable(),
    deviceGroupIds: z.array(z.uuid()).nullable(),
    mfaEnabled: z.boolean(),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable(),
    lastLoginAt: z.string().nullable(),
    createdAt: z.string(),
  })
  .openapi('RoleUser');

const CatalogEntry = Permission.extend({ description: z.string() }).openapi('CatalogEntry');
const CatalogQuery = z.object({
  page: z.coerce.number().int().min(1).default(1),
  limit: z.coerce.number().int().min(1).max(100).default(100),
});
const Available = z
  .object({
    resources: z.array(z.string()),
    actions: z.array(z.string()),
    mapping: z.record(z.string(), z.string()),
    canonicalActions: z.array(z.string()),
    catalogResources: z.array(z.string()),
  })
  .openapi('AvailablePermissions');

const ApiKey = z
  .object({
    id: z.uuid(),
    name: z.string(),
    keyPrefix: z.string(),
    permissions: z.array(Permission),
    scope: z.enum(['system', 'partner', 'organization']),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    expiresAt: z.string().nullable(),
    lastUsedAt: z.string().nullable(),
    createdAt: z.string(),
  })
  .openapi('ApiKey');
const ApiKeyCreated = ApiKey.extend({ key: z.string().openapi({ description: 'The key itself: shown once, never again' }) }).openapi('ApiKeyCreated');
const ApiKeyCreate = z
  .object({
    name: z.string().trim().min(1).max(255),
    permissions: z.array(PermissionIn).min(1).max(500),
    expiresAt: z.iso.datetime({ offset: true }).nullable().optional(),
  })
  .openapi('ApiKeyCreate');

const ListQuery = PageQuery.extend(ScopeQuery.shape);
const noContent = { 204: { description: 'Done' } } as const;

export function mountAccessRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  roleCacheFor(keel);
  membershipCacheFor(keel);
  const auth = authenticate(keel);
  // Partner users without full organisation access get 403 on every roles route, reads included
  // (SPEC 5.8 and 7: they cannot administer users and roles).
  const roleGuard = (action: 'read' | 'write' | 'delete') => [auth, ...guard(keel, { fullOrgAccess: true, permission: ['users', action] })];
  const rolesTag = ['roles'];

  api.openapi(
    createRoute({
      method: 'get', path: '/permissions/catalog', tags: rolesTag, summary: 'The authoritative list of assignable permissions',
      middleware: [auth],
      request: { query: CatalogQuery },
      responses: { 200: json(paginated(CatalogEntry), 'Catalog'), ...errors(400, 401) },
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
      responses: { 200: json(Available, 'Resources and actions'), ...errors(401, 403, 404) },
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
      responses: { 200: json(paginated(Role), 'Roles'), ...errors(400, 401, 403, 404) },
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
      responses: { 201: json(Role, 'Created'), ...errors(400, 401, 403, 404) },
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
      responses: { 200: json(Role, 'Role'), ...errors(400, 401, 403, 404) },
    }),
    async (c) => c.json(await getRole(keel.db, accessOf(c), c.req.valid('param').id), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/roles/{id}', tags: rolesTag, summary: 'Change a custom role',
      middleware: roleGuard('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(RolePatch) },
      responses: { 200: json(Role, 'Updated'), ...errors(400, 401, 403, 404) },
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
      responses: { ...noContent, ...errors(400, 401, 403, 404) },
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
      responses: { 201: json(Role, 'Created'), ...errors(400, 401, 403, 404) },
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
      responses: { 200: json(paginated(RoleUser), 'Users'), ...errors(400, 401, 403, 404) },
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
      responses: { 200: json(Effective, 'Effective permissions'), ...errors(400, 401, 403, 404) },
    }),
    async (c) => c.json(await effectivePermissions(keel, accessOf(c), c.req.valid('param').id), 200),
  );

  const keysTag = ['api-keys'];
  const keyGuard = [auth, ...guard(keel)];

  api.openapi(
    createRoute({
      method: 'get', path: '/api-keys', tags: keysTag, summary: "The caller's API keys (never the key itself)",
      middleware: keyGuard,
      request: { query: PageQuery },
      responses: { 200: json(paginated(ApiKey), 'Keys'), ...errors(400, 401, 403) },
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
      responses: { 201: json(ApiKeyCreated, 'Created: the key is shown once'), ...errors(400, 401, 403) },
    }),
    async (c) => c.json(await createApiKey(keel, accessOf(c), c.req.valid('json'), requestInfo(c)), 201),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/api-keys/{id}', tags: keysTag, summary: 'Revoke an API key at once',
      middleware: keyGuard,
      request: { params: IdParam },
      responses: { ...noContent, ...errors(400, 401, 403, 404) },
    }),
    async (c) => {
      await revokeApiKey(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );
}
