import * as client from 'openid-client';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { outboundRequest, OutboundError } from '../../platform/outbound.js';

/** Every call to an IdP (discovery, token, UserInfo, JWKS): one deadline and a cap on the answer. */
export const IDP_TIMEOUT_MS = 10_000;
export const IDP_MAX_RESPONSE_BYTES = 1024 * 1024;

/**
 * openid-client's fetch, routed through the outbound guard (platform/outbound.ts): the target rules of
 * docs/specification.md "Outbound targets" on every request, the vetted address pinned at connect time, one deadline, a size cap, no
 * redirect followed.
 */
export function guardedFetch(keel: Keel): client.CustomFetch {
  return async (url, options) => {
    const method = options.method === 'GET' ? 'GET' : 'POST';
    const body = options.body;
    const res = await outboundRequest(
      url,
      {
        method,
        headers: options.headers,
        ...(body === undefined || body === null ? {} : { body: typeof body === 'string' ? body : body instanceof URLSearchParams ? body.toString() : Buffer.from(body as ArrayBuffer) }),
        timeoutMs: IDP_TIMEOUT_MS,
        maxResponseBytes: IDP_MAX_RESPONSE_BYTES,
      },
      keel.outbound,
    );
    const headers = new Headers();
    for (const [k, v] of Object.entries(res.headers)) {
      if (v === undefined) continue;
      for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
    }
    const nullBody = res.status === 204 || res.status === 304 || (res.status >= 100 && res.status < 200);
    return new Response(nullBody ? null : new Uint8Array(res.body), { status: res.status, headers });
  };
}

/** What openid-client needs besides the endpoints: the guarded fetch and, only with ALLOW_INSECURE_TARGETS, http issuers. */
function options(keel: Keel): client.DiscoveryRequestOptions {
  return {
    [client.customFetch]: guardedFetch(keel),
    timeout: IDP_TIMEOUT_MS / 1000,
    // Plain-http issuers only under ALLOW_INSECURE_TARGETS (refused in production).
    // eslint-disable-next-line @typescript-eslint/no-deprecated
    ...(keel.outbound.allowInsecure ? { execute: [client.allowInsecureRequests] } : {}),
  };
}

export interface Discovered {
  issuer: string;
  authorizationUrl: string | null;
  tokenUrl: string | null;
  userInfoUrl: string | null;
  jwksUrl: string | null;
  tokenEndpointAuthMethods: string[] | null;
}

/** OIDC discovery (`.well-known/openid-configuration`) through the guard; throws on any failure. */
export async function discover(keel: Keel, issuer: string): Promise<Discovered> {
  const config = await client.discovery(new URL(issuer), 'keel-discovery', undefined, undefined, options(keel));
  const m = config.serverMetadata();
  return {
    issuer: m.issuer,
    authorizationUrl: m.authorization_endpoint ?? null,
    tokenUrl: m.token_endpoint ?? null,
    userInfoUrl: m.userinfo_endpoint ?? null,
    jwksUrl: m.jwks_uri ?? null,
    tokenEndpointAuthMethods: m.token_endpoint_auth_methods_supported ?? null,
  };
}

/** A reason safe to show an administrator (never a secret; the IdP's own error text is not echoed for token calls). */
export function discoveryFailure(err: unknown): string {
  if (err instanceof OutboundError) return `${err.code}: ${err.message}`;
  if (err instanceof TypeError && /URL/i.test(err.message)) return 'invalid_url: the issuer is not a URL';
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e.code === 'string' ? e.code : 'discovery_failed';
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof OutboundError) return `${cause.code}: ${cause.message}`;
  return `${code}: ${typeof e.message === 'string' ? e.message.slice(0, 200) : 'discovery failed'}`;
}

/** What the token endpoint said of the client's id and secret (docs/decisions.md "SSO that explains itself"). */
export interface CredentialCheck {
  /** `accepted`: the endpoint refused only the made-up code (`invalid_grant`); `rejected`: it refused the client (`invalid_client`, `unauthorized_client`); `unknown`: anything else. */
  result: 'accepted' | 'rejected' | 'unknown';
  message: string;
}

/**
 * Checks the client credentials without signing anyone in: a token request with a made-up code (and
 * PKCE verifier), authenticated as a login is (`client_secret_basic`), sent through the outbound
 * guard. An endpoint that accepts the client refuses the code (`invalid_grant`); one that refuses the
 * client answers `invalid_client`. The IdP's own text is not echoed, only its error code.
 */
