// The console's one way to call Keel: an openapi-fetch client over the generated `paths`
// (web/src/api/schema.d.ts), JSON in and out under /api/v1, the access token in memory only, a
// silent refresh by the HttpOnly cookie (with the CSRF header) when it runs out, and every error
// turned into an ApiError carrying the envelope `{error, code, details?}`.

import createClient, { type Middleware } from 'openapi-fetch';
import type { paths, Schema } from './api/types';
import type { ErrorCode } from './api/errors';

export type { Page } from './api/types';

export const API = '/api/v1';

export type MfaMethod = Schema<'MfaChallenge'>['mfaMethod'];

export type Permission = Schema<'Permission'>;

export type SelfProfile = Schema<'SelfProfile'>;

export type TokenAnswer = Schema<'TokenAnswer'>;

export type MfaChallenge = Schema<'MfaChallenge'>;


export interface FieldError {
  path: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
    readonly retryAfter?: number,
  ) {
    super(message);
  }

  /** `details.fields` of a validation failure, by field path. */
  get fields(): Record<string, string> {
    const out: Record<string, string> = {};
    const list = this.details?.fields;
    if (Array.isArray(list)) {
      for (const f of list as FieldError[]) out[f.path] ??= f.message;
    }
    return out;
  }
}

export function isMfaChallenge(x: unknown): x is MfaChallenge {
  return typeof x === 'object' && x !== null && (x as { mfaRequired?: unknown }).mfaRequired === true;
}

export function isTokenAnswer(x: unknown): x is TokenAnswer {
  return typeof x === 'object' && x !== null && typeof (x as { accessToken?: unknown }).accessToken === 'string';
}

// ---- session state (memory only: a reload signs in again through the refresh cookie) ----

let accessToken: string | null = null;
let refreshTimer: ReturnType<typeof setTimeout> | undefined;
const listeners = {
  /** The session ended (refresh refused): the app shows the sign-in page. */
  signedOut: new Set<() => void>(),
  /** A route answered 428 mfa_enrollment_required. */
  enrolmentRequired: new Set<() => void>(),
  /** A refresh brought new tokens (and the current profile). */
  refreshed: new Set<(t: TokenAnswer) => void>(),
};

export function on<K extends keyof typeof listeners>(event: K, fn: (typeof listeners)[K] extends Set<infer F> ? F : never): () => void {
  const set = listeners[event] as Set<typeof fn>;
  set.add(fn);
  return () => set.delete(fn);
}

export function setTokens(t: TokenAnswer | null): void {
  accessToken = t?.accessToken ?? null;
  clearTimeout(refreshTimer);
  // Renew a minute before the access token runs out, so a page left open stays signed in.
  if (t) refreshTimer = setTimeout(() => void refresh(), Math.max(30, t.expiresIn - 60) * 1000);
}

export function hasAccessToken(): boolean {
  return accessToken !== null;
}

function cookie(name: string): string | null {
  for (const part of document.cookie.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return decodeURIComponent(v.join('='));
  }
  return null;
}

/** True when the browser holds a session cookie pair worth trying to refresh. */
export function hasSessionCookie(): boolean {
  return cookie('service_csrf') !== null;
}

async function parseError(res: Response): Promise<ApiError> {
  let body: { error?: string; code?: ErrorCode; details?: Record<string, unknown>; retryAfter?: number } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not JSON: described by its status below
  }
  const fallback = res.status >= 500 ? 'Keel could not answer right now. Try again in a moment.' : `The request failed (${res.status}).`;
  return new ApiError(res.status, body.code ?? `http_${res.status}`, body.error ?? fallback, body.details, body.retryAfter);
}

let refreshing: Promise<TokenAnswer | null> | null = null;

/**
 * Rotates the refresh cookie (one at a time per page). A 409 `refresh_raced` means another tab
 * rotated it a moment ago: the browser now holds the new cookie, so one more try succeeds.
 */
