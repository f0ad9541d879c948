import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, MessageSchema, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { hashGate } from '../../platform/http/admission.js';
import { requestInfo, tokenResponse, TokenAnswerSchema } from '../identity/request.js';
import { SelfProfileSchema } from '../identity/profile.js';
import { MfaChallengeSchema } from '../mfa/login.js';
import { IdParam, ScopeQuery } from '../access/api-schemas.js';
import { accessOf, guard } from '../access/scope.js';
import { listRoles } from '../access/roles.js';
import { Role } from '../access/routes.js';
import { assignRole, getVisibleUser, listUsers, removeUser, updateUser } from './service.js';
import { acceptInvite, inviteUser, previewInvitation, listInvitations, resendInvite, revokeInvitation } from './invitations.js';
import { resetUserMfa } from './mfa-reset.js';
import { endUserSessions } from './end-sessions.js';
import { requireMfa } from '../mfa/policy.js';
import { managersOf, withManagedBy } from '../identity/managed.js';

const UserSchema = z
  .object({
    id: z.uuid().openapi({ description: 'User id (UUID), for /users/{id}' }),
    email: z.string().openapi({ description: 'Email address (sign-in name)', example: 'grace@example.com' }),
    name: z.string().openapi({ description: 'Display name (1 to 255 characters)', example: 'Grace Hopper' }),
    status: z.enum(['active', 'invited', 'disabled']).openapi({ description: '`active` can sign in; `invited` has not accepted its invitation yet; `disabled` cannot sign in' }),
    avatarUrl: z.string().nullable().openapi({ description: 'https URL of the avatar image, or null' }),
    isPlatformAdmin: z.boolean().openapi({ description: 'True for platform administrators (system scope, implicit `*:*`)' }),
    scope: z.enum(['system', 'partner', 'organization']).nullable().openapi({ description: 'Kind of association: `partner` or `organization` member, `system` for platform administrators; null without one' }),
    partnerId: z.uuid().nullable().openapi({ description: 'The partner of a partner user; null otherwise' }),
    orgId: z.uuid().nullable().openapi({ description: 'The organisation of an organisation user; null otherwise' }),
    roleId: z.uuid().nullable().openapi({ description: 'The role of the association; null without one' }),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable().openapi({
      description: "Partner users: which of the partner's organisations they reach (`all`; `selected`: those in `orgIds`; `none`: the partner's own records only). Only `all` may administer users and roles. Null for others",
    }),
    orgIds: z.array(z.uuid()).openapi({ description: 'Partner users with `orgAccess: selected`: the organisations they reach; empty otherwise' }),
    siteIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation users: the only sites they reach; null means all sites (and for partner users)' }),
    deviceGroupIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation users: the only device groups they reach; null means all device groups (and for partner users)' }),
    mfaEnabled: z.boolean().openapi({ description: 'True when a second factor is enrolled' }),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable().openapi({ description: 'Primary second factor; null without one' }),
    lastLoginAt: z.string().nullable().openapi({ description: 'Last completed sign-in, ISO 8601 UTC; null before the first' }),
    createdAt: z.string().openapi({ description: 'When the account was created, ISO 8601 UTC' }),
    managedBy: z.string().nullable().openapi({ description: "Who manages the account's email, name and status outside Keel: `scim`, the organisation's directory (Keel's own API then refuses to change them, 409 `account_managed`, except for a platform administrator); null: Keel" }),
  })
  .openapi('User', { description: 'A user as a member of the scope: the account and its association' });
const InvitedSchema = UserSchema.extend({
  invitationEmail: z
    .enum(['smtp', 'log', 'nowhere'])
    .openapi({ description: "Where the invitation email went: `smtp` (sent through SMTP_URL), `log` (no SMTP_URL, development: written to Keel's log, link included), `nowhere` (no SMTP_URL in production: not sent)" }),
}).openapi('InvitedUser', { description: 'The invited user, and where the invitation email went' });

const ListQuery = PageQuery.extend(ScopeQuery.shape).extend({
  status: z.enum(['active', 'invited', 'disabled']).optional().openapi({ description: 'Only users with this status' }),
  roleId: z.uuid().optional().openapi({ description: 'Only users holding this role' }),
  search: z.string().trim().min(1).max(255).optional().openapi({ description: 'Only users whose email or name contains this text (case-insensitive), 1 to 255 characters', example: 'grace' }),
});
const ScopeBody = {
  orgId: z.uuid().optional().openapi({ description: 'Organisation to act in, for partner and system callers (as the `orgId` query parameter; when both are given they must agree)' }),
  partnerId: z.uuid().optional().openapi({ description: 'Partner to act in, for system callers (as the `partnerId` query parameter)' }),
};
const RestrictionIds = (what: string) =>
  z
    .array(z.uuid())
    .max(1000)
    .nullable()
    .optional()
    .openapi({ description: `Organisation invitations: the only ${what}s of the organisation the user will reach (1 to 1000; \`[]\` is a 400). Omitted or null: all ${what}s. Refused in partner invitations` });
