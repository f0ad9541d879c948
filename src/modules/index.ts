import type { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../app-env.js';
import type { Keel } from '../keel.js';
import { mountIdentityRoutes } from './identity/routes.js';
import { mountAccessRoutes } from './access/routes.js';
import { mountOrgRoutes } from './orgs/routes.js';
import { mountMfaRoutes } from './mfa/routes.js';
import { mountUserRoutes } from './users/routes.js';
import { mountAuditRoutes } from './audit/routes.js';
import { mountWebhookRoutes } from './webhooks/routes.js';
import { mountWebhookStatsRoutes } from './webhooks/stats-routes.js';
import { mountAgentRoutes } from './agents/routes.js';
import { mountSsoRoutes } from './sso/routes.js';
import { mountDomainRoutes } from './domains/routes.js';
import { mountScimRoutes } from './scim/routes.js';
import { mountSiemRoutes } from './siem/routes.js';

/** Each module contributes one function that mounts its routes on the /api/v1 router. */
export type MountRoutes = (api: OpenAPIHono<AppEnv>, keel: Keel) => void;

export const moduleRoutes: MountRoutes[] = [mountIdentityRoutes, mountMfaRoutes];
moduleRoutes.push(mountAccessRoutes, mountOrgRoutes, mountUserRoutes, mountAuditRoutes);
moduleRoutes.push(mountWebhookRoutes, mountAgentRoutes, mountSsoRoutes);
moduleRoutes.push(mountDomainRoutes, mountScimRoutes, mountSiemRoutes);
moduleRoutes.push(mountWebhookStatsRoutes);
