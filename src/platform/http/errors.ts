import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { z } from 'zod';
import type { Logger } from '../logger.js';
import { loggableError } from '../safe-error.js';
import { DecryptionError } from '../crypto.js';
import { databaseUnavailable } from '../db/unavailable.js';
import { printable } from './validation.js';
import { requestLog, type RequestRef } from '../request-scope.js';

/** The one error envelope: `{ error, code, details? }` (docs/decisions.md "API conventions"). */
export interface ErrorBody {
  error: string;
  code: string;
  details?: Record<string, unknown>;
  retryAfter?: number;
}

export class AppError extends Error {
  override name = 'AppError';
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

export const badRequest = (code: string, message: string, details?: Record<string, unknown>) =>
  new AppError(400, code, message, details);
export const unauthorized = (message = 'Authentication required', code = 'unauthorized') => new AppError(401, code, message);
export const forbidden = (message = 'You do not have permission to do this', code = 'forbidden') =>
  new AppError(403, code, message);
export const notFound = (what = 'Resource') => new AppError(404, 'not_found', `${what} not found`);
export const conflict = (code: string, message: string, details?: Record<string, unknown>) =>
  new AppError(409, code, message, details);
export const tooManyRequests = (retryAfterSeconds: number, message = 'Too many requests; try again later') =>
  new AppError(429, 'rate_limited', message, undefined, { 'Retry-After': String(retryAfterSeconds) });

export interface FieldIssue {
  path: string;
  message: string;
}

export function validationError(fields: FieldIssue[]): AppError {
  return new AppError(400, 'validation_failed', 'The request is not valid', { fields });
}

/** One field per issue; a field the schema does not know is named itself ("is not a known field"). */
export function zodFields(error: z.ZodError, prefix?: string): FieldIssue[] {
  const at = (path: PropertyKey[]) => [...(prefix ? [prefix] : []), ...path.map(String)].join('.') || '(body)';
  return error.issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((key) => ({ path: at([...i.path, printable(key)]), message: 'is not a known field' }))
      : [{ path: at(i.path), message: i.message }],
  );
}

export function errorResponse(c: Context, err: AppError): Response {
  const body: ErrorBody = { error: err.message, code: err.code };
  if (err.details) body.details = err.details;
  if (err.status === 429) body.retryAfter = Number(err.headers?.['Retry-After'] ?? 1);
  else if (err.headers?.['Retry-After'] !== undefined) body.retryAfter = Number(err.headers['Retry-After']);
  return c.json(body, err.status, err.headers);
}

/** The request a line written while answering `c` belongs to (set by requestContext). */
function lineRef(c: Context): RequestRef {
  return { requestId: c.get('requestId') as string | undefined, traceparent: c.get('traceparent') as string | undefined };
}

/** Maps anything thrown to the envelope. Unknown errors are bugs: logged with their stack, answered generically. */
export function handleError(err: unknown, c: Context, log: Logger): Response {
  if (err instanceof AppError) return errorResponse(c, err);
  if (err instanceof z.ZodError) return errorResponse(c, validationError(zodFields(err)));
  if (err instanceof HTTPException) {
    const status = err.status;
    if (status === 413) return errorResponse(c, new AppError(413, 'payload_too_large', 'The request body is too large'));
    // A route's validator refusing a body of a type the route does not declare (a form route given JSON).
    if (status === 415) return errorResponse(c, new AppError(415, 'unsupported_media_type', 'The request body has a content type this route does not take'));
    if (status === 400 && /json/i.test(err.message)) {
      return errorResponse(c, new AppError(400, 'invalid_json', 'The request body is not valid JSON'));
    }
    if (status >= 400 && status < 500) {
      return errorResponse(c, new AppError(status, 'bad_request', 'The request could not be processed'));
    }
  }
  // The database is down or restarting (docs/decisions.md "Many processes and faults"): the request can be tried again shortly.
  if (databaseUnavailable(err)) {
    requestLog(log, lineRef(c)).warn({ error: loggableError(err) }, 'database unavailable');
    return errorResponse(c, new AppError(503, 'database_unavailable', 'The database is unavailable; try again shortly', undefined, { 'Retry-After': '5' }));
  }
  // A stored secret this server's keys cannot open: an encryption key was dropped while data sealed
  // with it remains (docs/deploy.md "Key rotation"), or the stored value was altered. An operator's
  // fault to fix, not the client's and not a bug in the request: 503, logged at error.
  if (err instanceof DecryptionError) {
    requestLog(log, lineRef(c)).error({ error: loggableError(err) }, 'a stored secret cannot be opened with the configured keys');
    return errorResponse(c, new AppError(503, 'secret_unavailable', 'A stored secret cannot be opened with this server’s encryption keys; an operator must restore the key it was sealed with'));
  }
  // Never the error object itself: a database error carries the query's parameters (loggableError).
  // Under `error`, not pino's `err`, whose serializer would fold the causes into one message.
  requestLog(log, lineRef(c)).error({ error: loggableError(err) }, 'unhandled error');
  return c.json({ error: 'Internal server error', code: 'internal_error' } satisfies ErrorBody, 500);
}
