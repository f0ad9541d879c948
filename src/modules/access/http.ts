import { z } from '@hono/zod-openapi';

export const IdParam = z.object({ id: z.uuid().openapi({ param: { name: 'id', in: 'path' } }) });
export const OrgIdParam = z.object({ orgId: z.uuid().openapi({ param: { name: 'orgId', in: 'path' } }) });

/** `orgId` / `partnerId` query parameters that name the organisation or partner (DECISIONS "Naming the organisation"). */
export const ScopeQuery = z.object({
  orgId: z.uuid().optional().openapi({ description: 'Organisation to act in (partner and system callers)' }),
  partnerId: z.uuid().optional().openapi({ description: 'Partner to act in (system callers)' }),
});

/** Stable ISO 8601 UTC timestamps. */
export const iso = (d: Date): string => d.toISOString();
export const isoOrNull = (d: Date | null): string | null => (d ? d.toISOString() : null);
