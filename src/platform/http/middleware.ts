import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { accessLogger, type Logger } from '../logger.js';
import { errorResponse, validationError, platformError, type AppError } from './errors.js';
import { unstorableInUrl } from './validation.js';
import { validTraceparent } from '../request-scope.js';
import type { Admission } from './admission.js';
import type { RefusalLog } from './refusal-log.js';
import type { RefusalHold } from './refusal-hold.js';
import type { RequestLoad } from './load.js';

export interface PlatformVariables {
  requestId: string;
  /** Client IP: the socket address, or X-Forwarded-For when the socket peer is a trusted proxy. */
  ip: string;
  /** The client's W3C `traceparent`, when it sent a valid one (kept, logged on every line, echoed). */
  traceparent: string | undefined;
}

/**
 * Told when each answer leaves (platform/metrics.ts observes latency by route template): the
 * context still holds the matched route; `ms` is the time from the first middleware to the close.
 */
export type OnAnswered = (c: Context, status: number, ms: number) => void;

/*
 * Cost notes (bench/README.md "Reads"): on a cached authenticated read the middleware, not the work,
 * was most of the time. Three things here keep it small:
 * - Fixed headers go on Node's own response (`outgoing.setHeader`), which writeHead merges with the
 *   handler's headers (the handler's win). Setting them on hono's context after the handler made
 *   the Node adapter rebuild its lightweight response as a full web Response; before it, every
 *   answer paid for undici's Headers validation. Outside Node (`app.request` in unit tests) they
 *   are prepared on the context instead.
 * - No pino child logger and no AsyncLocalStorage per request: the access line is given the id
 *   and traceparent, and a service line gets them from `requestLog` (platform/request-scope.ts).
 * - A body is judged by its Content-Length and left unread until the route parses it, so the Node
 *   adapter reads it straight from the socket (touching `c.req.raw.body` builds a web stream).
 */

