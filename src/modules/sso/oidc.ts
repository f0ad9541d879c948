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
