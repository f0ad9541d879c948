import { z } from '@hono/zod-openapi';

/** Shared OpenAPI pieces for route declarations: the error envelope, JSON bodies, pagination. */

export const ErrorSchema = z
  .object({
    error: z.string(),
    code: z.string(),
    details: z.record(z.string(), z.unknown()).optional(),
    retryAfter: z.number().int().optional(),
  })
  .openapi('Error');

export const MessageSchema = z.object({ message: z.string() }).openapi('Message');

/** Standard error responses for route declarations. */
export function errors(...codes: (400 | 401 | 403 | 404 | 409 | 428 | 429)[]) {
  const text: Record<number, string> = {
    400: 'Invalid request',
    401: 'Not authenticated',
    403: 'Forbidden',
    404: 'Not found',
    409: 'Conflict',
    428: 'MFA enrolment required',
    429: 'Too many requests',
  };
  return Object.fromEntries(
    codes.map((code) => [code, { description: text[code] ?? 'Error', content: { 'application/json': { schema: ErrorSchema } } }]),
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

/** Pagination query of every list (DECISIONS): page ≥ 1 default 1, limit 1–100 default 50. */
export const PageQuery = z.object({
  page: z.coerce.number().int().min(1).default(1).openapi({ example: 1 }),
  limit: z.coerce.number().int().min(1).max(100).default(50).openapi({ example: 50 }),
});

export const paginated = <T extends z.ZodType>(item: T) =>
  z.object({
    data: z.array(item),
    pagination: z.object({ page: z.number().int(), limit: z.number().int(), total: z.number().int() }),
  });

/** The list answer: `{ data, pagination: { page, limit, total } }`. */
export function page<T>(data: T[], q: { page: number; limit: number }, total: number) {
  return { data, pagination: { page: q.page, limit: q.limit, total } };
}