/** Node's response behind a request served by @hono/node-server; undefined elsewhere (`app.request` in unit tests). */
function nodeResponse(c: Context): ServerResponse | undefined {
  return (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
}

/** Sets a header every answer carries, whatever made the answer. */
function fixedHeader(c: Context, name: string, value: string): void {
  const outgoing = nodeResponse(c);
  if (outgoing && !outgoing.headersSent) outgoing.setHeader(name, value);
  else c.header(name, value);
}

/** Outside Node: a handler that answered with its own Response object skipped the prepared headers. */
function ensurePrepared(c: Context, headers: readonly (readonly [string, string])[]): void {
  if (nodeResponse(c)) return;
  for (const [name, value] of headers) if (!c.res.headers.has(name)) c.header(name, value);
}

/*
 * Early answers to requests whose body is still arriving (docs/decisions.md "Security fixes and the request edge").
 *
 * A 404, 401, 400 or 413 can be answered before the client has sent its body. Closing the connection
 * then (Node closes after an answer marked `Connection: close`; @hono/node-server gives an unread
 * body half a second and then destroys the socket) resets it under a client that is still sending,
 * which sees EPIPE or ECONNRESET and, if the reset overtakes the answer, never reads the answer.
 * Both of those closes go through the socket's `destroySoon()`, so each socket that carries a body
 * gets one that first reads and drops the rest of the body (at most EARLY_ANSWER_DRAIN_BYTES, for at
 * most EARLY_ANSWER_DRAIN_MS), and only then closes, or, when the answer allowed keep-alive, leaves
 * the connection open for the next request. A body declared larger than the bound is not waited
 * for: the connection closes at once, as before.
 */

/** The most of an unread request body read and dropped after an early answer before the connection closes. */
export const EARLY_ANSWER_DRAIN_BYTES = 16 * 1024 * 1024;
/** How long the rest of a body may take to arrive after an early answer. */
export const EARLY_ANSWER_DRAIN_MS = 30_000;

const BODY_IN_FLIGHT = Symbol('keel.bodyInFlight');

interface InFlight {
  incoming: IncomingMessage;
  outgoing: ServerResponse;
  draining: boolean;
}

type DrainingSocket = Socket & { [BODY_IN_FLIGHT]?: InFlight };

/** Closes `socket` only once the current request's body has arrived (bounded); see above. */
function closeAfterBody(socket: DrainingSocket, close: () => void): void {
  const state = socket[BODY_IN_FLIGHT];
  const body = state?.incoming;
  if (!state || !body || body.readableEnded || body.destroyed || socket.destroyed) {
    close();
    return;
  }
  if (state.draining) return;
  const declared = Number(body.headers['content-length'] ?? '0');
  if (declared > EARLY_ANSWER_DRAIN_BYTES) {
    close();
    return;
  }
  state.draining = true;
  let read = 0;
  const onData = (chunk: Buffer) => {
    read += chunk.length;
    if (read > EARLY_ANSWER_DRAIN_BYTES) stop(true);
  };
  const onEnd = () => stop(false);
  const timer = setTimeout(() => stop(true), EARLY_ANSWER_DRAIN_MS);
  timer.unref();
  function stop(giveUp: boolean): void {
    clearTimeout(timer);
    body?.off('data', onData).off('end', onEnd).off('error', onEnd);
    socket.off('close', onEnd);
    if (state) state.draining = false;
    if (socket.destroyed) return;
    // Node marks an answer after which the connection must close (Connection: close) as the last one.
    const last = (state?.outgoing as { _last?: boolean } | undefined)?._last !== false;
    if (giveUp || last) close();
  }
  body.on('data', onData).once('end', onEnd).once('error', onEnd);
  socket.once('close', onEnd);
  body.resume();
}

/** Makes the socket of a request with a body wait for that body before any close (see closeAfterBody). */
function keepReadingBody(incoming: IncomingMessage, outgoing: ServerResponse): void {
  const socket = incoming.socket as DrainingSocket | null;
  if (!socket) return;
  if (!(BODY_IN_FLIGHT in socket)) {
    const close = socket.destroySoon.bind(socket);
    socket.destroySoon = () => closeAfterBody(socket, close);
  }
  socket[BODY_IN_FLIGHT] = { incoming, outgoing, draining: false };
}

/** The path of a request target as the client sent it, without its query string (which may carry a code or token). */
function pathOf(target: string): string {
  const query = target.indexOf('?');
  return query < 0 ? target : target.slice(0, query);
}

/** The status logged and counted for a request whose connection closed before its answer was sent. */
export const CLIENT_CLOSED = 499;

/** Admission before the request is read: which route has a gate, and where its refusals are counted. */
export interface EarlyAdmission {
  admit: Admission;
  refusals: RefusalLog;
  /** Past its allowance a source's refusals are answered when their second is over (refusal-hold.ts). */
  hold: RefusalHold;
}

/**
 * Request id (echoed as X-Request-Id), the client IP and one access-log line carrying the id.
 *
 * On Node the middleware does not wait for the rest of the chain (an async wrapper per layer was a
 * measured part of a cached read): the access line is written when Node's response closes, and only
 * when the logger would write one at all.
 *
 * With `early`, a request to a route with an admission gate that refuses now (platform/http/admission.ts)
 * is answered here, before anything reads its body or checks its size and type, and is counted in the
 * aggregated refusal line of its source (platform/http/refusal-log.ts) instead of an access line.
 */
export function requestContext(
  log: Logger,
  trustedProxies: Set<string>,
  onAnswered?: OnAnswered,
  early?: EarlyAdmission,
  load?: RequestLoad,
): MiddlewareHandler<{ Variables: PlatformVariables }> {
  // The access-log line: every request at info, and at error whatever the level when the answer is a 5xx.
  const logAccess = accessLogger(log);
  return (c, next) => {
    const incoming = c.req.header('x-request-id');
    const requestId = incoming && /^[\w.-]{1,100}$/.test(incoming) ? incoming : randomUUID();
    const traceparent = validTraceparent(c.req.header('traceparent'));
    let ip: string;
    try {
      ip = getConnInfo(c).remote.address ?? '';
    } catch {
      ip = '';
    }
    if (ip && trustedProxies.has(ip)) {
      const hops = (c.req.header('x-forwarded-for') ?? '').split(',').map((s) => s.trim()).filter(Boolean);
      while (hops.length > 0 && trustedProxies.has(hops[hops.length - 1] ?? '')) hops.pop();
      ip = hops[hops.length - 1] ?? ip;
    }
    if (ip.startsWith('::ffff:')) ip = ip.slice(7);
    c.set('requestId', requestId);
    c.set('ip', ip.slice(0, 45));
    c.set('traceparent', traceparent);
    const method = c.req.method;
    if (early) {
      const refusal = early.admit(method, () => c.req.path)?.();
      if (refusal) return Promise.resolve(refuse(c, refusal, requestId, traceparent, early));
    }
    const started = performance.now();
    const outgoing = nodeResponse(c);
    if (!outgoing) {
      c.header('X-Request-Id', requestId);
      if (traceparent) c.header('traceparent', traceparent);
      load?.started();
      return next().finally(() => {
        load?.ended();
      }).then(() => {
        ensurePrepared(c, traceparent ? [['X-Request-Id', requestId], ['traceparent', traceparent]] : [['X-Request-Id', requestId]]);
        const ms = performance.now() - started;
        onAnswered?.(c, c.res.status, ms);
        logAccess(requestId, traceparent, c.req.method, c.req.path, c.res.status, ms);
      });
    }
    if (!outgoing.headersSent) {
      outgoing.setHeader('X-Request-Id', requestId);
      if (traceparent) outgoing.setHeader('traceparent', traceparent);
    }
    const request = (c.env as { incoming?: IncomingMessage }).incoming;
    if (request && method !== 'GET' && method !== 'HEAD' && !request.readableEnded) keepReadingBody(request, outgoing);
    load?.started();
    if (onAnswered || load || log.isLevelEnabled('error')) {
      // The response is used once: `on` spares the wrapper `once` makes.
      outgoing.on('close', () => {
        load?.ended();
        const ms = performance.now() - started;
        // A connection that closed before the answer was all sent (the client left, or a stop cut it)
        // is logged and counted as 499 (client closed request), never as the 200 Node presets.
        const status = outgoing.writableFinished ? outgoing.statusCode : CLIENT_CLOSED;
        onAnswered?.(c, status, ms);
        logAccess(requestId, traceparent, method, pathOf(request?.url ?? c.req.path), status, ms);
      });
    }
    return next();
  };
}

/** The answer of a request refused by its admission gate; see requestContext. */
function refuse(c: Context, refusal: AppError, requestId: string, traceparent: string | undefined, early: EarlyAdmission): Response | Promise<Response> {
  const headers: (readonly [string, string])[] = [['X-Request-Id', requestId], ...SECURITY_HEADERS];
  if (traceparent) headers.push(['traceparent', traceparent]);
  const outgoing = nodeResponse(c);
  for (const [name, value] of headers) {
    if (outgoing) outgoing.setHeader(name, value);
    else c.header(name, value);
  }
  const request = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  // The unread body is dropped before the connection closes or serves the next request (closeAfterBody).
  if (request && outgoing && !request.readableEnded) keepReadingBody(request, outgoing);
  const count = early.refusals.refused((c.get('ip') as string) || 'unknown', `${c.req.method} ${c.req.path}`, refusal.status, refusal.code);
  return early.hold.answer(count, () => errorResponse(c, refusal));
}

const SECURITY_HEADERS = [
  ['X-Content-Type-Options', 'nosniff'],
  ['Cache-Control', 'no-store'],
  ['Referrer-Policy', 'no-referrer'],
] as const;

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

/**
 * The body of `incoming` if it has at most `max` bytes; null as soon as it has more, leaving the
 * stream flowing so the rest is read and dropped.
 */
function readUpTo(incoming: IncomingMessage, max: number): Promise<Uint8Array | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => incoming.off('data', onData).off('end', onEnd).off('error', onError).off('close', onError);
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= max) {
        chunks.push(chunk);
        return;
      }
      done();
      chunks.length = 0;
      resolve(null);
    };
    const onEnd = () => {
      done();
      resolve(Buffer.concat(chunks, size));
    };
    // The client went away (or the stream failed) before the end of its body.
    const onError = () => {
      done();
      reject(platformError('bad_request', { message: 'The request body was not received completely' }));
    };
    incoming.on('data', onData).once('end', onEnd).once('error', onError).once('close', onError);
  });
}

