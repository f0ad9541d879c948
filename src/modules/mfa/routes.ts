import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from '@simplewebauthn/server';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, ErrorSchema, json, jsonBody, MessageSchema, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { requireUserPrincipal } from '../access/bearer.js';
import { requestInfo, tokenResponse, TokenAnswerSchema, userPrincipal } from '../identity/http.js';
import { confirmTotp, disableMfa, rotateRecoveryCodes, setupTotp, verifyLoginCode } from './service.js';
import { confirmPhone, enableSms, sendLoginSms, sendSmsToSelf, startPhoneVerification } from './sms.js';
import {
  deletePasskey,
  listPasskeys,
  passkeyLoginOptions,
  passkeyRegistrationOptions,
  registerPasskey,
  renamePasskey,
  verifyPasskeyLogin,
} from './passkeys.js';
import { relyingPartyOf } from './webauthn.js';
import { assertFactorChangeAllowed, endSessionsWithoutMfa, requireFactorProof } from './factor-change.js';
import { loadUser } from './common.js';

const Code = z.string().trim().min(6).max(20).openapi({ description: '6-digit TOTP or SMS code, or a recovery code XXXX-XXXX', example: '123456' });
const SetupSchema = z
  .object({ secret: z.string(), otpAuthUrl: z.string(), qrCodeDataUrl: z.string(), recoveryCodes: z.array(z.string()), expiresAt: z.string() })
  .openapi('MfaSetup');
const EnabledSchema = TokenAnswerSchema.extend({ recoveryCodes: z.array(z.string()) }).openapi('MfaEnabled');
const tag = ['mfa'];

const TempToken = z.string().min(1).max(200);
const Password = z.string().min(1).max(1024);
const PasskeyName = z.string().trim().min(1).max(255).openapi({ example: 'MacBook Touch ID' });
const SmsCode = z.string().trim().min(1).max(20).openapi({ description: 'The 6-digit code from the SMS', example: '123456' });
const CodeSentSchema = z
  .object({ message: z.string(), phoneNumberMasked: z.string().nullable(), expiresAt: z.string() })
  .openapi('SmsCodeSent');
const PhoneConfirmedSchema = z.object({ phoneNumberMasked: z.string().nullable(), phoneVerified: z.literal(true) }).openapi('PhoneConfirmed');
const PasskeySchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    credentialId: z.string(),
    transports: z.array(z.string()),
    aaguid: z.string().nullable(),
    backupEligible: z.boolean(),
    backupState: z.boolean(),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable(),
  })
  .openapi('Passkey');
const PasskeyCreatedSchema = PasskeySchema.extend({
  recoveryCodes: z.array(z.string()).optional().openapi({ description: 'Only when the account had no recovery codes: shown once' }),
}).openapi('PasskeyCreated');
/** The JSON a browser's navigator.credentials result serialises to (as @simplewebauthn/browser sends it). */
const b64url = z.string().max(65_536);
const RegistrationCredential = z
  .object({
    id: b64url,
    rawId: b64url,
    type: z.literal('public-key'),
    response: z.object({ clientDataJSON: b64url, attestationObject: b64url, transports: z.array(z.string().max(32)).max(16).optional() }).loose(),
    clientExtensionResults: z.record(z.string(), z.unknown()).default({}),
  })
  .loose()
  .openapi('PasskeyRegistrationCredential');
const AuthenticationCredential = z
  .object({
    id: b64url,
    rawId: b64url,
    type: z.literal('public-key'),
    response: z.object({ clientDataJSON: b64url, authenticatorData: b64url, signature: b64url, userHandle: b64url.optional() }).loose(),
    clientExtensionResults: z.record(z.string(), z.unknown()).default({}),
  })
  .loose()
  .openapi('PasskeyAuthenticationCredential');
const WebAuthnOptionsSchema = z
  .object({ challenge: z.string() })
  .loose()
  .openapi('WebAuthnOptions', { description: 'PublicKeyCredentialCreationOptionsJSON / PublicKeyCredentialRequestOptionsJSON (WebAuthn Level 3)' });
/** The library's option objects are plain JSON (optional members are absent, never undefined). */
const asOptions = (options: { challenge: string }) => options as z.infer<typeof WebAuthnOptionsSchema>;
const unavailable = (code: 502 | 503, description: string) => ({ [code]: { description, content: { 'application/json': { schema: ErrorSchema } } } });

