import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { authenticate } from '../../http/authenticate.js';
import { errors, json } from '../../platform/http/schemas.js';
import { IdParam, ScopeQuery } from '../access/api-schemas.js';
import { accessOf, guard } from '../access/scope.js';
import { devicePlacementSql } from '../agents/devices.js';
import { STATS_ROW_CAP, webhookActivity } from './stats.js';

const d = (description: string) => ({ description });
const count = (what: string) => z.number().int().openapi(d(what));

const Hour = z
  .object({
    hour: z.string().openapi(d('The hour\'s start (ISO 8601, UTC)')),
    delivered: count('Deliveries created in this hour that were delivered (2xx)'),
    failed: count('…that were dead-lettered (retries exhausted)'),
    retrying: count('…that failed at least once and wait for another attempt'),
    pending: count('…that wait for their first attempt'),
    p50Ms: z.number().int().nullable().openapi(d('Median latency of the latest attempt of those deliveries that had one, in ms; null without attempts')),
    p95Ms: z.number().int().nullable().openapi(d('95th percentile of the same, in ms; null without attempts')),
  })
  .openapi('WebhookActivityHour');

const Activity = z
  .object({
    window: z.literal('24h').openapi(d('The window: the last 24 hours, by hour')),
    from: z.string().openapi(d('Start of the first hour (ISO 8601)')),
    to: z.string().openapi(d('Now (ISO 8601)')),
    capped: z.boolean().openapi(d(`True when the window held more than ${STATS_ROW_CAP.toLocaleString('en')} deliveries: the numbers count the newest of them`)),
    totals: z
      .object({ delivered: count('Delivered'), failed: count('Dead-lettered'), retrying: count('Retrying'), pending: count('Pending') })
      .openapi(d('The hours added up')),
    hours: z.array(Hour).openapi(d('24 entries, oldest first; an hour without deliveries has zeros and null latencies')),
  })
  .openapi('WebhookActivity', {
    description:
      'A receiver\'s view of one webhook: its deliveries of the last 24 hours by the hour they were created in, counted by their state now, and the latency of their latest attempts. For a caller restricted to some sites or device groups, the deliveries it may list. The webhook\'s changes are in the audit log (`GET /audit-logs?targetType=webhook&targetId=…`).',
  });

/** `GET /webhooks/{id}/stats` (docs/decisions.md "Webhook throttling and stats"): the numbers behind the webhook page's charts. */
export function mountWebhookStatsRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}/stats', tags: ['webhooks'],
      summary: 'Deliveries of the last 24 hours by hour and outcome, with the latency (p50, p95) of their latest attempts',
      middleware: [authenticate(keel), ...guard(keel, { permission: ['webhooks', 'read'] })],
      request: { params: IdParam, query: ScopeQuery.extend({ window: z.enum(['24h']).default('24h').openapi(d('The window (only `24h`)')) }) },
      responses: { 200: json(Activity, 'The webhook\'s last 24 hours'), ...errors(404) },
    }),
    async (c) => c.json(await webhookActivity(keel, accessOf(c), c.req.valid('param').id, devicePlacementSql), 200),
  );
}
