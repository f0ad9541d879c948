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

/*
 * Error catalogues (docs/decisions.md "Error catalogues"): each module has one, `src/modules/<m>/errors.ts`,
 * and the platform's is below. A catalogue maps each code to its status and message; its constructor
 * makes the error. A code is defined in one catalogue only (`errorCatalogue` refuses a second
 * definition), and the document's `Error.code` lists every catalogued code.
 */

export interface ErrorDef {
  readonly status: ContentfulStatusCode;
  readonly message: string;
}

export interface ErrorOptions {
  /** Instead of the catalogue's message, for one that names what was refused. */
  message?: string;
  details?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** Only for a code the catalogue lists with `alsoStatus` (a code answered with two statuses). */
  status?: ContentfulStatusCode;
}

const defined = new Map<string, ErrorDef & { owner: string }>();

/** Every catalogued code, sorted: the `enum` of the document's `Error.code` (filled as catalogues load, before any document is made). */
export const ERROR_CODES: string[] = [];

/** Every catalogued code with its status, message and catalogue (for the document and the tests). */
export function catalogued(): ReadonlyMap<string, ErrorDef & { owner: string }> {
  return defined;
}

/**
 * Registers a catalogue and returns its constructor: `error('code', { message?, details?, headers? })`.
 * A code another catalogue defines already throws at start-up (it is imported from there instead).
 */
export function errorCatalogue<const C extends Record<string, ErrorDef & { alsoStatus?: ContentfulStatusCode }>>(
  owner: string,
  defs: C,
): (code: keyof C & string, opts?: ErrorOptions) => AppError {
  for (const [code, def] of Object.entries(defs)) {
    const known = defined.get(code);
    if (known && known.owner !== owner) throw new Error(`error code ${code} is defined by ${known.owner} and ${owner}`);
    defined.set(code, { ...def, owner });
    if (!ERROR_CODES.includes(code)) ERROR_CODES.push(code);
  }
  ERROR_CODES.sort();
  return (code, opts = {}) => {
    const def = defs[code] as ErrorDef & { alsoStatus?: ContentfulStatusCode };
    if (opts.status !== undefined && opts.status !== def.status && opts.status !== def.alsoStatus) {
      throw new Error(`error code ${code} is not answered with ${opts.status}`);
    }
    return new AppError(opts.status ?? def.status, code, opts.message ?? def.message, opts.details, opts.headers);
  };
}

/** The platform's codes: what any route can answer, whatever its module. */
export const PLATFORM_ERRORS = {
  bad_request: { status: 400, message: 'The request could not be processed' },
  invalid_json: { status: 400, message: 'The request body is not valid JSON' },
  validation_failed: { status: 400, message: 'The request is not valid' },
  unauthorized: { status: 401, message: 'Authentication required' },
  invalid_token: { status: 401, message: 'The access token is invalid or expired', alsoStatus: 400 },
  forbidden: { status: 403, message: 'You do not have permission to do this' },
  not_found: { status: 404, message: 'Resource not found' },
  method_not_allowed: { status: 405, message: 'This method is not allowed on this path' },
  payload_too_large: { status: 413, message: 'The request body is too large' },
  unsupported_media_type: { status: 415, message: 'Request bodies must be application/json' },
  rate_limited: { status: 429, message: 'Too many requests; try again later' },
  internal_error: { status: 500, message: 'Internal server error' },
  overloaded: { status: 503, message: 'The server is busy checking passwords; try again shortly' },
  not_ready: { status: 503, message: 'Not ready: a dependency is down' },
  database_unavailable: { status: 503, message: 'The database is unavailable; try again shortly' },
  secret_unavailable: { status: 503, message: 'A stored secret cannot be opened with this server’s encryption keys; an operator must restore the key it was sealed with' },
} as const satisfies Record<string, ErrorDef & { alsoStatus?: ContentfulStatusCode }>;

export const platformError = errorCatalogue('platform', PLATFORM_ERRORS);

export const unauthorized = (message?: string) => platformError('unauthorized', message === undefined ? {} : { message });
export const invalidToken = (message?: string) => platformError('invalid_token', message === undefined ? {} : { message });
export const forbidden = (message?: string) => platformError('forbidden', message === undefined ? {} : { message });
export const notFound = (what = 'Resource') => platformError('not_found', { message: `${what} not found` });
export const tooManyRequests = (retryAfterSeconds: number, message?: string) =>
  platformError('rate_limited', { ...(message === undefined ? {} : { message }), headers: { 'Retry-After': String(retryAfterSeconds) } });

export interface FieldIssue {
  path: string;
  message: string;
}

export function validationError(fields: FieldIssue[]): AppError {
  return platformError('validation_failed', { details: { fields } });
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
    if (status === 413) return errorResponse(c, platformError('payload_too_large'));
    // A route's validator refusing a body of a type the route does not declare (a form route given JSON).
    if (status === 415) return errorResponse(c, platformError('unsupported_media_type', { message: 'The request body has a content type this route does not take' }));
    if (status === 400 && /json/i.test(err.message)) {
      return errorResponse(c, platformError('invalid_json'));
    }
    if (status >= 400 && status < 500) {
      return errorResponse(c, new AppError(status, 'bad_request', PLATFORM_ERRORS.bad_request.message));
    }
  }
  // The database is down or restarting (docs/decisions.md "Many processes and faults"): the request can be tried again shortly.
  if (databaseUnavailable(err)) {
    requestLog(log, lineRef(c)).warn({ error: loggableError(err) }, 'database unavailable');
    return errorResponse(c, platformError('database_unavailable', { headers: { 'Retry-After': '5' } }));
  }
  // A stored secret this server's keys cannot open: an encryption key was dropped while data sealed
  // with it remains (docs/deploy.md "Key rotation"), or the stored value was altered. An operator's
  // fault to fix, not the client's and not a bug in the request: 503, logged at error.
  if (err instanceof DecryptionError) {
    requestLog(log, lineRef(c)).error({ error: loggableError(err) }, 'a stored secret cannot be opened with the configured keys');
    return errorResponse(c, platformError('secret_unavailable'));
  }
  // Never the error object itself: a database error carries the query's parameters (loggableError).
  // Under `error`, not pino's `err`, whose serializer would fold the causes into one message.
  requestLog(log, lineRef(c)).error({ error: loggableError(err) }, 'unhandled error');
  return c.json({ error: PLATFORM_ERRORS.internal_error.message, code: 'internal_error' } satisfies ErrorBody, 500);
}