export interface ApiGateOptions {
  maxBodyBytes: number;
  /** The 413 answer. */
  onTooLarge: (c: Context) => Response;
  /** Paths whose routes declare a body type other than JSON (release uploads, the SAML ACS form post). */
  allowNonJson?: (path: string) => boolean;
  /** Upload paths with their own, larger body limit: see `uploadLimitsOf`. */
  uploads?: ReadonlyMap<string, number>;
}

const uploadLimits = new WeakMap<object, Map<string, number>>();

/**
 * The upload routes of an app (path under /api/v1 → its own body limit), keyed by the object the app
 * is built for (its Keel): a module registers its upload path when it mounts, the API gate reads it.
 */
export function uploadLimitsOf(owner: object): Map<string, number> {
  let map = uploadLimits.get(owner);
  if (!map) {
    map = new Map();
    uploadLimits.set(owner, map);
  }
  return map;
}

/**
 * The statuses `apiGate` can answer before a route's own middleware, by method: 400 (text that cannot
 * be stored in the path or query) for every method; 413 and 415 for a method that carries a body. The
 * API router documents them on every operation (openapi.ts `createRouter`).
 */
export function apiGateStatuses(method: string): (400 | 413 | 415 | 431)[] {
  const m = method.toUpperCase();
  // 431: a request line and headers over the server's limit (server.ts answers before any route).
  return m === 'GET' || m === 'HEAD' ? [400, 431] : [400, 413, 415, 431];
}