export async function probeClientCredentials(keel: Keel, e: { issuer: string; tokenUrl: string; clientId: string; clientSecret: string; redirectUri: string }): Promise<CredentialCheck> {
  const body = new URLSearchParams({
    grant_type: 'authorization_code',
    code: `keel-credential-check-${client.randomState()}`,
    redirect_uri: e.redirectUri,
    code_verifier: client.randomPKCECodeVerifier(),
  });
  const headers = new Headers({ 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' });
  client.ClientSecretBasic(e.clientSecret)({ issuer: e.issuer }, { client_id: e.clientId }, body, headers);
  let res;
  try {
    res = await outboundRequest(e.tokenUrl, { method: 'POST', headers: Object.fromEntries(headers), body: body.toString(), timeoutMs: IDP_TIMEOUT_MS, maxResponseBytes: IDP_MAX_RESPONSE_BYTES }, keel.outbound);
  } catch (err) {
    return { result: 'unknown', message: `The token endpoint could not be reached: ${discoveryFailure(err)}` };
  }
  let code: unknown;
  try {
    code = (JSON.parse(res.body.toString('utf8')) as { error?: unknown }).error;
  } catch {
    code = undefined;
  }
  if (code === 'invalid_grant') return { result: 'accepted', message: 'The client id and secret were accepted (the token endpoint refused only a made-up code: invalid_grant)' };
  if (code === 'invalid_client' || code === 'unauthorized_client') return { result: 'rejected', message: `The client id or secret was refused by the token endpoint (${code}): check both at the identity provider` };
  const said = typeof code === 'string' && /^[\w.-]{1,64}$/.test(code) ? `error ${code}` : 'no OAuth error code';
  return { result: 'unknown', message: `The token endpoint answered HTTP ${res.status} with ${said}: the client credentials could not be confirmed` };
}

export interface OidcEndpoints {
  issuer: string;
  clientId: string;
  clientSecret: string;
  authorizationUrl: string;
  tokenUrl: string;
  userInfoUrl: string | null;
  jwksUrl: string | null;
}

/**
 * The client configuration for a login: the stored endpoints (discovered or set by hand), the
 * client secret (HTTP Basic), the guarded fetch, and Keel's clock for the ID token's time checks.
 */
export function clientConfig(keel: Keel, e: OidcEndpoints): client.Configuration {
  const server: client.ServerMetadata = {
    issuer: e.issuer,
    authorization_endpoint: e.authorizationUrl,
    token_endpoint: e.tokenUrl,
    ...(e.userInfoUrl ? { userinfo_endpoint: e.userInfoUrl } : {}),
    ...(e.jwksUrl ? { jwks_uri: e.jwksUrl } : {}),
  };
  const skewSeconds = Math.round((clock.nowMs() - Date.now()) / 1000);
  const config = new client.Configuration(server, e.clientId, { client_secret: e.clientSecret, [client.clockSkew]: skewSeconds }, client.ClientSecretBasic(e.clientSecret));
  config[client.customFetch] = guardedFetch(keel);
  config.timeout = IDP_TIMEOUT_MS / 1000;
  // The ID token's signature is checked against the IdP's JWKS too (openid-client skips it by default
  // for a token received straight from the token endpoint; under ALLOW_INSECURE_TARGETS no TLS vouches
  // for the issuer). The key set is kept per process and issuer, refreshed by openid-client when stale.
  client.enableNonRepudiationChecks(config);
  const cached = keel.modules.get('sso').jwks.get(jwksKey(e));
  if (cached) client.setJwksCache(config, cached);
  // eslint-disable-next-line @typescript-eslint/no-deprecated
  if (keel.outbound.allowInsecure) client.allowInsecureRequests(config);
  return config;
}

const jwksKey = (e: OidcEndpoints) => `${e.issuer}|${e.jwksUrl ?? ''}`;

/** Keeps the key set a login fetched (or refreshed) for the next login of the same issuer (in the module's handle). */
export function rememberJwks(keel: Keel, e: OidcEndpoints, config: client.Configuration): void {
  const fresh = client.getJwksCache(config);
  if (!fresh) return;
  keel.modules.get('sso').jwks.set(jwksKey(e), fresh);
}

export { client };
