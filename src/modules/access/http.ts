import type { Context } from 'hono';
import { z } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { AuditRequestInfo } from '../audit/service.js';
import type { Principal } from '../identity/principal.js';

/** Who did it and from where, for audit entries written by the access and tenancy routes. */
export function auditInfo(c: Context<AppEnv>): AuditRequestInfo {
  const p = c.var.principal as Principal | undefined;
  return {
    actor: p ? { type: p.kind, id: p.kind === 'api_key' ? p.apiKeyId : p.userId, email: p.email } : { type: 'anonymous' },
    ip: c.var.ip || null,
    userAgent: c.req.header('user-agent') ?? null,
    requestId: c.var.requestId,
  };
}

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
