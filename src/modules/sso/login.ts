import { eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { constantTimeEqual } from '../../platform/crypto.js';
import { validationError } from '../../platform/http/errors.js';
import { OutboundError } from '../../platform/outbound.js';
import type { AuditRequestInfo } from '../audit/service.js';
import { recordSecurityEvent } from '../audit/security-events.js';
import { requestLog } from '../../platform/request-scope.js';
import { loggableError } from '../../platform/safe-error.js';
import { noActiveProvider, openSecret, signInProvider, signsIn, type ProviderOwner, type ProviderRow } from './providers.js';
import { discover, clientConfig, client, rememberJwks } from './oidc.js';
import { completeSsoLogin, emailVerifiedClaim, mapClaims } from './provisioning.js';
import { providerAssertedMfa } from './mfa.js';
import { samlAuthorizeUrl } from './saml.js';
import { CALLBACK_PATH, SSO_LOGIN_PURPOSE, SSO_LOGIN_TTL_MS, SsoFailure } from './constants.js';
import { ssoProviders } from './schema.js';
import { successLocation } from './locations.js';
import { ssoError } from './errors.js';

/** The stored part of an OIDC login session (docs/specification.md "Single sign-on: the login flow"); the PKCE verifier travels sealed beside it. */
interface OidcSessionData {
  type: 'oidc';
  providerId: string;
  orgId: string | null;
  /** Set for a partner's sign-in (docs/decisions.md "Partner-level SSO"). */
  partnerId?: string | null;
  nonce: string;
  redirectPath: string;
  /** SHA-256 of the browser's binding cookie, carried to the exchange code. */
  binding: string;
}

function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/**
 * The post-login path: only a same-origin relative path (`/…`, not `//…` or `/\…`), at most 500
 * characters; anything else is a 400 naming `redirect`. Default `/`. The rule holds for the path as
 * given *and* as normalised (`/.//x` and `/..//x` normalise to `//x`, which a browser or a client-side
 * router reads as another host), and for slashes hidden as `%2f`/`%5c` in the path; the answer is
 * the normalised path and query (a fragment is dropped: the exchange code goes there).
 */
export function safeRedirectPath(keel: Keel, raw: string | undefined): string {
  if (raw === undefined || raw === '') return '/';
  const bad = () => validationError([{ path: 'redirect', message: 'must be a relative path on this site (starting with a single /)' }]);
  if (raw.length > 500 || !raw.startsWith('/') || raw.includes('\\') || hasControl(raw)) throw bad();
  const pathPart = raw.split(/[?#]/, 1)[0] ?? '';
  if (/%(?:2f|5c)/i.test(pathPart)) throw bad();
  const base = new URL(keel.config.publicUrl);
  let resolved: URL;
  try {
    resolved = new URL(raw, base);
  } catch {
    throw bad();
  }
  const path = `${resolved.pathname}${resolved.search}`;
  if (resolved.origin !== base.origin || !path.startsWith('/') || path.startsWith('//') || path.includes('\\') || hasControl(path)) throw bad();
  return path;
}

/** The state cookie's signature: HMAC-SHA256 keyed on the encryption key (never the JWT secret), docs/specification.md "Single sign-on: the login flow" step 2. */
const stateMessage = (state: string): string => `keel:service_sso_state:v1:${state}`;

export function stateCookieValue(keel: Keel, state: string): string {
  return `${state}.${keel.secrets.keyed.make(stateMessage(state))}`;
}

/** docs/specification.md "Single sign-on: the login flow" step 4, first: the returned state against the signed cookie, in constant time; any mismatch is `session_expired`. */
export function checkStateCookie(keel: Keel, cookie: string | undefined, state: string | undefined): string {
  const expired = () => new SsoFailure('session_expired', 'state cookie missing or not matching');
  if (!cookie || !state) throw expired();
  const dot = cookie.lastIndexOf('.');
  const cookieState = dot > 0 ? cookie.slice(0, dot) : '';
  const signature = dot > 0 ? cookie.slice(dot + 1) : '';
  // Under any configured key: a login started just before a key rotation still completes after it.
  const signed = keel.secrets.keyed.matches(stateMessage(cookieState), signature);
  const same = constantTimeEqual(cookieState, state);
  if (!signed || !same) throw expired();
  return state;
}

export const callbackUrl = (keel: Keel) => `${keel.config.publicUrl}${CALLBACK_PATH}`;

const incomplete = (what: string) => ssoError('sso_provider_incomplete', { message: `The SSO provider lacks ${what}: fix it with PATCH /sso/providers/{id}` });

/** The endpoints for a login: stored (discovered or set by hand), else discovered now. */
async function oidcEndpoints(keel: Keel, p: ProviderRow) {
  const secret = openSecret(keel, p);
  if (!p.clientId || !secret || !p.issuer) throw incomplete('clientId, clientSecret or issuer');
  let { authorizationUrl, tokenUrl, userInfoUrl, jwksUrl } = p;
  if (!authorizationUrl || !tokenUrl || !jwksUrl) {
    try {
      const d = await discover(keel, p.issuer);
      authorizationUrl ??= d.authorizationUrl;
      tokenUrl ??= d.tokenUrl;
      userInfoUrl ??= d.userInfoUrl;
      jwksUrl ??= d.jwksUrl;
    } catch {
      // Reported below as missing endpoints.
    }
  }
  if (!authorizationUrl || !tokenUrl || !jwksUrl) throw incomplete('its authorization, token or JWKS endpoint (discovery failed)');
  return { issuer: p.issuer, clientId: p.clientId, clientSecret: secret, authorizationUrl, tokenUrl, userInfoUrl, jwksUrl };
}

export interface LoginStart {
  location: string;
  /** OIDC: the state to bind to the browser with the signed cookie. */
  state: string | null;
}

/**
 * Live login sessions are capped per provider (`SSO_LOGIN_OUTSTANDING_LIMIT`): anonymous starts cannot
 * fill the store without bound. Beyond it: 429 `sso_logins_outstanding` (a soft cap: starts racing at the
 * edge may pass it by their number).
 */
async function assertLoginCapacity(keel: Keel, p: ProviderRow): Promise<void> {
  const cap = keel.config.SSO_LOGIN_OUTSTANDING_LIMIT;
  if ((await keel.singleUse.countLive(keel.db, SSO_LOGIN_PURPOSE, p.id, cap)) < cap) return;
  keel.log.warn({ providerId: p.id, cap }, 'SSO login refused: too many outstanding login sessions for the provider');
  throw ssoError('sso_logins_outstanding', { headers: { 'Retry-After': '60' } });
}

/**
 * `GET /sso/login/:orgId` (docs/specification.md "Single sign-on: the login flow" steps 1-3): the
 * organisation's active provider (else its testing one, for a trial: `signInProvider`), a stored
 * login session, the IdP's URL.
 */
export async function startLogin(keel: Keel, owner: string | ProviderOwner, redirectPath: string, binding: string): Promise<LoginStart> {
  const p = await signInProvider(keel.db, owner);
  if (!p) throw noActiveProvider();
  await assertLoginCapacity(keel, p);
  if (p.type === 'saml') return { location: await samlAuthorizeUrl(keel, p, redirectPath, binding), state: null };
  const endpoints = await oidcEndpoints(keel, p);
  const config = clientConfig(keel, endpoints);
  const verifier = client.randomPKCECodeVerifier();
  const state = client.randomState();
  const nonce = client.randomNonce();
  const data: OidcSessionData = { type: 'oidc', providerId: p.id, orgId: p.orgId, partnerId: p.partnerId, nonce, redirectPath, binding };
  await keel.singleUse.create(keel.db, { purpose: SSO_LOGIN_PURPOSE, token: state, ttlMs: SSO_LOGIN_TTL_MS, subjectId: p.id, data: { ...data }, secret: verifier });
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: callbackUrl(keel),
    scope: p.scopes,
    response_type: 'code',
    code_challenge: await client.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    state,
    nonce,
  });
  return { location: url.href, state };
}

/** The provider a login session names, if it still exists and signs people in (active, or testing: a trial decided by its status now). */
export async function loginProvider(keel: Keel, providerId: unknown): Promise<ProviderRow> {
  if (typeof providerId !== 'string') throw new SsoFailure('provider_not_found', 'session names no provider');
  const [p] = await keel.db.select().from(ssoProviders).where(eq(ssoProviders.id, providerId));
  if (!p || !signsIn(p)) throw new SsoFailure('provider_not_found', 'provider gone or inactive');
  return p;
}

/**
 * `GET /sso/callback` (docs/specification.md "Single sign-on: the login flow" steps 4-10): state against the cookie first, then the login session consumed
 * once, the code exchanged with the PKCE verifier (ID token issuer, audience, expiry and nonce checked
 * by openid-client), UserInfo, the mapping and provisioning. Answers where to send the browser.
 */
export async function oidcCallback(keel: Keel, query: URLSearchParams, cookie: string | undefined, info: AuditRequestInfo): Promise<string> {
  const state = checkStateCookie(keel, cookie, query.get('state') ?? undefined);
  const session = await keel.singleUse.consume(keel.db, SSO_LOGIN_PURPOSE, state);
  if (session?.data.type !== 'oidc' || !session.secret) throw new SsoFailure('session_expired', 'no live login session for this state');
  const data = session.data as unknown as OidcSessionData;
  const p = await loginProvider(keel, data.providerId);
  try {
    return await oidcFinish(keel, p, data, state, session.secret, query, info);
  } catch (err) {
    // From here on the failure is about this provider: it is audited as a failed sign-in.
    if (err instanceof SsoFailure) err.aboutProvider(p);
    throw err;
  }
}

/** The callback once its provider is known: the code exchange, the claims, the sign-in's provisioning. */
async function oidcFinish(keel: Keel, p: ProviderRow, data: OidcSessionData, state: string, verifier: string, query: URLSearchParams, info: AuditRequestInfo): Promise<string> {
  if (p.type !== 'oidc') throw new SsoFailure('provider_not_found', 'provider is no longer OIDC');
  let claims: Record<string, unknown>;
  let tokens: client.TokenEndpointResponse & client.TokenEndpointResponseHelpers;
  let config: client.Configuration;
  let assertedMfa: boolean;
  try {
    const endpoints = await oidcEndpoints(keel, p);
    config = clientConfig(keel, endpoints);
    const current = new URL(`${callbackUrl(keel)}?${query.toString()}`);
    tokens = await client.authorizationCodeGrant(config, current, {
      pkceCodeVerifier: verifier,
      expectedState: state,
      expectedNonce: data.nonce,
      idTokenExpected: true,
    });
    rememberJwks(keel, endpoints, config);
    const idClaims = tokens.claims();
    if (!idClaims) throw new Error('no ID token');
    // From the signed ID token only (UserInfo is merged below and cannot add a second factor).
    assertedMfa = providerAssertedMfa(p, { amr: idClaims.amr, acr: idClaims.acr });
    claims = { ...idClaims };
    if (config.serverMetadata().userinfo_endpoint) {
      const userInfo = await client.fetchUserInfo(config, tokens.access_token, idClaims.sub);
      claims = { ...claims, ...userInfo };
    }
  } catch (err) {
    if (err instanceof SsoFailure) throw err;
    const e = err as { name?: string; code?: string; error?: string; message?: string; cause?: unknown };
    // The outbound guard's refusal (blocked address, timeout, size) may arrive as the library error's cause.
    const cause = e.cause instanceof OutboundError ? ` (outbound ${e.cause.code}: ${e.cause.message})` : '';
    throw new SsoFailure('sso_error', `oidc: ${e.name ?? 'Error'} ${e.code ?? ''} ${e.error ?? ''} ${(e.message ?? '').slice(0, 200)}${cause}`);
  }
  const profile = { ...mapClaims(p.attributeMapping, claims, String(claims.sub), false), mfa: assertedMfa };
  const expiresIn = tokens.expiresIn();
  const code = await completeSsoLogin(keel, p, profile, {
    accessToken: tokens.access_token,
    refreshToken: tokens.refresh_token,
    expiresAt: expiresIn === undefined ? null : new Date(clock.nowMs() + expiresIn * 1000),
  }, info, data.binding, emailVerifiedClaim(p.attributeMapping, claims));
  return successLocation(keel, data.redirectPath, code);
}

/**
 * A refused SSO sign-in whose provider is known (its login session was found): audited `sso.login`
 * with `result: 'failure'`, `details.error` (the callback error code the browser got) and `details.reason`;
 * a refused identity link also as `sso.identity.refused` (the subject asserted, why); both bounded per
 * source address and minute like every refused sign-in (audit/security-events.ts). Failures before
 * a login session is identified (a forged or stale state) are only logged: anyone can send those, and
 * they must not fill the audit log. The entry never fails the redirect (its error is logged).
 */
export async function auditSsoFailure(keel: Keel, failure: SsoFailure, info: AuditRequestInfo): Promise<void> {
  const { providerId, orgId, partnerId, userId, refusedSubject, trial } = failure.context;
  if (!providerId) return;
  const reason = failure.reason.slice(0, 200);
  const who: AuditRequestInfo = { ...info, actor: userId ? { type: 'user', id: userId } : { type: 'anonymous' } };
  const target = userId ? { type: 'user', id: userId } : { type: 'sso_provider', id: providerId };
  try {
    // A refused trial (a provider in testing) is audited as such, like an accepted one.
    await recordSecurityEvent(keel.db, who, { action: trial ? 'sso.login.trial' : 'sso.login', orgId: orgId ?? null, partnerId: partnerId ?? null, target, details: { providerId, error: failure.code, reason } });
    if (refusedSubject !== undefined) {
      const why = reason.startsWith('identity_subject_changed') ? 'subject_changed' : 'subject_taken';
      await recordSecurityEvent(keel.db, who, { action: 'sso.identity.refused', orgId: orgId ?? null, partnerId: partnerId ?? null, target, details: { providerId, subject: refusedSubject, reason: why } });
    }
  } catch (err) {
    requestLog(keel.log, info).error({ error: loggableError(err) }, 'SSO login refused: the audit entry could not be written');
  }
}