export function mountMfaRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  // The enrolment routes stay reachable for a Force-MFA user who has no factor yet (DECISIONS). Every
  // MFA, phone and passkey route is an account route: a signed-in user, never an API key (user_required).
  const auth = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const factorProof = requireFactorProof(keel);

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/setup', tags: tag, summary: 'Start enrolling an authenticator app (held 10 minutes)',
      middleware: [auth, factorProof] as const,
      responses: { 200: json(SetupSchema), ...errors(401, 404, 409) },
    }),
    async (c) => c.json(await setupTotp(keel, c.get('principal').userId), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/verify', tags: tag,
      security: [{}, { bearerAuth: [] }],
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
      await assertFactorChangeAllowed(keel, await loadUser(keel, principal.userId), principal.mfa);
      const answer = await confirmTotp(keel, principal.userId, principal.sessionId, code, requestInfo(c));
      await endSessionsWithoutMfa(keel, principal.userId, principal.sessionId);
      tokenResponse(c, keel, answer);
      return c.json(answer, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/enable', tags: tag, summary: 'Confirm a pending authenticator setup; returns recovery codes and an MFA session',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaEnableRequest')) },
      responses: { 200: json(EnabledSchema), ...errors(400, 401, 429) },
    }),
    async (c) => {
      const p = userPrincipal(c);
      const answer = await confirmTotp(keel, p.userId, p.sessionId, c.req.valid('json').code, requestInfo(c));
      await endSessionsWithoutMfa(keel, p.userId, p.sessionId);
      tokenResponse(c, keel, answer);
      return c.json(answer, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/disable', tags: tag, summary: 'Turn off TOTP/SMS (keeps passkeys); 403 when the organisation requires MFA',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaDisableRequest')) },
      responses: { 200: json(MessageSchema), ...errors(400, 401, 403, 409, 429) },
    }),
    async (c) => {
      await disableMfa(keel, c.get('principal').userId, c.req.valid('json').code, requestInfo(c));
      return c.json({ message: 'Multi-factor authentication disabled' }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/recovery-codes', tags: tag, summary: 'Replace all recovery codes (needs a current TOTP or SMS code)',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('RecoveryCodesRequest')) },
      responses: { 200: json(z.object({ recoveryCodes: z.array(z.string()) }).openapi('RecoveryCodes')), ...errors(400, 401, 409, 429) },
    }),
    async (c) => c.json({ recoveryCodes: await rotateRecoveryCodes(keel, c.get('principal').userId, c.req.valid('json').code, requestInfo(c)) }, 200),
  );

  mountSmsRoutes(api, keel);
  mountPasskeyRoutes(api, keel);
}

function mountSmsRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const factorProof = requireFactorProof(keel);

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/phone/verify', tags: tag, summary: 'Text a verification code to a phone number (E.164)',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ phoneNumber: z.string().trim().min(2).max(32).openapi({ example: '+14155550123' }) }).openapi('PhoneVerifyRequest')) },
      responses: { 200: json(CodeSentSchema), ...errors(400, 401, 403, 404, 429), ...unavailable(502, 'The gateway refused the SMS'), ...unavailable(503, 'No SMS gateway') },
    }),
    async (c) => {
      return c.json(await startPhoneVerification(keel, c.get('principal').userId, c.req.valid('json').phoneNumber), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/phone/confirm', tags: tag, summary: 'Confirm the phone with the texted code',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: SmsCode }).openapi('PhoneConfirmRequest')) },
      responses: { 200: json(PhoneConfirmedSchema), ...errors(400, 401, 403, 404) },
    }),
    async (c) => c.json(await confirmPhone(keel, c.get('principal').userId, c.req.valid('json').code, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/sms/enable', tags: tag,
      summary: 'Make SMS to the verified phone the second factor; returns recovery codes and an MFA session',
      middleware: [auth, factorProof] as const,
      request: { body: { required: false, content: { 'application/json': { schema: z.object({}).loose().openapi('SmsEnableRequest') } } } },
      responses: { 200: json(EnabledSchema), ...errors(401, 403, 404, 409), ...unavailable(503, 'No SMS gateway') },
    }),
    async (c) => {
      const p = userPrincipal(c);
      const answer = await enableSms(keel, p.userId, p.sessionId, requestInfo(c));
      await endSessionsWithoutMfa(keel, p.userId, p.sessionId);
      tokenResponse(c, keel, answer);
      return c.json(answer, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/sms/send', tags: tag,
      security: [{}, { bearerAuth: [] }],
      summary: 'With tempToken: text the login code. Without (signed in): text a code for disable or recovery-code rotation',
      request: { body: jsonBody(z.object({ tempToken: TempToken.optional() }).openapi('SmsSendRequest')) },
      responses: { 200: json(CodeSentSchema), ...errors(401, 403, 404, 409, 429), ...unavailable(502, 'The gateway refused the SMS'), ...unavailable(503, 'No SMS gateway') },
    }),
    async (c) => {
      const { tempToken } = c.req.valid('json');
      if (tempToken) return c.json(await sendLoginSms(keel, tempToken), 200);
      const principal = await requireUserPrincipal(keel, c.req.header('authorization'));
      c.set('principal', principal);
      return c.json(await sendSmsToSelf(keel, principal.userId), 200);
    },
  );
}

function mountPasskeyRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const factorProof = requireFactorProof(keel);
  relyingPartyOf(keel); // a misconfigured RP ID / origin is reported at start-up, once

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkeys/register/options', tags: tag, summary: 'Start registering a passkey (password re-entry); the challenge is held 5 minutes',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ currentPassword: Password, name: PasskeyName }).openapi('PasskeyRegisterOptionsRequest')) },
      responses: { 200: json(WebAuthnOptionsSchema), ...errors(400, 401, 403, 404, 429), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const { currentPassword, name } = c.req.valid('json');
      return c.json(asOptions(await passkeyRegistrationOptions(keel, c.get('principal').userId, currentPassword, name)), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkeys/register/verify', tags: tag, summary: 'Store the passkey the browser created; activates MFA',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ credential: RegistrationCredential }).openapi('PasskeyRegisterVerifyRequest')) },
      responses: { 201: json(PasskeyCreatedSchema, 'Registered'), ...errors(400, 401, 403, 404, 409), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const credential = c.req.valid('json').credential as unknown as RegistrationResponseJSON;
      const p = c.get('principal');
      const passkey = await registerPasskey(keel, p.userId, credential, requestInfo(c));
      await endSessionsWithoutMfa(keel, p.userId, p.sessionId);
      return c.json(passkey, 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/auth/passkeys', tags: tag, summary: 'Own passkeys',
      middleware: [auth] as const,
      request: { query: PageQuery },
      responses: { 200: json(paginated(PasskeySchema)), ...errors(400, 401, 403, 404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listPasskeys(keel, c.get('principal').userId, q.page, q.limit);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/auth/passkeys/{id}', tags: tag, summary: 'Rename one of own passkeys',
      middleware: [auth] as const,
      request: { params: z.object({ id: z.uuid() }), body: jsonBody(z.object({ name: PasskeyName }).openapi('PasskeyRenameRequest')) },
      responses: { 200: json(PasskeySchema), ...errors(400, 401, 403, 404) },
    }),
    async (c) => c.json(await renamePasskey(keel, c.get('principal').userId, c.req.valid('param').id, c.req.valid('json').name), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/auth/passkeys/{id}', tags: tag,
      summary: 'Remove one of own passkeys (password re-entry); 409 when it is the last factor under Force MFA',
      middleware: [auth, factorProof] as const,
      request: { params: z.object({ id: z.uuid() }), body: jsonBody(z.object({ currentPassword: Password }).openapi('PasskeyDeleteRequest')) },
      responses: { 204: { description: 'Removed' }, ...errors(400, 401, 403, 404, 409, 429) },
    }),
    async (c) => {
      await deletePasskey(keel, c.get('principal').userId, c.req.valid('param').id, c.req.valid('json').currentPassword, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/passkey/options', tags: tag, summary: 'Second step of login with a passkey: the WebAuthn challenge (5 minutes, single use)',
      request: { body: jsonBody(z.object({ tempToken: TempToken }).openapi('PasskeyLoginOptionsRequest')) },
      responses: { 200: json(WebAuthnOptionsSchema), ...errors(401, 403, 404, 409), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => c.json(asOptions(await passkeyLoginOptions(keel, c.req.valid('json').tempToken)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/passkey/verify', tags: tag, summary: 'Finish login with the passkey assertion: full tokens with mfa: true',
      request: { body: jsonBody(z.object({ tempToken: TempToken, credential: AuthenticationCredential }).openapi('PasskeyLoginVerifyRequest')) },
      responses: { 200: json(TokenAnswerSchema), ...errors(400, 401, 403, 404, 429), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const { tempToken, credential } = c.req.valid('json');
      const answer = await verifyPasskeyLogin(keel, tempToken, credential as unknown as AuthenticationResponseJSON, requestInfo(c));
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );
}
