import { z } from '@hono/zod-openapi';

export const IdParam = z.object({
  id: z.uuid().openapi({
    description: "Id (UUID) of the resource the path names, as its list or create answer gave it; one the caller cannot see (another tenant's) answers 404",
    example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e9f',
    param: { name: 'id', in: 'path' },
  }),
});
export const OrgIdParam = z.object({
  orgId: z.uuid().openapi({
    description: 'Id (UUID) of the organisation; one the caller cannot reach answers 404',
    example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90',
    param: { name: 'orgId', in: 'path' },
  }),
});

/** `orgId` / `partnerId` query parameters that name the organisation or partner (docs/decisions.md "Naming the organisation"). */
export { ScopeQuery } from './scope.js';

/** Stable ISO 8601 UTC timestamps. */
export const iso = (d: Date): string => d.toISOString();
export const isoOrNull = (d: Date | null): string | null => (d ? d.toISOString() : null);
