import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from '@simplewebauthn/server';
import type { Context } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, ErrorSchema, json, jsonBody, MessageSchema, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { hashGate } from '../../platform/http/admission.js';
import { requireUserPrincipal } from '../access/bearer.js';
import { requestInfo, tokenResponse, TokenAnswerSchema, userPrincipal } from '../identity/request.js';
import { confirmTotp, disableMfa, rotateRecoveryCodes, setupTotp, stepUpSession, verifyLoginCode } from './service.js';
import { confirmPhone, enableSms, sendLoginSms, sendSmsToSelf, startPhoneVerification } from './sms.js';
import {
  deletePasskey,
  listPasskeys,
  passkeyLoginOptions,
  passkeyReauthOptions,
  passkeyRegistrationOptions,
  registerPasskey,
  renamePasskey,
  verifyPasskeyLogin,
  type Reentry,
  type ReentryPrincipal,
} from './passkeys.js';
import { relyingPartyOf } from './webauthn.js';
import { passkeySignInOptions, removePassword, verifyPasskeySignIn } from './passkey-sign-in.js';
import { assertFactorChangeAllowed, endSessionsWithoutMfa, requireFactorProof } from './factor-change.js';
import { loadUser } from './common.js';

const Code = z.string().trim().min(6).max(20).openapi({ description: '6-digit TOTP or SMS code, or a recovery code XXXX-XXXX', example: '123456' });
const RecoveryCodeList = z.array(z.string()).openapi({
  description: 'Ten one-time recovery codes (`XXXX-XXXX`), each usable once in place of a TOTP or SMS code; shown only here, stored hashed',
  example: ['K7QF-M2XD', 'P9ZR-4HWC'],
});
const SetupSchema = z
  .object({
    secret: z.string().openapi({ description: 'The TOTP secret (base32), for typing into an authenticator app', example: 'JBSWY3DPEHPK3PXP' }),
    otpAuthUrl: z.string().openapi({ description: 'The `otpauth://totp/...` URI with the secret (SHA-1, 6 digits, 30-second period), for authenticator apps' }),
    qrCodeDataUrl: z.string().openapi({ description: 'A `data:image/png;base64,...` QR code of `otpAuthUrl`, to show for scanning' }),
    recoveryCodes: RecoveryCodeList,
    expiresAt: z.string().openapi({ description: 'Until when (10 minutes) the setup waits to be confirmed with a code from the app; ISO 8601 UTC' }),
  })
  .openapi('MfaSetup');
const EnabledSchema = TokenAnswerSchema.extend({ recoveryCodes: RecoveryCodeList }).openapi('MfaEnabled', {
  description: 'The factor is on: a fresh token pair for a session with `mfa: true`, and the recovery codes',
});
const tag = ['mfa'];

