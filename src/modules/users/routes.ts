import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, MessageSchema, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo, tokenResponse, TokenAnswerSchema } from '../identity/http.js';
import { SelfProfileSchema } from '../identity/profile.js';
import { MfaChallengeSchema } from '../mfa/login.js';
import { IdParam, ScopeQuery } from '../access/http.js';
import { accessOf, guard } from '../access/scope.js';
import { listRoles } from '../access/roles.js';
import { Role } from '../access/routes.js';
import { assignRole, getVisibleUser, listUsers, removeUser, updateUser } from './service.js';
import { acceptInvite, inviteUser, listInvitations, resendInvite, revokeInvitation } from './invitations.js';
import { resetUserMfa } from './mfa-reset.js';
import { requireMfa } from '../mfa/policy.js';

const UserSchema = z
  .object({
    id: z.uuid(),
    email: z.string(),
    name: z.string(),
    status: z.enum(['active', 'invited', 'disabled']),
    avatarUrl: z.string().nullable(),
    isPlatformAdmin: z.boolean(),
    scope: z.enum(['system', 'partner', 'organization']).nullable(),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    roleId: z.uuid().nullable(),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable(),
    orgIds: z.array(z.uuid()),
    siteIds: z.array(z.uuid()).nullable(),
    deviceGroupIds: z.array(z.uuid()).nullable(),
    mfaEnabled: z.boolean(),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable(),
    lastLoginAt: z.string().nullable(),
    createdAt: z.string(),
  })
  .openapi('User');

const ListQuery = PageQuery.extend(ScopeQuery.shape).extend({
  status: z.enum(['active', 'invited', 'disabled']).optional(),
  roleId: z.uuid().optional(),
  search: z.string().trim().min(1).max(255).optional(),
});
const ScopeBody = { orgId: z.uuid().optional(), partnerId: z.uuid().optional() };
const InviteBody = z
  .object({
    email: z.email().max(255),
    name: z.string().trim().min(1).max(255),
    roleId: z.uuid(),
    siteIds: z.array(z.uuid()).max(1000).nullable().optional(),
    deviceGroupIds: z.array(z.uuid()).max(1000).nullable().optional(),
    orgAccess: z.enum(['all', 'selected', 'none']).optional(),
    orgIds: z.array(z.uuid()).max(1000).optional(),
    ...ScopeBody,
  })
  .strict()
  .openapi('InviteRequest');
const PatchBody = z
  .object({ name: z.string().trim().min(1).max(255).optional(), status: z.enum(['active', 'disabled']).optional(), ...ScopeBody })
  .strict()
  .openapi('UserUpdate');
const AcceptBody = z
  .object({
    token: z.string().min(1).max(200),
    /** Required unless the invited account accepts signed in (Authorization: Bearer). */
    password: z.string().min(1).max(1024).optional(),
    name: z.string().trim().min(1).max(255).optional(),
  })
  .openapi('AcceptInviteRequest');
const InviteAcceptedSchema = z.object({ message: z.string(), user: SelfProfileSchema }).openapi('InviteAccepted');
const InvitationSchema = z
  .object({
    id: z.uuid(),
    userId: z.uuid().nullable().openapi({ description: 'The invitee, when already a member of this scope (an account the invitation created); else null' }),
    email: z.string(),
    scope: z.enum(['partner', 'organization']),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    roleId: z.uuid().nullable(),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable(),
    orgIds: z.array(z.uuid()),
    siteIds: z.array(z.uuid()).nullable(),
    deviceGroupIds: z.array(z.uuid()).nullable(),
    invitedBy: z.uuid().nullable(),
    status: z.enum(['pending', 'expired']),
    createdAt: z.string(),
    expiresAt: z.string(),
  })
  .openapi('Invitation');

const tag = ['users'];