const InviteBody = z
  .object({
    email: z.email().max(255).openapi({ description: 'Email of the person to invite; an account with it in this scope already is 409 `user_exists`, in another partner or organisation 409', example: 'grace@example.com' }),
    name: z.string().trim().min(1).max(255).openapi({ description: 'Display name for a new account, 1 to 255 characters (an existing account keeps its own)', example: 'Grace Hopper' }),
    roleId: z.uuid().openapi({ description: 'Role to give: one of GET /users/roles for this scope, whose permissions the inviter holds itself' }),
    siteIds: RestrictionIds('site'),
    deviceGroupIds: RestrictionIds('device group'),
    orgAccess: z.enum(['all', 'selected', 'none']).optional().openapi({
      description: "Partner invitations (no `orgId`): required; which of the partner's organisations the user will reach (`selected`: those in `orgIds`). Refused in organisation invitations",
    }),
    orgIds: z.array(z.uuid()).max(1000).optional().openapi({ description: "With `orgAccess: selected`: the partner's organisations the user will reach (1 to 1000)" }),
    ...ScopeBody,
  })
  .strict()
  .openapi('InviteRequest', {
    description: 'Naming `orgId` (or calling as an organisation user) invites into that organisation; otherwise into the caller\'s partner. The invitee gets an email with a link valid 7 days',
    example: { email: 'grace@example.com', name: 'Grace Hopper', roleId: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91', orgAccess: 'selected', orgIds: ['01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90'] },
  });
const PatchBody = z
  .object({
    name: z.string().trim().min(1).max(255).optional().openapi({ description: 'New display name, 1 to 255 characters after trimming', example: 'Grace B. Hopper' }),
    status: z.enum(['active', 'disabled']).optional().openapi({ description: '`disabled` stops sign-in and ends every session and API key of the user at once; `active` re-enables' }),
    ...ScopeBody,
  })
  .strict()
  .openapi('UserUpdate', { example: { status: 'disabled' } });
const AcceptBody = z
  .object({
    token: z.string().min(1).max(200).openapi({ description: 'The token from the invitation link (valid 7 days, single use)', example: 'Hk2v9Qx7LmP3sR8tY1wZ5bN0cF4gJ6dA2eU7iO9kTqM' }),
    /** Required unless the invited account accepts signed in (Authorization: Bearer). */
    password: z.string().min(1).max(1024).optional().openapi({
      description: 'A new account: its password (8 to 128 characters, not guessable). An existing account: its current password. Left out when accepting with `Authorization: Bearer` of the invited account',
      example: 'correct-Horse-battery-9',
    }),
    name: z.string().trim().min(1).max(255).optional().openapi({ description: 'A new account: the display name to use instead of the one the inviter gave', example: 'Grace Hopper' }),
  })
  .openapi('AcceptInviteRequest', { example: { token: 'Hk2v9Qx7LmP3sR8tY1wZ5bN0cF4gJ6dA2eU7iO9kTqM', password: 'correct-Horse-battery-9', name: 'Grace Hopper' } });
const InviteAcceptedSchema = z
  .object({
    message: z.string().openapi({ description: 'What was done, as a sentence for people' }),
    user: SelfProfileSchema,
    ssoRequired: z.literal(true).optional().openapi({ description: 'Present when the organisation joined enforces single sign-on: the invitation is accepted, no session is made, and the account signs in through its identity provider' }),
  })
  .openapi('InviteAccepted', { description: 'Accepted with a bearer token (the account joined the scope; no new session is made), or accepted where SSO is enforced (ssoRequired; no session)' });
const InvitationPreviewSchema = z
  .object({
    email: z.string().openapi({ description: 'The invited email address (the account that will join)', example: 'grace@contoso.example' }),
    invitedTo: z
      .object({
        kind: z.enum(['partner', 'organization']).openapi({ description: 'Whether the invitation grants a partner or an organisation association' }),
        name: z.string().nullable().openapi({ description: 'The partner\'s or organisation\'s name (null if it has been deleted since)', example: 'Contoso' }),
      })
      .openapi({ description: 'What the invitation is for' }),
    expiresAt: z.string().openapi({ description: 'When the link stops working, ISO 8601 UTC' }),
  })
  .openapi('InvitationPreview', { description: 'A valid invitation, as its link shows it before it is accepted' });
const InvitationSchema = z
  .object({
    id: z.uuid().openapi({ description: 'Invitation id (for DELETE /users/invitations/{id})' }),
    userId: z.uuid().nullable().openapi({ description: 'The invitee, when already a member of this scope (an account the invitation created); else null' }),
    email: z.string().openapi({ description: 'Email address the invitation was sent to' }),
    scope: z.enum(['partner', 'organization']).openapi({ description: 'Whether it grants a partner or an organisation association' }),
    partnerId: z.uuid().nullable().openapi({ description: 'Partner invitations: the partner; null otherwise' }),
    orgId: z.uuid().nullable().openapi({ description: 'Organisation invitations: the organisation; null otherwise' }),
    roleId: z.uuid().nullable().openapi({ description: 'The role it gives' }),
    orgAccess: z.enum(['all', 'selected', 'none']).nullable().openapi({ description: 'Partner invitations: the organisation access it gives; null otherwise' }),
    orgIds: z.array(z.uuid()).openapi({ description: 'With `orgAccess: selected`: the organisations it gives; empty otherwise' }),
    siteIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation invitations: the only sites it gives; null means all' }),
    deviceGroupIds: z.array(z.uuid()).nullable().openapi({ description: 'Organisation invitations: the only device groups it gives; null means all' }),
    invitedBy: z.uuid().nullable().openapi({ description: 'User who sent (or last re-sent) it; null when that account is gone' }),
    status: z.enum(['pending', 'expired']).openapi({ description: '`pending` until its link expires (7 days after sending), then `expired` until re-sent or revoked' }),
    createdAt: z.string().openapi({ description: 'When it was sent, ISO 8601 UTC' }),
    expiresAt: z.string().openapi({ description: 'When its link stops working, ISO 8601 UTC' }),
  })
  .openapi('Invitation', { description: 'An invitation not yet accepted' });

const tag = ['users'];

export function mountUserRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  // Each user answered says whether a directory manages the account (the console hides edits it would refuse).
  const managed = <T extends { id: string }>(views: T[]) => withManagedBy(keel, views);
  const one = async <T extends { id: string }>(view: Promise<T>) => {
    const v = await view;
    return { ...v, managedBy: (await managersOf(keel, keel.db, [v.id])).get(v.id) ?? null };
  };
  const auth = authenticate(keel);
  // Reads too: partner users without full organisation access get 403 on every users route (docs/specification.md "Tenant hierarchy and scopes").
  const read = (action: string) => [auth, ...guard(keel, { fullOrgAccess: true, permission: ['users', action] })];
  // Administering users acts on the whole organisation (an invitation or a role change could hand out
  // more than the caller's own sites): callers restricted to some sites or device groups are refused.
  const admin = (action: string) => [auth, ...guard(keel, { fullOrgAccess: true, wholeOrg: true, permission: ['users', action] })];

  api.openapi(
    createRoute({
      method: 'get', path: '/users', tags: tag, summary: 'Users in the current scope',
      middleware: read('read'),
      request: { query: ListQuery },
      responses: { 200: json(paginated(UserSchema)), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listUsers(keel.db, accessOf(c), q);
      return c.json(page(await managed(data), q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/users/roles', tags: tag, summary: 'Roles available in the scope',
      middleware: read('read'),
      request: { query: PageQuery.extend(ScopeQuery.shape) },
      responses: { 200: json(paginated(Role)), ...errors(404) },
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
      responses: { 200: json(paginated(InvitationSchema)), ...errors(404) },
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
      responses: { 204: { description: 'Revoked' }, ...errors(404, 409) },
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
      responses: { 201: json(InvitedSchema, 'Invited'), ...errors(404, 409, 429) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...input } = c.req.valid('json');
      const invited = await one(inviteUser(keel, accessOf(c), input, requestInfo(c)));
      return c.json({ ...invited, invitationEmail: keel.mailer.destination }, 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/resend-invite', tags: tag, summary: 'Send a new invitation link (the old one stops working)',
      middleware: admin('invite'),
      request: { query: ScopeQuery, body: jsonBody(
          z
            .object({
              userId: z.uuid().openapi({ description: 'The invited user (status `invited`), or for an account that already existed the id the invite answered with; anyone else is 409 `not_invited`' }),
              ...ScopeBody,
            })
            .openapi('ResendInviteRequest', { example: { userId: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e92' } }),
        ) },
      responses: { 200: json(MessageSchema), ...errors(404, 409, 429) },
    }),
    async (c) => {
      await resendInvite(keel, accessOf(c), c.req.valid('json').userId, requestInfo(c));
      const where = { smtp: 'Invitation sent', log: "Invitation written to Keel's log (no SMTP_URL is set)", nowhere: 'Invitation created, but no email was sent: no SMTP_URL is set' } as const;
      return c.json({ message: where[keel.mailer.destination] }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/users/{id}', tags: tag, summary: 'One user of the scope',
      middleware: read('read'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(UserSchema), ...errors(404) },
    }),
    async (c) => c.json(await one(getVisibleUser(keel.db, accessOf(c), c.req.valid('param').id)), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/users/{id}', tags: tag, summary: 'Change name or status (disabling ends every session and API key at once)',
      middleware: admin('write'),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(PatchBody) },
      responses: { 200: json(UserSchema), ...errors(404, 409) },
    }),
    async (c) => {
      const { orgId: _o, partnerId: _p, ...patch } = c.req.valid('json');
      return c.json(await one(updateUser(keel, accessOf(c), c.req.valid('param').id, patch, requestInfo(c))), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/users/{id}', tags: tag, summary: 'Remove the user from the scope (the account stays)',
      middleware: admin('delete'),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 204: { description: 'Removed' }, ...errors(404, 409) },
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
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(
          z
            .object({
              roleId: z.uuid().openapi({ description: 'The new role: assignable in the user\'s scope and covered by the caller\'s own permissions (never one\'s own role; demoting the last `*:*` holder is 409)' }),
              ...ScopeBody,
            })
            .openapi('AssignRoleRequest', { example: { roleId: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91' } }),
        ) },
      responses: { 200: json(UserSchema), ...errors(404, 409) },
    }),
    async (c) => c.json(await one(assignRole(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json').roleId, requestInfo(c))), 200),
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
      responses: { 204: { description: 'Reset' }, ...errors(404) },
    }),
    async (c) => {
      const body = (c.req.header('content-length') ?? '0') === '0' ? {} : c.req.valid('json');
      await resetUserMfa(keel, accessOf(c), c.req.valid('param').id, { passkeys: body.passkeys ?? false }, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/users/{id}/sessions/revoke', tags: tag,
      summary: 'Sign a user out everywhere: every session of theirs ends at once (API keys stay). users:write and every permission the user holds; never your own (sign out instead)',
      middleware: [...admin('write')],
      request: { params: IdParam, query: ScopeQuery },
      responses: {
        200: json(z.object({ revoked: z.number().int().openapi({ description: 'Sessions ended (0 when none was live)' }) }).openapi('SessionsRevoked', { example: { revoked: 2 } }), 'Signed out'),
        ...errors(404),
      },
    }),
    async (c) => c.json(await endUserSessions(keel, accessOf(c), c.req.valid('param').id, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/invitation', tags: ['auth'],
      summary: 'Read an invitation before accepting it: the invited email and the partner or organisation it is for',
      description: 'For the accept page. A token that is unknown, expired, used or revoked gets the same 400 `invalid_token` as `POST /auth/accept-invite`. The token is sent in the body so it stays out of URLs and access logs.',
      request: { body: jsonBody(z.object({ token: AcceptBody.shape.token }).strict().openapi('InvitationLookup', { example: { token: 'Hk2v9Qx7LmP3sR8tY1wZ5bN0cF4gJ6dA2eU7iO9kTqM' } })) },
      responses: { 200: json(InvitationPreviewSchema), ...errors() },
    }),
    async (c) => c.json(await previewInvitation(keel, c.req.valid('json').token), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/accept-invite', tags: ['auth'],
      security: [{}, { bearerAuth: [] }],
      summary: 'Accept an invitation: a new account sets its password; an existing one proves itself (password, then its second factor, then accepts signed in)',
      // A password set or re-entered is an Argon2 hash or verify: refused before the body is read while the hash queue is full.
      middleware: [hashGate] as const,
      request: { body: jsonBody(AcceptBody) },
      responses: { 200: json(z.union([TokenAnswerSchema, MfaChallengeSchema, InviteAcceptedSchema])), ...errors(401, 403, 409, 429, 503) },
    }),
    async (c) => {
      const answer = await acceptInvite(keel, c.req.valid('json'), requestInfo(c), c.req.header('authorization'));
      if ('mfaRequired' in answer || !('accessToken' in answer)) return c.json(answer, 200);
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );
}
