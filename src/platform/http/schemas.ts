import { z } from '@hono/zod-openapi';
import { ERROR_CODES } from './errors.js';

/** Shared OpenAPI pieces for route declarations: the error envelope, JSON bodies, pagination. */

export const ErrorSchema = z
  .object({
    error: z.string().openapi({ description: 'A sentence for people; its wording may change, so clients decide on `code`' }),
    code: z.string().openapi({
      description:
        'Stable snake_case error code for programs, e.g. `validation_failed`, `unauthorized`, `forbidden`, `not_found`, `mfa_required`, `mfa_enrollment_required` (428), `rate_limited` (429); every code is listed (the error catalogues, docs/decisions.md "Error catalogues")',
      enum: ERROR_CODES,
    }),
    details: z.record(z.string(), z.unknown()).optional().openapi({
      description:
        'Facts about this error, by code: `fields: [{path, message}]` for `validation_failed` (each bad field, e.g. "is required", "is not a known field"), `required` (the `resource:action`) for `permission_denied`, `{users, childRoles}` for a blocked role delete, `missing`/`permissions` for `privilege_escalation`',
    }),
    retryAfter: z.number().int().optional().openapi({ description: 'On 429 (`rate_limited`) and 503 (`overloaded`) only: seconds to wait before trying again (also sent as the `Retry-After` header)' }),
  })
  .openapi('Error');

export const MessageSchema = z.object({ message: z.string().openapi({ description: 'What was done, as a sentence for people' }) }).openapi('Message');

/** A typical answer of each status, for the docs page (409s differ by route, so they have none). */
const ERROR_EXAMPLES: Record<number, object> = {
  400: { error: 'The request is not valid', code: 'validation_failed', details: { fields: [{ path: 'email', message: 'is required' }] } },
  401: { error: 'Authentication required', code: 'unauthorized' },
  403: { error: 'You do not have permission to do this', code: 'forbidden' },
  404: { error: 'Resource not found', code: 'not_found' },
  428: { error: 'Your role requires multi-factor authentication: enrol an authenticator app first', code: 'mfa_enrollment_required' },
  429: { error: 'Too many requests; try again later', code: 'rate_limited', retryAfter: 30 },
  503: { error: 'The server is busy checking passwords; try again shortly', code: 'overloaded', retryAfter: 1 },
};

/** The header of a 429 or 503: when to try again (also the body's `retryAfter`). */
const RETRY_AFTER = {
  'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer' as const, minimum: 0 } },
};

/** Standard error responses for route declarations. */
export type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 415 | 428 | 429 | 431 | 502 | 503;

export function errors(...codes: ErrorStatus[]) {
  const text: Record<number, string> = {
    400: 'Invalid request',
    401: 'Not authenticated',
    403: 'Forbidden',
    404: 'Not found',
    409: 'Conflict',
    413: 'The request body is too large',
    415: 'The request body has a content type this operation does not take',
    428: 'MFA enrolment required',
    431: 'The request line and headers are too large (`headers_too_large`, answered by the HTTP server before any route)',
    429: 'Too many requests',
    502: 'A server Keel depends on answered wrongly',
    503: 'Not available now (the password-hashing queue is full, a dependency is not configured or is down); retry after `Retry-After` seconds',
  };
  return Object.fromEntries(
    codes.map((code) => [
      code,
      {
        description: text[code] ?? 'Error',
        ...(code === 429 || code === 503 ? { headers: RETRY_AFTER } : {}),
        content: { 'application/json': { schema: ErrorSchema, ...(ERROR_EXAMPLES[code] ? { example: ERROR_EXAMPLES[code] } : {}) } },
      },
    ]),
  ) as Record<(typeof codes)[number], { description: string; content: { 'application/json': { schema: typeof ErrorSchema } } }>;
}

export const json = <T extends z.ZodType>(schema: T, description = 'OK') => ({
  description,
  content: { 'application/json': { schema } },
});

export const jsonBody = <T extends z.ZodType>(schema: T) => ({
  required: true,
  content: { 'application/json': { schema } },
});

/** Pagination query of every list (docs/decisions.md "API conventions"): page ≥ 1 default 1, limit 1–100 default 50. */
export const PageQuery = z.object({
  page: z.coerce.number().int().min(1).default(1).openapi({ description: 'Page number, from 1 (default 1)', example: 1 }),
  limit: z.coerce.number().int().min(1).max(100).default(50).openapi({ description: 'Items per page, 1 to 100 (default 50; over 100 is a 400)', example: 50 }),
});

const Pagination = z
  .object({
    page: z.number().int().openapi({ description: 'The page returned, from 1', example: 1 }),
    limit: z.number().int().openapi({ description: 'Items per page asked for (the last page may hold fewer)', example: 50 }),
    total: z.number().int().openapi({ description: 'Items matching the query across all pages', example: 1 }),
  })
  .openapi({ description: 'Where this page sits in the whole list' });

export const paginated = <T extends z.ZodType>(item: T) =>
  z.object({
    data: z.array(item).openapi({ description: 'The items of this page, in the order the operation states' }),
    pagination: Pagination,
  });

/** The list answer: `{ data, pagination: { page, limit, total } }`. */
export function page<T>(data: T[], q: { page: number; limit: number }, total: number) {
  return { data, pagination: { page: q.page, limit: q.limit, total } };
}