export function refresh(): Promise<TokenAnswer | null> {
  refreshing ??= (async () => {
    try {
      for (let attempt = 0; attempt < 2; attempt++) {
        const csrf = cookie('service_csrf');
        if (!csrf) break;
        const res = await fetch(`${API}/auth/refresh`, {
          method: 'POST',
          credentials: 'same-origin',
          headers: { 'x-service-csrf': csrf },
        });
        if (res.ok) {
          const t = (await res.json()) as TokenAnswer;
          setTokens(t);
          for (const fn of listeners.refreshed) fn(t);
          return t;
        }
        if (res.status === 409 && attempt === 0) {
          await new Promise((r) => setTimeout(r, 250));
          continue;
        }
        break;
      }
      if (accessToken) {
        setTokens(null);
        for (const fn of listeners.signedOut) fn();
      }
      return null;
    } catch {
      return null;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

export interface CallOptions {
  body?: unknown;
  query?: Record<string, string | number | boolean | undefined | null>;
  /** Use this bearer instead of the session's (never refreshed). */
  token?: string;
  /** Give the raw Response (downloads). */
  raw?: boolean;
}

export function withQuery(path: string, query?: CallOptions['query']): string {
  if (!query) return path;
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') qs.set(k, String(v));
  const s = qs.toString();
  return s ? `${path}${path.includes('?') ? '&' : '?'}${s}` : path;
}

/** Requests that may be sent again after a refresh (a clone taken before the body is read), by request id. */
const retryable = new Map<string, Request>();

/**
 * The session around every call of the client: the bearer (unless the caller set its own, which is
 * never refreshed); on a 401 one refresh and one retry; a failure thrown as an ApiError (a 428
 * `mfa_enrollment_required` also tells the app); a network failure as `network_error`.
 */
const session: Middleware = {
  onRequest({ request, id }) {
    if (request.headers.has('authorization')) return undefined;
    if (accessToken) request.headers.set('authorization', `Bearer ${accessToken}`);
    if (accessToken && !new URL(request.url).pathname.startsWith(`${API}/auth/refresh`)) retryable.set(id, request.clone());
    return undefined;
  },
  async onResponse({ response, id }) {
    const again = retryable.get(id);
    retryable.delete(id);
    let res = response;
    // The access token ran out (or the session was rotated elsewhere): refresh once and retry.
    if (res.status === 401 && again && accessToken && (await refresh())) {
      const headers = new Headers(again.headers);
      headers.set('authorization', `Bearer ${accessToken}`);
      try {
        res = await fetch(new Request(again, { headers }));
      } catch {
        throw networkError();
      }
    }
    if (!res.ok) {
      const err = await parseError(res);
      if (err.status === 428 && err.code === 'mfa_enrollment_required') for (const fn of listeners.enrolmentRequired) fn();
      throw err;
    }
    return res;
  },
  onError({ error, id }) {
    retryable.delete(id);
    return error instanceof ApiError ? error : networkError();
  },
};

function networkError(): ApiError {
  return new ApiError(0, 'network_error', 'Keel cannot be reached. Check the connection and try again.');
}

/** The typed client: `client.GET('/api/v1/webhooks/{id}', { params: { path: { id } } })`; a failure throws an ApiError. */
export const client = createClient<paths>({ baseUrl: '', credentials: 'same-origin' });
client.use(session);

/** The body of a typed call's answer: a failure has already thrown an ApiError, so `data` is there (undefined only for a 204). */
export function dataOf<T>(answer: { data?: T }): T {
  return answer.data as T;
}

/** The same client called with a concrete path (ids filled in), for `api` below. */
const byPath = client as unknown as {
  request(method: string, url: string, init: Record<string, unknown>): Promise<{ data?: unknown; response: Response }>;
};

/**
 * Calls the API by a concrete path under /api/v1 through the same client; resolves to the parsed
 * JSON (undefined for 204), or throws an ApiError. `T` names a generated schema type.
 */
export async function api<T = unknown>(method: string, path: string, opts: CallOptions = {}): Promise<T> {
  const { data, response } = await byPath.request(method, `${API}${withQuery(path, opts.query)}`, {
    ...(opts.body === undefined ? {} : { body: opts.body }),
    ...(opts.token ? { headers: { authorization: `Bearer ${opts.token}` } } : {}),
    parseAs: opts.raw ? 'stream' : 'json',
  });
  if (opts.raw) return response as T;
  return data as T;
}

/** Fetches a file the API streams (audit export) and hands it to the browser as a download. */
export async function download(path: string, query: CallOptions['query'], filename: string): Promise<void> {
  const res = await api<Response>('GET', path, { query, raw: true });
  saveBlob(await res.blob(), filename);
}

export function saveBlob(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** True when `perms` grant `resource:action` (`*` is a wildcard on either side). */
export function grants(perms: readonly Permission[], resource: string, action: string): boolean {
  return perms.some((p) => (p.resource === '*' || p.resource === resource) && (p.action === '*' || p.action === action));
}

/** What a failed WebAuthn ceremony in the browser means, as an error the pages show. */
export function passkeyError(err: unknown): ApiError {
  const name = err instanceof Error ? err.name : '';
  if (name === 'NotAllowedError') return new ApiError(0, 'passkey_cancelled', 'The passkey prompt was closed or timed out. Try again.');
  if (name === 'InvalidStateError') return new ApiError(0, 'passkey_exists', 'This device already holds a passkey for your account.');
  return new ApiError(0, 'passkey_unavailable', 'This browser could not use a passkey here.');
}