/**
 * What every /api/v1 request passes first, in one middleware: the security headers; then, for a
 * method that carries a body, the size limit (413: Content-Length decides, a chunked body is counted
 * as it streams by hono's bodyLimit) and JSON-only bodies (415 for a non-empty body of another type).
 */
export function apiGate(opts: ApiGateOptions): MiddlewareHandler {
  const streamed = bodyLimit({ maxSize: opts.maxBodyBytes, onError: opts.onTooLarge });
  const uploads = opts.uploads ?? new Map<string, number>();
  // Which routes take another body type is read from their declarations (declaredNonJsonBodies);
  // `uploads` only sets a larger size limit for some of them.
  const allowNonJson = (path: string) => opts.allowNonJson?.(path) ?? false;
  const withBody: MiddlewareHandler = async (c, next) => {
    const chunked = c.req.header('transfer-encoding') !== undefined;
    const length = c.req.header('content-length');
    const maxBytes = uploads.get(c.req.path) ?? opts.maxBodyBytes;
    if (!chunked && Number(length ?? '0') > maxBytes) return opts.onTooLarge(c);
    if ((chunked || (length !== undefined && length !== '0')) && !allowNonJson(c.req.path)) {
      if (!JSON_TYPE.test(c.req.header('content-type') ?? '')) {
        return errorResponse(c, platformError('unsupported_media_type'));
      }
    }
    const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
    if (chunked && incoming) {
      // Counted from Node's stream itself: past the limit the rest flows on unread (and is dropped
      // before the connection closes), where a web stream reader left waiting would stall it.
      const body = await readUpTo(incoming, maxBytes);
      if (!body) return opts.onTooLarge(c);
      c.req.raw = new Request(c.req.raw, { body });
      await next();
    } else if (chunked) {
      const answer = await streamed(c, next);
      if (answer) return answer; // the 413, made once the count ran over
    } else {
      await next();
    }
    ensurePrepared(c, SECURITY_HEADERS);
  };
  return (c, next) => {
    for (const [name, value] of SECURITY_HEADERS) fixedHeader(c, name, value);
    // Text PostgreSQL cannot store, in the path or any query parameter, schema or not: 400 here.
    const target = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.url ?? c.req.url;
    const unstorable = unstorableInUrl(target);
    if (unstorable.length > 0) return Promise.resolve(errorResponse(c, validationError(unstorable)));
    const method = c.req.method;
    if (method !== 'GET' && method !== 'HEAD') return withBody(c, next);
    // On Node the headers are already on the response: nothing is left to do after the chain.
    if (nodeResponse(c)) return next();
    return next().then(() => ensurePrepared(c, SECURITY_HEADERS));
  };
}