const TempToken = z.string().min(1).max(200).openapi({ description: 'The `tempToken` of the login answer (valid 5 minutes)', example: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' });
const Password = z.string().min(1).max(1024).openapi({ description: 'The current account password, re-entered (limited per user; wrong ones count towards the lockout)', example: 'correct-Horse-battery-9' });
const PasskeyName = z.string().trim().min(1).max(255).openapi({ description: 'A name for the passkey, to recognise it in the list (1 to 255 characters)', example: 'MacBook Touch ID' });
const SmsCode = z.string().trim().min(1).max(20).openapi({ description: 'The 6-digit code from the SMS', example: '123456' });
const MaskedPhone = z.string().nullable().openapi({ description: 'The phone number texted, all but its country prefix and last two digits hidden', example: '+1•••••••23' });
const CodeSentSchema = z
  .object({
    message: z.string().openapi({ description: 'Always `Code sent`' }),
    phoneNumberMasked: MaskedPhone,
    expiresAt: z.string().openapi({ description: 'Until when the code is accepted (10 minutes, at most 5 tries); ISO 8601 UTC' }),
  })
  .openapi('SmsCodeSent');
const PhoneConfirmedSchema = z
  .object({ phoneNumberMasked: MaskedPhone, phoneVerified: z.literal(true).openapi({ description: 'Always true: the phone is verified and may be used for SMS MFA' }) })
  .openapi('PhoneConfirmed');
const PasskeySchema = z
  .object({
    id: z.uuid().openapi({ description: 'Passkey id (for rename and delete)' }),
    name: z.string().openapi({ description: 'The name given at registration or rename', example: 'MacBook Touch ID' }),
    credentialId: z.string().openapi({ description: 'The WebAuthn credential id, base64url' }),
    transports: z.array(z.string()).openapi({ description: 'How the browser reaches the authenticator, as it reported them (`internal`, `hybrid`, `usb`, `nfc`, `ble`)', example: ['internal'] }),
    aaguid: z.string().nullable().openapi({ description: 'The authenticator model (AAGUID) it attested, or null when not given' }),
    backupEligible: z.boolean().openapi({ description: 'True when the credential may be synced to other devices (a synced passkey)' }),
    backupState: z.boolean().openapi({ description: 'True when the credential is currently backed up or synced (as of its last use)' }),
    signIn: z.boolean().openapi({ description: 'True for a sign-in passkey (registered with `signIn: true`: discoverable, user verification required), which signs in alone through POST /auth/passkey/options and /auth/passkey/verify; false for a second factor only' }),
    createdAt: z.string().openapi({ description: 'When it was registered, ISO 8601 UTC' }),
    lastUsedAt: z.string().nullable().openapi({ description: 'Last sign-in with it, ISO 8601 UTC; null if never used' }),
  })
  .openapi('Passkey');
const PasskeyCreatedSchema = PasskeySchema.extend({
  recoveryCodes: z.array(z.string()).optional().openapi({ description: 'Only when the account had no recovery codes: shown once' }),
}).openapi('PasskeyCreated');
/** The JSON a browser's navigator.credentials result serialises to (as @simplewebauthn/browser sends it). */
const b64url = z.string().max(65_536);
const b64 = (description: string) => b64url.openapi({ description: `${description} (base64url, as the browser gave it)` });
const credentialCommon = {
  id: b64('The credential id'),
  rawId: b64('The credential id, raw'),
  type: z.literal('public-key').openapi({ description: 'Always `public-key`' }),
  clientExtensionResults: z.record(z.string(), z.unknown()).default({}).openapi({ description: "The browser's `getClientExtensionResults()`; `{}` when none" }),
};
const RegistrationCredential = z
  .object({
    ...credentialCommon,
    response: z
      .object({
        clientDataJSON: b64('The client data JSON'),
        attestationObject: b64('The attestation object'),
        transports: z.array(z.string().max(32)).max(16).optional().openapi({ description: "The authenticator's `getTransports()`, at most 16", example: ['internal', 'hybrid'] }),
      })
      .loose()
      .openapi({ description: "The AuthenticatorAttestationResponse of `navigator.credentials.create()`" }),
  })
  .loose()
  .openapi('PasskeyRegistrationCredential', { description: 'The RegistrationResponseJSON a browser produced (as @simplewebauthn/browser sends it)' });
const AuthenticationCredential = z
  .object({
    ...credentialCommon,
    response: z
      .object({
        clientDataJSON: b64('The client data JSON'),
        authenticatorData: b64('The authenticator data'),
        signature: b64('The assertion signature'),
        userHandle: b64('The user handle (the user id the passkey was registered with)').optional(),
      })
      .loose()
      .openapi({ description: "The AuthenticatorAssertionResponse of `navigator.credentials.get()`" }),
  })
  .loose()
  .openapi('PasskeyAuthenticationCredential', { description: 'The AuthenticationResponseJSON a browser produced (as @simplewebauthn/browser sends it)' });
const WebAuthnOptionsSchema = z
  .object({ challenge: z.string().openapi({ description: 'The challenge (base64url) the authenticator signs; held 5 minutes and usable once' }) })
  .loose()
  .openapi('WebAuthnOptions', { description: 'PublicKeyCredentialCreationOptionsJSON / PublicKeyCredentialRequestOptionsJSON (WebAuthn Level 3)' });
/** The library's option objects are plain JSON (optional members are absent, never undefined). */
const asOptions = (options: { challenge: string }) => options as z.infer<typeof WebAuthnOptionsSchema>;
const unavailable = (code: 502 | 503, description: string) => ({ [code]: { description, content: { 'application/json': { schema: ErrorSchema } } } });

export function mountMfaRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  // The enrolment routes stay reachable for a Force-MFA user who has no factor yet (docs/decisions.md "Tokens and sessions"). Every
  // MFA, phone and passkey route is an account route: a signed-in user, never an API key (user_required).
  const auth = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const factorProof = requireFactorProof(keel);

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/setup', tags: tag, summary: 'Start enrolling an authenticator app (held 10 minutes)',
      middleware: [auth, factorProof] as const,
      responses: { 200: json(SetupSchema), ...errors(404, 409) },
    }),
    async (c) => c.json(await setupTotp(keel, c.get('principal').userId), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/verify', tags: tag,
      security: [{}, { bearerAuth: [] }],
      summary: 'With tempToken: the second step of login. Without: confirm a pending authenticator setup',
      request: { body: jsonBody(
          z
            .object({
              code: Code,
              tempToken: z.string().min(1).max(200).optional().openapi({
                description: 'The `tempToken` of the login answer, to finish signing in (a wrong code is then 401). Omit it, signed in, to confirm a pending authenticator setup (a wrong code is then 400)',
                example: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE',
              }),
            })
            .openapi('MfaVerifyRequest', { example: { code: '123456', tempToken: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' } }),
        ) },
      // Signed in (no tempToken) the caller is authenticated here, not by middleware: an API key is 403 `user_required`.
      responses: { 200: json(z.union([TokenAnswerSchema, EnabledSchema])), ...errors(401, 403, 429) },
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
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaEnableRequest', { example: { code: '123456' } })) },
      responses: { 200: json(EnabledSchema), ...errors(429) },
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
      method: 'post', path: '/auth/mfa/step-up', tags: tag,
      summary: 'Upgrade the current session to mfa: true with a TOTP or SMS code or a recovery code (an SSO session whose provider asserted no second factor)',
      middleware: [auth] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaStepUpRequest', { example: { code: '123456' } })) },
      responses: { 200: json(TokenAnswerSchema, 'The same session, now with mfa: true (a new token pair; cookies set)'), ...errors(404, 409, 429) },
    }),
    async (c) => {
      const p = userPrincipal(c);
      const answer = await stepUpSession(keel, p.userId, p.sessionId, c.req.valid('json').code, requestInfo(c));
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/disable', tags: tag, summary: 'Turn off TOTP/SMS (keeps passkeys); 403 when the organisation requires MFA',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: Code }).openapi('MfaDisableRequest', { example: { code: '123456' } })) },
      responses: { 200: json(MessageSchema), ...errors(409, 429) },
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
      request: { body: jsonBody(z.object({ code: Code }).openapi('RecoveryCodesRequest', { example: { code: '123456' } })) },
      responses: { 200: json(z.object({ recoveryCodes: RecoveryCodeList }).openapi('RecoveryCodes')), ...errors(409, 429) },
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
      request: { body: jsonBody(
          z
            .object({
              phoneNumber: z
                .string()
                .trim()
                .min(2)
                .max(32)
                .openapi({ description: 'The phone number in international form: `+`, country code and number (E.164); anything else is a 400', example: '+14155550123' }),
            })
            .openapi('PhoneVerifyRequest', { example: { phoneNumber: '+14155550123' } }),
        ) },
      responses: { 200: json(CodeSentSchema), ...errors(404, 429), ...unavailable(502, 'The gateway refused the SMS'), ...unavailable(503, 'No SMS gateway') },
    }),
    async (c) => {
      return c.json(await startPhoneVerification(keel, c.get('principal').userId, c.req.valid('json').phoneNumber, requestInfo(c)), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/phone/confirm', tags: tag, summary: 'Confirm the phone with the texted code',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(z.object({ code: SmsCode }).openapi('PhoneConfirmRequest', { example: { code: '123456' } })) },
      responses: { 200: json(PhoneConfirmedSchema), ...errors(404) },
    }),
    async (c) => c.json(await confirmPhone(keel, c.get('principal').userId, c.req.valid('json').code, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/sms/enable', tags: tag,
      summary: 'Make SMS to the verified phone the second factor; returns recovery codes and an MFA session',
      middleware: [auth, factorProof] as const,
      request: { body: { required: false, content: { 'application/json': { schema: z.object({}).loose().openapi('SmsEnableRequest', { description: 'No fields: send `{}` or no body', example: {} }) } } } },
      responses: { 200: json(EnabledSchema), ...errors(404, 409), ...unavailable(503, 'No SMS gateway') },
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
      request: { body: jsonBody(
          z
            .object({
              tempToken: TempToken.optional().openapi({
                description: 'The `tempToken` of the login answer, to text the login code (3 per temp token). Omit it and send a bearer token to text a code for disabling MFA or rotating recovery codes',
              }),
            })
            .openapi('SmsSendRequest', { example: { tempToken: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' } }),
        ) },
      responses: { 200: json(CodeSentSchema), ...errors(401, 403, 404, 409, 429), ...unavailable(502, 'The gateway refused the SMS'), ...unavailable(503, 'No SMS gateway') },
    }),
    async (c) => {
      const { tempToken } = c.req.valid('json');
      if (tempToken) return c.json(await sendLoginSms(keel, tempToken, requestInfo(c)), 200);
      const principal = await requireUserPrincipal(keel, c.req.header('authorization'));
      c.set('principal', principal);
      return c.json(await sendSmsToSelf(keel, principal.userId, requestInfo(c)), 200);
    },
  );
}

const PasskeyReauth = z
  .object({
    challengeId: z.string().min(1).max(200).openapi({ description: 'The `challengeId` of POST /auth/passkeys/reauth/options (this session\'s, within 2 minutes, once)', example: 'Hk3nW0qYd8pLr2tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' }),
    response: AuthenticationCredential,
  })
  .openapi('PasskeyReauth', { description: 'A passkey re-authentication, in place of `currentPassword` (docs/decisions.md "Passwordless accounts")' });

const PasskeyReauthOptionsSchema = z
  .object({
    options: WebAuthnOptionsSchema,
    challengeId: z.string().openapi({ description: 'Names this challenge in `reauth.challengeId`; valid 2 minutes, for this session, usable once', example: 'Hk3nW0qYd8pLr2tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' }),
  })
  .openapi('PasskeyReauthOptions');

/** Exactly one proof of presence: `currentPassword` or `reauth`. */
const oneReentry = (b: { currentPassword?: string | undefined; reauth?: unknown }): boolean => (b.currentPassword === undefined) !== (b.reauth === undefined);
const reentryIssue = { message: 'give currentPassword or reauth (one of them)', path: ['currentPassword'] };

function reentryOf(b: { currentPassword?: string | undefined; reauth?: { challengeId: string; response: unknown } | undefined }): Reentry {
  if (b.reauth) return { reauth: { challengeId: b.reauth.challengeId, response: b.reauth.response as AuthenticationResponseJSON } };
  return { currentPassword: b.currentPassword ?? '' };
}

function reentryPrincipal(c: Context<AppEnv>): ReentryPrincipal {
  const p = userPrincipal(c);
  return { userId: p.userId, sessionId: p.sessionId };
}

function mountPasskeyRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel, { allowUnenrolled: true, principal: 'user' });
  const factorProof = requireFactorProof(keel);
  relyingPartyOf(keel); // a misconfigured RP ID / origin is reported at start-up, once

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkeys/register/options', tags: tag, summary: 'Start registering a passkey (password re-entry, or a passkey re-authentication); the challenge is held 5 minutes',
      // A password re-entry is an Argon2 verify: refused before the body is read while the hash queue is full.
      middleware: [hashGate, auth, factorProof] as const,
      request: { body: jsonBody(
          z
            .object({
              currentPassword: Password.optional(),
              reauth: PasskeyReauth.optional(),
              name: PasskeyName,
              signIn: z.boolean().default(false).openapi({
                description: 'True to register a sign-in passkey (docs/decisions.md "Sign-in options"): a discoverable credential with user verification required, which then signs in alone; false (the default) for a second factor only',
              }),
            })
            .refine(oneReentry, reentryIssue)
            .openapi('PasskeyRegisterOptionsRequest', { example: { currentPassword: 'correct-Horse-battery-9', name: 'MacBook Touch ID', signIn: true } }),
        ) },
      responses: { 200: json(WebAuthnOptionsSchema), ...errors(404, 429), ...unavailable(503, 'WebAuthn relying party misconfigured, or the password hash queue is full (`overloaded`, with Retry-After)') },
    }),
    async (c) => {
      const body = c.req.valid('json');
      return c.json(asOptions(await passkeyRegistrationOptions(keel, reentryPrincipal(c), reentryOf(body), body.name, body.signIn, requestInfo(c))), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkeys/register/verify', tags: tag, summary: 'Store the passkey the browser created; activates MFA',
      middleware: [auth, factorProof] as const,
      request: { body: jsonBody(
          z.object({ credential: RegistrationCredential }).openapi('PasskeyRegisterVerifyRequest', {
            example: { credential: { id: 'mQqS0Xh3cXKkQ2n1bY3k7w', rawId: 'mQqS0Xh3cXKkQ2n1bY3k7w', type: 'public-key', response: { clientDataJSON: 'eyJ0eXBlIjoid2ViYXV0aG4uY3JlYXRlIn0', attestationObject: 'o2NmbXRkbm9uZWdhdHRTdG10oGhhdXRoRGF0YQ', transports: ['internal'] }, clientExtensionResults: {} } },
          }),
        ) },
      responses: { 201: json(PasskeyCreatedSchema, 'Registered'), ...errors(404, 409), ...unavailable(503, 'WebAuthn relying party misconfigured') },
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
      method: 'post', path: '/auth/passkeys/reauth/options', tags: tag,
      summary: 'Start a passkey re-authentication (in place of re-entering a password): a challenge for own passkeys, user verification required, for this session, 2 minutes, single use',
      middleware: [auth] as const,
      responses: { 200: json(PasskeyReauthOptionsSchema), ...errors(404, 409, 429), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const { options, challengeId } = await passkeyReauthOptions(keel, reentryPrincipal(c));
      return c.json({ options: asOptions(options), challengeId }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/auth/passkeys', tags: tag, summary: 'Own passkeys',
      middleware: [auth] as const,
      request: { query: PageQuery },
      responses: { 200: json(paginated(PasskeySchema)), ...errors(404) },
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
      request: {
        params: z.object({ id: z.uuid().openapi({ description: 'Id of one of own passkeys (from GET /auth/passkeys); another user\'s is 404', param: { name: 'id', in: 'path' } }) }),
        body: jsonBody(z.object({ name: PasskeyName }).openapi('PasskeyRenameRequest', { example: { name: 'Work YubiKey' } })),
      },
      responses: { 200: json(PasskeySchema), ...errors(404) },
    }),
    async (c) => c.json(await renamePasskey(keel, c.get('principal').userId, c.req.valid('param').id, c.req.valid('json').name), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/auth/passkeys/{id}', tags: tag,
      summary: 'Remove one of own passkeys (password re-entry, or a passkey re-authentication); 409 when it is the last factor under Force MFA, or would leave an account without a password fewer than two sign-in passkeys',
      middleware: [hashGate, auth, factorProof] as const,
      request: {
        params: z.object({ id: z.uuid().openapi({ description: 'Id of one of own passkeys (from GET /auth/passkeys); another user\'s is 404', param: { name: 'id', in: 'path' } }) }),
        body: jsonBody(z.object({ currentPassword: Password.optional(), reauth: PasskeyReauth.optional() }).refine(oneReentry, reentryIssue).openapi('PasskeyDeleteRequest', { example: { currentPassword: 'correct-Horse-battery-9' } })),
      },
      responses: { 204: { description: 'Removed' }, ...errors(404, 409, 429) },
    }),
    async (c) => {
      await deletePasskey(keel, reentryPrincipal(c), c.req.valid('param').id, reentryOf(c.req.valid('json')), requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/passkey/options', tags: tag, summary: 'Second step of login with a passkey: the WebAuthn challenge (5 minutes, single use)',
      request: { body: jsonBody(z.object({ tempToken: TempToken }).openapi('PasskeyLoginOptionsRequest', { example: { tempToken: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' } })) },
      responses: { 200: json(WebAuthnOptionsSchema), ...errors(401, 403, 404, 409), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => c.json(asOptions(await passkeyLoginOptions(keel, c.req.valid('json').tempToken)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/mfa/passkey/verify', tags: tag, summary: 'Finish login with the passkey assertion: full tokens with mfa: true',
      request: { body: jsonBody(
          z.object({ tempToken: TempToken, credential: AuthenticationCredential }).openapi('PasskeyLoginVerifyRequest', {
            example: { tempToken: 'fN3kq8WvY2pLr0tB5xZc7hJm1sDg4uAe9oRi6yKwQbE', credential: { id: 'mQqS0Xh3cXKkQ2n1bY3k7w', rawId: 'mQqS0Xh3cXKkQ2n1bY3k7w', type: 'public-key', response: { clientDataJSON: 'eyJ0eXBlIjoid2ViYXV0aG4uZ2V0In0', authenticatorData: 'SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAAAQ', signature: 'MEUCIQDx7k9f3Gd8k2Hc', userHandle: 'AZNvToxae46dTzpbbH2Onw' }, clientExtensionResults: {} } },
          }),
        ) },
      responses: { 200: json(TokenAnswerSchema), ...errors(401, 403, 404, 429), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const { tempToken, credential } = c.req.valid('json');
      const answer = await verifyPasskeyLogin(keel, tempToken, credential as unknown as AuthenticationResponseJSON, requestInfo(c));
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );
  mountPasskeySignInRoutes(api, keel);
}

const PasskeySignInOptionsSchema = z
  .object({
    options: WebAuthnOptionsSchema,
    challengeId: z.string().openapi({ description: 'Names this challenge in POST /auth/passkey/verify; valid 5 minutes and usable once', example: 'Hk3nW0qYd8pLr2tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' }),
  })
  .openapi('PasskeySignInOptions');

function mountPasskeySignInRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel, { principal: 'user' });

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkey/options', tags: tag,
      summary: 'Start signing in with a passkey alone: the WebAuthn challenge (user verification required; 5 minutes, single use)',
      request: { body: {
          required: false,
          content: { 'application/json': { schema: z
            .object({
              email: z.email().max(255).optional().openapi({ description: 'For a passkey the browser cannot discover by itself: the account\'s email, to list its sign-in passkeys. Omit it (or send no body) for usernameless sign-in and autofill', example: 'ada@example.com' }),
            })
            .openapi('PasskeySignInOptionsRequest', { example: {} }) } },
        } },
      responses: { 200: json(PasskeySignInOptionsSchema), ...errors(404, 429), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const email = (c.req.header('content-length') ?? '0') !== '0' ? c.req.valid('json').email : undefined;
      const { options, challengeId } = await passkeySignInOptions(keel, email, requestInfo(c));
      return c.json({ options: asOptions(options), challengeId }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/auth/passkey/verify', tags: tag,
      summary: 'Finish signing in with a passkey: full tokens with mfa: true (the login answer)',
      request: { body: jsonBody(
          z
            .object({
              challengeId: z.string().min(1).max(200).openapi({ description: 'The `challengeId` of POST /auth/passkey/options', example: 'Hk3nW0qYd8pLr2tB5xZc7hJm1sDg4uAe9oRi6yKwQbE' }),
              response: AuthenticationCredential,
            })
            .openapi('PasskeySignInVerifyRequest', {
              example: { challengeId: 'Hk3nW0qYd8pLr2tB5xZc7hJm1sDg4uAe9oRi6yKwQbE', response: { id: 'mQqS0Xh3cXKkQ2n1bY3k7w', rawId: 'mQqS0Xh3cXKkQ2n1bY3k7w', type: 'public-key', response: { clientDataJSON: 'eyJ0eXBlIjoid2ViYXV0aG4uZ2V0In0', authenticatorData: 'SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAAAQ', signature: 'MEUCIQDx7k9f3Gd8k2Hc', userHandle: 'AZNvToxae46dTzpbbH2Onw' }, clientExtensionResults: {} } },
            }),
        ) },
      responses: { 200: json(TokenAnswerSchema), ...errors(401, 403, 404), ...unavailable(503, 'WebAuthn relying party misconfigured') },
    }),
    async (c) => {
      const { challengeId, response } = c.req.valid('json');
      const answer = await verifyPasskeySignIn(keel, challengeId, response as unknown as AuthenticationResponseJSON, requestInfo(c));
      return c.json(tokenResponse(c, keel, answer), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/auth/password', tags: tag,
      summary: 'Remove the password (two sign-in passkeys, a session signed in with a second factor in the last 10 minutes, password re-entry); a reset link sets one again',
      middleware: [hashGate, auth] as const,
      request: { body: jsonBody(z.object({ currentPassword: Password }).openapi('PasswordRemoveRequest', { example: { currentPassword: 'correct-Horse-battery-9' } })) },
      responses: { 204: { description: 'Removed: every password path now refuses the account' }, ...errors(404, 409, 429) },
    }),
    async (c) => {
      const p = userPrincipal(c);
      await removePassword(keel, p, c.req.valid('json').currentPassword, requestInfo(c));
      return c.body(null, 204);
    },
  );
}