export function mountUserRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  // Reads too: partner users without full organisation access get 403 on every users route (SPEC 5.8, 7).
  const read = (action: string) => [auth, ...guard(keel, { fullOrgAccess: true, permission: ['users', action] })];
  const admin = (action: string) => [auth, ...guard(keel, { fullOrgAccess: true, permission: ['users', action] })];

  api.openapi(
    createRoute({
      method: 'get', path: '/users', tags: tag, summary: 'Users in the current scope',
      middleware: read('read'),
      request: { query: ListQuery },
      responses: { 200: json(paginated(UserSchema)), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listUsers(keel.db, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/users/roles', tags: tag, summary: 'Roles available in the scope',
      middleware: read('read'),
      request: { query: PageQuery.extend(ScopeQuery.shape) },
      responses: { 200: json(paginated(Role)), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listRoles(keel.db, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/users/invitations', tags: tag, summary: 'Pending invitations in the scope (expired ones until replaced or revoked)',
      middleware: read('read'),
      request: { query: PageQuery.extend(ScopeQuery.shape) },
      responses: { 200: json(paginated(InvitationSchema)), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listInvitations(keel.db, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/users/invitations/{id}', tags: tag, summary: 'Revoke an invitation (an account it created and that never accepted leaves the scope)',
      middleware: admin('invite'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 204: { description: 'Revoked' }, ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => {
      await revokeInvitation(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/invite', tags: tag, summary: 'Invite a user to the organisation (orgId) or the partner',
      middleware: admin('invite'),
      request: { query: ScopeQuery, body: jsonBody(InviteBody) },
      responses: { 201: json(UserSchema, 'Invited'), ...errors(400, 401, 403, 404, 409, 428, 429) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...input } = c.req.valid('json');
      return c.json(await inviteUser(keel, accessOf(c), input, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/resend-invite', tags: tag, summary: 'Send a new invitation link (the old one stops working)',
      middleware: admin('invite'),
      request: { query: ScopeQuery, body: jsonBody(z.object({ userId: z.uuid(), ...ScopeBody }).openapi('ResendInviteRequest')) },
      responses: { 200: json(MessageSchema), ...errors(400, 401, 403, 404, 409, 428, 429) },
    }),
    async (c) => {
      await resendInvite(keel, accessOf(c), c.req.valid('json').userId, requestInfo(c));
      return c.json({ message: 'Invitation sent' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/users/{id}', tags: tag, summary: 'One user of the scope',
      middleware: read('read'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(UserSchema), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => c.json(await getVisibleUser(keel.db, accessOf(c), c.req.valid('param').id), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/users/{id}', tags: tag, summary: 'Change name or status (disabling ends every session and API key at once)',
      middleware: admin('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(PatchBody) },
      responses: { 200: json(UserSchema), ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...patch } = c.req.valid('json');
      return c.json(await updateUser(keel, accessOf(c), c.req.valid('param').id, patch, requestInfo(c)), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/users/{id}', tags: tag, summary: 'Remove the user from the scope (the account stays)',
      middleware: admin('delete'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 204: { description: 'Removed' }, ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => {
      await removeUser(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/{id}/role', tags: tag, summary: 'Give the user another role',
      middleware: admin('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(z.object({ roleId: z.uuid(), ...ScopeBody }).openapi('AssignRoleRequest')) },
      responses: { 200: json(UserSchema), ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => c.json(await assignRole(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json').roleId, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/{id}/mfa/reset', tags: tag,
      summary: 'Reset a user’s second factors (lost authenticator): TOTP, phone and recovery codes, passkeys too with {passkeys: true}; ends their sessions and emails them. users:write, a session with a second factor, and every permission the user holds; never your own',
      middleware: [...admin('write'), requireMfa(keel)],
      request: {
        params: IdParam,
        query: ScopeQuery,
        body: {
          required: false,
          content: { 'application/json': { schema: z.object({ passkeys: z.boolean().optional().openapi({ description: 'Also remove the user’s passkeys (default false)' }), ...ScopeBody }).openapi('MfaResetRequest', { example: { passkeys: false } }) } },
        },
      },
      responses: { 204: { description: 'Reset' }, ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const body = (c.req.header('content-length') ?? '0') === '0' ? {} : c.req.valid('json');
      await resetUserMfa(keel, accessOf(c), c.req.valid('param').id, { passkeys: body.passkeys ?? false }, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/accept-invite', tags: ['auth'],
      security: [{}, { bearerAuth: [] }],
      summary: 'Accept an invitation: a new account sets its password; an existing one proves itself (password, then its second factor, then accepts signed in)',
      request: { body: jsonBody(AcceptBody) },
      responses: { 200: json(z.union([TokenAnswerSchema, MfaChallengeSchema, InviteAcceptedSchema])), ...errors(400, 401, 403, 409, 429) },
    }),
    async (c) => {
      const answer = await acceptInvite(keel, c.req.valid('json'), requestInfo(c), c.req.header('authorization'));
      if ('mfaRequired' in answer || !('accessToken' in answer)) return c.json(answer, 200);
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );
}
