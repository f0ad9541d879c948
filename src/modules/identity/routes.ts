import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { platformError } from '../../platform/http/errors.js';
import { hashGate } from '../../platform/http/admission.js';
import { errors, json, jsonBody, MessageSchema, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import {
  changePassword,
  forgotPassword,
  listSessions,
  logout,
  passwordLogin,
  refresh,
  register,
  resetPassword,
  revokeOwnSession,
  updateProfile,
} from './service.js';
import { cachedSelfProfile, cachedSelfProfileNow, SelfProfileSchema } from './profile.js';
import { cachedJson } from '../../platform/http/cached-json.js';
import { registerPartner } from '../users/registration.js';
import { clearSessionCookies, refreshTokenFromCookie, requestInfo, tokenResponse, TokenAnswerSchema, userPrincipal } from './request.js';
import { MfaChallengeSchema } from '../mfa/login.js';
import { identityError } from './errors.js';

const Email = z.email().max(255).openapi({ description: 'Email address of the account (at most 255 characters; matched case-insensitively)', example: 'ada@example.com' });
const Password = z.string().min(1).max(1024);
const NewPassword = Password.openapi({
  description: 'The new password: 8 to 128 characters and not guessable (zxcvbn score 3 or more, judged with the email and name); a weak one is a 400 saying why',
  example: 'correct-Horse-battery-9',
});
const PersonName = z.string().trim().min(1).max(255).openapi({ description: 'Display name, 1 to 255 characters after trimming', example: 'Ada Lovelace' });

const LoginBody = z
  .object({ email: Email, password: Password.openapi({ description: 'The account password (wrong, disabled and not-yet-accepted accounts all answer the same 401)', example: 'correct-Horse-battery-9' }) })
  .openapi('LoginRequest', { example: { email: 'ada@example.com', password: 'correct-Horse-battery-9' } });
const RegisterBody = z
  .object({ email: Email, password: NewPassword, name: PersonName })
  .openapi('RegisterRequest', { example: { email: 'ada@example.com', password: 'correct-Horse-battery-9', name: 'Ada Lovelace' } });
const RegisterPartnerBody = RegisterBody.extend({
  partnerName: z.string().trim().min(1).max(255).openapi({ description: 'Name of the partner (the managed-service provider) to create, 1 to 255 characters', example: 'Analytical Engines Ltd' }),
}).openapi('RegisterPartnerRequest', {
  example: { email: 'ada@example.com', password: 'correct-Horse-battery-9', name: 'Ada Lovelace', partnerName: 'Analytical Engines Ltd' },
});
const RefreshBody = z
  .object({
    refreshToken: z.string().min(1).max(200).optional().openapi({
      description: 'The refresh token from the last token answer, for clients without cookies (then no CSRF header is needed). Omit it to refresh with the `service_refresh_token` cookie and the `x-service-csrf` header',
      example: 'q3J5m1cXc0bV9W2mPp7sQ8nE4tYwZkLfHh6uGdRa0Ao',
    }),
  })
  .openapi('RefreshRequest', { example: { refreshToken: 'q3J5m1cXc0bV9W2mPp7sQ8nE4tYwZkLfHh6uGdRa0Ao' } });
const ForgotBody = z
  .object({ email: z.string().max(255).openapi({ description: 'Email of the account; the answer is the same 200 whether or not it exists', example: 'ada@example.com' }) })
  .openapi('ForgotPasswordRequest', { example: { email: 'ada@example.com' } });
const ResetBody = z
  .object({
    token: z.string().min(1).max(200).openapi({ description: 'The token from the emailed reset link (valid 1 hour, single use; a later password change voids it)', example: 'Zx8d3kq0VwYb7nT2cLr5fM1sHj9gPa4eUo6iKy0RtQw' }),
    password: NewPassword,
  })
  .openapi('ResetPasswordRequest', { example: { token: 'Zx8d3kq0VwYb7nT2cLr5fM1sHj9gPa4eUo6iKy0RtQw', password: 'correct-Horse-battery-9' } });
const ChangeBody = z
  .object({
    currentPassword: Password.openapi({ description: 'The current password, re-entered (wrong ones count towards the account lockout)', example: 'old-Horse-battery-8' }),
    newPassword: NewPassword,
  })
  .openapi('ChangePasswordRequest', { example: { currentPassword: 'old-Horse-battery-8', newPassword: 'correct-Horse-battery-9' } });
const ProfilePatch = z
  .object({
    name: z.string().trim().min(1).max(255).optional().openapi({ description: 'New display name, 1 to 255 characters after trimming; omitted leaves it', example: 'Ada King' }),
    avatarUrl: z
      .url({ protocol: /^https$/, error: 'must be an https URL' })
      .max(2000)
      .nullable()
      .optional()
      .openapi({ description: 'An https URL of the avatar image (at most 2000 characters); `null` removes it, omitted leaves it', example: 'https://example.com/ada.png' }),
  })
  .strict()
  .openapi('ProfileUpdate', { example: { name: 'Ada King', avatarUrl: 'https://example.com/ada.png' } });
const SessionSchema = z
  .object({
    id: z.uuid().openapi({ description: 'Session id (end it with DELETE /auth/sessions/{id})' }),
    ipAddress: z.string().nullable().openapi({ description: 'Client IP address that signed in (behind `TRUST_PROXY`, the forwarded one); null when unknown', example: '203.0.113.7' }),
    userAgent: z.string().nullable().openapi({ description: 'User-Agent header of the sign-in request; null when none was sent' }),
    mfa: z.boolean().openapi({ description: 'True when the session was established with a second factor (its access tokens carry `mfa: true`)' }),
    current: z.boolean().openapi({ description: 'True for the session of the token making this request' }),
    createdAt: z.string().openapi({ description: 'When the session began (sign-in), ISO 8601 UTC' }),
    lastUsedAt: z.string().openapi({ description: 'Last sign-in or refresh of the session, ISO 8601 UTC' }),
    expiresAt: z.string().openapi({ description: 'When the session ends unless refreshed: 7 days after its last refresh, never more than 30 days after sign-in; ISO 8601 UTC' }),
  })
  .openapi('Session');
const PartnerSchema = z
  .object({
    id: z.uuid().openapi({ description: 'Id of the new partner' }),
    name: z.string().openapi({ description: 'Partner name as given in `partnerName`' }),
    createdAt: z.string().openapi({ description: 'When the partner was created, ISO 8601 UTC' }),
  })
  .openapi({ description: 'The partner created with the account; its user holds the seeded Partner Admin role (Force MFA on: 428 until a factor is enrolled)' });

const tag = ['auth'];

export function mountIdentityRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  // Every authenticated route here is an account route: a signed-in user, never an API key (403 user_required).
  const auth = authenticate(keel, { principal: 'user' });
  // Reachable before a Force-MFA user has enrolled a factor (no 428).
  const authExempt = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const csrfFailed = () => identityError('csrf_failed');
  const registrationOpen = () => {
    if (!keel.config.ENABLE_REGISTRATION) throw platformError('not_found', { message: 'Registration is not enabled' });
  };

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/register', tags: tag, summary: 'Create a standalone account (ENABLE_REGISTRATION)',
      middleware: [hashGate] as const,
      request: { body: jsonBody(RegisterBody) },
      responses: { 201: json(TokenAnswerSchema, 'Registered and signed in'), ...errors(404, 409, 429, 503) },
    }),
    async (c) => {
      registrationOpen();
      const answer = await register(keel, c.req.valid('json'), requestInfo(c));
      return c.json(tokenResponse(c, keel, answer), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/register-partner', tags: tag, summary: 'Create a partner, its admin user and sign in (ENABLE_REGISTRATION)',
      middleware: [hashGate] as const,
      request: { body: jsonBody(RegisterPartnerBody) },
      responses: { 201: json(TokenAnswerSchema.extend({ partner: PartnerSchema }), 'Registered'), ...errors(404, 409, 429, 503) },
    }),
    async (c) => {
      registrationOpen();
      const answer = await registerPartner(keel, c.req.valid('json'), requestInfo(c));
      tokenResponse(c, keel, answer);
      return c.json(answer, 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/login', tags: tag, summary: 'Sign in with email and password',
      middleware: [hashGate] as const,
      request: { body: jsonBody(LoginBody) },
      responses: {
        200: json(z.union([TokenAnswerSchema, MfaChallengeSchema]), 'Tokens, or a second-factor challenge'),
        ...errors(401, 403, 429, 503),
      },
    }),
    async (c) => {
      const { email, password } = c.req.valid('json');
      const answer = await passwordLogin(keel, email, password, requestInfo(c));
      if ('mfaRequired' in answer) return c.json(answer, 200);
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/refresh', tags: tag,
      summary: 'Rotate the refresh token (cookie + x-service-csrf header, or refreshToken in the body)',
      request: { body: { required: false, content: { 'application/json': { schema: RefreshBody } } } },
      responses: { 200: json(TokenAnswerSchema, 'A new pair'), ...errors(401, 403, 409) },
    }),
    async (c) => {
      let token: string | undefined;
      let csrf: string | undefined;
      if ((c.req.header('content-length') ?? '0') !== '0') token = c.req.valid('json').refreshToken;
      if (!token) {
        const fromCookie = refreshTokenFromCookie(c);
        if (!fromCookie) throw identityError('invalid_refresh_token');
        if (!fromCookie.csrf) throw csrfFailed();
        token = fromCookie.token;
        csrf = fromCookie.csrf;
      }
      const outcome = await refresh(keel, token, csrf);
      if (outcome.kind === 'csrf_failed') throw csrfFailed();
      if (outcome.kind === 'raced') {
        throw identityError('refresh_raced');
      }
      if (outcome.kind === 'invalid') {
        clearSessionCookies(c, keel);
        throw identityError('invalid_refresh_token', { message: 'The refresh token is invalid, expired or revoked' });
      }
      return c.json(tokenResponse(c, keel, outcome.answer), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/logout', tags: tag, summary: 'Revoke every session and token of the user',
      middleware: [authExempt] as const,
      responses: { 200: json(MessageSchema) },
    }),
    async (c) => {
      const p = userPrincipal(c);
      await logout(keel, p.userId, p.sessionId, requestInfo(c));
      clearSessionCookies(c, keel);
      return c.json({ message: 'Signed out' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/forgot-password', tags: tag, summary: 'Email a reset link (always 200)',
      request: { body: jsonBody(ForgotBody) },
      responses: { 200: json(MessageSchema), ...errors(429) },
    }),
    async (c) => {
      await forgotPassword(keel, c.req.valid('json').email, requestInfo(c));
      return c.json({ message: 'If that email belongs to an account, a reset link is on its way' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/reset-password', tags: tag, summary: 'Set a new password with a reset token; ends every session',
      middleware: [hashGate] as const,
      request: { body: jsonBody(ResetBody) },
      responses: { 200: json(MessageSchema), ...errors(503) },
    }),
    async (c) => {
      const { token, password } = c.req.valid('json');
      await resetPassword(keel, token, password, requestInfo(c));
      return c.json({ message: 'Password changed; sign in with the new password' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/change-password', tags: tag, summary: 'Change the password; ends every session',
      middleware: [hashGate, auth] as const,
      request: { body: jsonBody(ChangeBody) },
      responses: { 200: json(MessageSchema), ...errors(429) },
    }),
    async (c) => {
      const { currentPassword, newPassword } = c.req.valid('json');
      await changePassword(keel, userPrincipal(c).userId, currentPassword, newPassword, requestInfo(c));
      clearSessionCookies(c, keel);
      return c.json({ message: 'Password changed; sign in again' }, 200);
    },
  );

  for (const path of ['/auth/me', '/users/me'] as const) {
    api.openapi(
      createRoute({
        method: 'get', path, tags: path === '/auth/me' ? tag : ['users'], summary: 'The signed-in user, with MFA, phone and access',
        middleware: [authExempt] as const,
        responses: { 200: json(SelfProfileSchema) },
      }),
      (c) => {
        const userId = userPrincipal(c).userId;
        // A cached profile answers without a promise, and its JSON is made once (platform/http/cached-json.ts).
        const cached = cachedSelfProfileNow(keel, userId);
        return cached ? cachedJson(c, cached, 200) : cachedSelfProfile(keel, userId).then((profile) => cachedJson(c, profile, 200));
      },
    );
  }

  api.openapi(
    createRoute({
      method: 'patch', path: '/users/me', tags: ['users'], summary: 'Update own name and avatar',
      middleware: [authExempt] as const,
      request: { body: jsonBody(ProfilePatch) },
      responses: { 200: json(SelfProfileSchema), ...errors(409) },
    }),
    async (c) => c.json(await updateProfile(keel, userPrincipal(c).userId, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/auth/sessions', tags: tag, summary: 'Own live sessions',
      middleware: [auth] as const,
      request: { query: PageQuery },
      responses: { 200: json(paginated(SessionSchema)) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const p = userPrincipal(c);
      const { data, total } = await listSessions(keel, p.userId, p.sessionId, q.page, q.limit);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/auth/sessions/{id}', tags: tag, summary: 'End one of own sessions',
      middleware: [auth] as const,
      request: { params: z.object({ id: z.uuid().openapi({ description: 'Id of one of own sessions (from GET /auth/sessions); another user\'s is 404', param: { name: 'id', in: 'path' } }) }) },
      responses: { 204: { description: 'Ended' }, ...errors(404) },
    }),
    async (c) => {
      await revokeOwnSession(keel, userPrincipal(c).userId, c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );
}
