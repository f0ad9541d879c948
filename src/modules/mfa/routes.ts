import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, MessageSchema } from '../../platform/http/schemas.js';
import { authenticate, requireUserPrincipal } from '../identity/middleware.js';
import { requestInfo, tokenResponse, TokenAnswerSchema } from '../identity/http.js';
import { confirmTotp, disableMfa, rotateRecoveryCodes, setupTotp, verifyLoginCode } from './service.js';

const Code = z.string().trim().min(6).max(20).openapi({ description: '6-digit TOTP code, or a recovery code XXXX-XXXX', example: '123456' });
const SetupSchema = z
  .object({ secret: z.string(), otpAuthUrl: z.string(), qrCodeDataUrl: z.string(), recoveryCodes: z.array(z.string()), expiresAt: z.string() })
  .openapi('MfaSetup');
const EnabledSchema = TokenAnswerSchema.extend({ recoveryCodes: z.array(z.string()) }).openapi('MfaEnabled');
const tag = ['mfa'];

export function mountMfaRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  // The enrolment routes stay reachable for a Force-MFA user who has no factor yet (DECISIONS).
  const auth = authenticate(keel, { allowUnenrolled: true });

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/setup', tags: tag, summary: 'Start enrolling an authenticator app (held 10 minutes)',
      middleware: [auth] as const,
      responses: { 200: json(SetupSchema), ...errors(401, 404, 409) },
    }),
    async (c) => c.json(await setupTotp(keel, c.var.principal.userId), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/verify', tags: tag,
      summary: 'With tempToken: the second step of login. Without: confirm a pending authenticator setup',
      request: { body: jsonBody(z.object({ code: Code, tempToken: z.string().min(1).max(200).optional() }).openapi('MfaVerifyRequest')) },
      responses: { 200: json(z.union([TokenAnswerSchema, EnabledSchema])), ...errors(400, 401, 429) },
    }),
    async (c) => {
      const { code, tempToken } = c.req.valid('json');
      const info = requestInfo(c);
      if (tempToken) return c.json(tokenResponse(c, keel, await verifyLoginCode(keel, tempToken, code, info)), 200);
      const principal = await requireUserPrincipal(keel, c.req.header('authorization'));
      c.set('principal', principal);
      const answer = await confirmTotp(keel, principal.userId, principal.sessionId, code, requestInfo(c));
      tokenResponse(c, keel, answer);
      return c.json(answer, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/enable', tags: tag, summary: 'Confirm a pending authenticator setup; returns recovery codes and an MFA session',
      middleware: [auth] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaEnableRequest')) },
      responses: { 200: json(EnabledSchema), ...errors(400, 401, 429) },
    }),
    async (c) => {
      const p = c.var.principal;
      const answer = await confirmTotp(keel, p.userId, p.sessionId, c.req.valid('json').code, requestInfo(c));
      tokenResponse(c, keel, answer);
      return c.json(answer, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/disable', tags: tag, summary: 'Turn off TOTP/SMS (keeps passkeys); 403 when the organisation requires MFA',
      middleware: [auth] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaDisableRequest')) },
      responses: { 200: json(MessageSchema), ...errors(400, 401, 403, 409, 429) },
    }),
    async (c) => {
      await disableMfa(keel, c.var.principal.userId, c.req.valid('json').code, requestInfo(c));
      return c.json({ message: 'Multi-factor authentication disabled' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/recovery-codes', tags: tag, summary: 'Replace all recovery codes (needs a current TOTP or SMS code)',
      middleware: [auth] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('RecoveryCodesRequest')) },
      responses: { 200: json(z.object({ recoveryCodes: z.array(z.string()) }).openapi('RecoveryCodes')), ...errors(400, 401, 409, 429) },
    }),
    async (c) => c.json({ recoveryCodes: await rotateRecoveryCodes(keel, c.var.principal.userId, c.req.valid('json').code, requestInfo(c)) }, 200),
  );
}
