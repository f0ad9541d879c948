import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getConnInfo } from '@hono/node-server/conninfo';
import { randomUUID } from 'node:crypto';
import type { Logger } from '../logger.js';
import { AppError, errorResponse } from './errors.js';

export interface PlatformVariables {
  requestId: string;
  log: Logger;
  /** Client IP: the socket address, or X-Forwarded-For when the socket peer is a trusted proxy. */
  ip: string;
}

/** Request id (echoed as X-Request-Id), a child logger, the client IP and one access-log line. */
export function requestContext(log: Logger, trustedProxies: Set<string>): MiddlewareHandler<{ Variables: PlatformVariables }> {
  return async (c, next) => {
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
    const reqLog = log.child({ reqId: requestId });
    c.set('requestId', requestId);
    c.set('log', reqLog);
    c.set('ip', ip.slice(0, 45));
    const started = performance.now();
    await next();
    c.header('X-Request-Id', requestId);
    const status = c.res.status;
    const line = { method: c.req.method, path: c.req.path, status, ms: Math.round((performance.now() - started) * 10) / 10 };
    if (status >= 500) reqLog.error(line, 'request');
    else reqLog.info(line, 'request');
  };
}

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

/**
 * JSON-only bodies: a non-empty body of another type is 415, unless the path is one of `allow`
 * (routes that declare another type, such as release uploads).
 */
export function jsonOnly(allow: (path: string) => boolean = () => false): MiddlewareHandler {
  return async (c, next) => {
    const length = c.req.header('content-length');
    const hasBody = (length !== undefined && length !== '0') || c.req.header('transfer-encoding') !== undefined;
    if (hasBody && !allow(c.req.path)) {
      const type = c.req.header('content-type') ?? '';
      if (!JSON_TYPE.test(type)) {
        return errorResponse(c, new AppError(415, 'unsupported_media_type', 'Request bodies must be application/json'));
      }
    }
    await next();
  };
}

/** Security headers for every API answer. */
export const apiHeaders: MiddlewareHandler = async (c, next) => {
  await next();
  c.header('X-Content-Type-Options', 'nosniff');
  c.header('Cache-Control', 'no-store');
  c.header('Referrer-Policy', 'no-referrer');
};

/**
 * 413 for a body over `maxBytes`. With a Content-Length the header alone decides (Node's parser never
 * reads past it), so the body stays untouched until the route parses it and the Node adapter reads it
 * straight from the socket; touching `c.req.raw.body` would build a web Request and stream, most of
 * the cost of a small POST. A chunked body is counted as it streams (hono's bodyLimit).
 */
export function bodySizeLimit(maxBytes: number, onTooLarge: (c: Context) => Response): MiddlewareHandler {
  const streamed = bodyLimit({ maxSize: maxBytes, onError: onTooLarge });
  return async (c, next) => {
    if (c.req.method === 'GET' || c.req.method === 'HEAD') {
      await next();
      return;
    }
    if (c.req.header('transfer-encoding') !== undefined) return streamed(c, next);
    const length = Number(c.req.header('content-length') ?? '0');
    if (length > maxBytes) return onTooLarge(c);
    await next();
  };
}
