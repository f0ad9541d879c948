import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Logger } from '../logger.js';
import { AppError, errorResponse } from './errors.js';

export interface PlatformVariables {
  requestId: string;
  /** Client IP: the socket address, or X-Forwarded-For when the socket peer is a trusted proxy. */
  ip: string;
}

/*
 * Cost notes (bench/README.md "Reads"): on a cached authenticated read the middleware, not the work,
 * was most of the time. Three things here keep it small:
 * - Fixed headers go on Node's own response (`outgoing.setHeader`), which writeHead merges with the
 *   handler's headers (the handler's win). Setting them on hono's context after the handler made
 *   the Node adapter rebuild its lightweight response as a full web Response; before it, every
 *   answer paid for undici's Headers validation. Outside Node (`app.request` in unit tests) they
 *   are prepared on the context instead.
 * - No pino child logger per request: log lines about a request carry `reqId` in their object.
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

interface AccessLine {
  reqId: string;
  method: string;
  path: string;
  status: number;
  ms: number;
}

/** The access-log line: every request at info, and at error whatever the level when the answer is a 5xx. */
function logAccess(log: Logger, line: AccessLine): void {
  if (line.status >= 500) log.error(line, 'request');
  else log.info(line, 'request');
}

/**
 * Request id (echoed as X-Request-Id), the client IP and one access-log line carrying the id.
 *
 * On Node the middleware does not wait for the rest of the chain (an async wrapper per layer was a
 * measured part of a cached read): the access line is written when Node's response closes, and only
 * when the logger would write one at all.
 */
export function requestContext(log: Logger, trustedProxies: Set<string>): MiddlewareHandler<{ Variables: PlatformVariables }> {
  return (c, next) => {
    const incoming = c.req.header('x-request-id');
    const requestId = incoming && /^[\w.-]{1,100}$/.test(incoming) ? incoming : randomUUID();
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
    const started = performance.now();
    const line = (status: number): AccessLine => ({ reqId: requestId, method: c.req.method, path: c.req.path, status, ms: Math.round((performance.now() - started) * 10) / 10 });
    const outgoing = nodeResponse(c);
    if (!outgoing) {
      c.header('X-Request-Id', requestId);
      return (async () => {
        await next();
        ensurePrepared(c, [['X-Request-Id', requestId]]);
        if (c.res.status >= 500 || log.isLevelEnabled('info')) logAccess(log, line(c.res.status));
      })();
    }
    if (!outgoing.headersSent) outgoing.setHeader('X-Request-Id', requestId);
    if (log.isLevelEnabled('error')) {
      outgoing.once('close', () => {
        if (outgoing.statusCode >= 500 || log.isLevelEnabled('info')) logAccess(log, line(outgoing.statusCode));
      });
    }
    return next();
  };
}

const SECURITY_HEADERS = [
  ['X-Content-Type-Options', 'nosniff'],
  ['Cache-Control', 'no-store'],
  ['Referrer-Policy', 'no-referrer'],
] as const;

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

export interface ApiGateOptions {
  maxBodyBytes: number;
  /** The 413 answer. */
  onTooLarge: (c: Context) => Response;
  /** Paths whose routes declare a body type other than JSON (release uploads). */
  allowNonJson?: (path: string) => boolean;
}

/**
 * What every /api/v1 request passes first, in one middleware: the security headers; then, for a
 * method that carries a body, the size limit (413: Content-Length decides, a chunked body is counted
 * as it streams by hono's bodyLimit) and JSON-only bodies (415 for a non-empty body of another type).
 */
export function apiGate(opts: ApiGateOptions): MiddlewareHandler {
  const streamed = bodyLimit({ maxSize: opts.maxBodyBytes, onError: opts.onTooLarge });
  const allowNonJson = opts.allowNonJson ?? (() => false);
  const withBody: MiddlewareHandler = async (c, next) => {
    const chunked = c.req.header('transfer-encoding') !== undefined;
    const length = c.req.header('content-length');
    if (!chunked && Number(length ?? '0') > opts.maxBodyBytes) return opts.onTooLarge(c);
    if ((chunked || (length !== undefined && length !== '0')) && !allowNonJson(c.req.path)) {
      if (!JSON_TYPE.test(c.req.header('content-type') ?? '')) {
        return errorResponse(c, new AppError(415, 'unsupported_media_type', 'Request bodies must be application/json'));
      }
    }
    if (chunked) {
      const answer = await streamed(c, next);
      if (answer) return answer; // the 413, made once the count ran over
    } else {
      await next();
    }
    ensurePrepared(c, SECURITY_HEADERS);
  };
  return (c, next) => {
    for (const [name, value] of SECURITY_HEADERS) fixedHeader(c, name, value);
    const method = c.req.method;
    if (method !== 'GET' && method !== 'HEAD') return withBody(c, next);
    // On Node the headers are already on the response: nothing is left to do after the chain.
    if (nodeResponse(c)) return next();
    return next().then(() => ensurePrepared(c, SECURITY_HEADERS));
  };
}
