import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { EVENT_TYPES } from '../../events.js';
import { errors, json, jsonBody } from '../../platform/http/schemas.js';
import { IdParam, ScopeQuery } from '../access/api-schemas.js';
import { accessOf } from '../access/scope.js';
import { requestInfo } from '../identity/request.js';
import { readReplay, startReplay } from './replay.js';

const d = (description: string) => ({ description });

const ReplayBody = z
  .object({
    since: z.iso.datetime({ offset: true }).openapi(d('Start of the window (ISO 8601): within the last WEBHOOK_EVENT_RETENTION_DAYS days (default 30), the events kept')),
    until: z.iso.datetime({ offset: true }).optional().openapi(d('End of the window, exclusive (default and at most: now)')),
    eventTypes: z.array(z.enum(EVENT_TYPES)).min(1).max(EVENT_TYPES.length).optional().openapi(d('Only these types, each one the webhook subscribes to (default: all it subscribes to)')),
  })
  .strict()
  .openapi('WebhookReplayStart', { description: 'The window of events to send again', example: { since: '2026-11-26T00:00:00Z' } });

const ReplayOut = z
  .object({
    id: z.uuid().openapi(d('Replay id')),
    webhookId: z.uuid().openapi(d('The webhook')),
    status: z.enum(['running', 'complete', 'failed', 'cancelled']).openapi(d('`running` (queuing in batches), `complete` (every event queued), `failed` (stopped on an error), `cancelled` (the webhook was set to failed meanwhile)')),
    since: z.string().openapi(d('Start of the window (ISO 8601)')),
    until: z.string().openapi(d('End of the window, exclusive (ISO 8601)')),
    eventTypes: z.array(z.string()).nullable().openapi(d('The types asked for; null: every type the webhook subscribes to')),
    total: z.number().int().openapi(d('Events in the window when the replay started')),
    sent: z.number().int().openapi(d('Events queued again so far, each as a new delivery with the event\'s own id (`webhook-id`)')),
    error: z.string().nullable().openapi(d('Why it stopped, when failed or cancelled')),
    createdAt: z.string().openapi(d('When it started (ISO 8601)')),
    finishedAt: z.string().nullable().openapi(d('When it ended (ISO 8601), or null while running')),
  })
  .openapi('WebhookReplay', { description: 'A replay of a webhook\'s events and its progress' });

const ReplayParams = z.object({
  id: z.uuid().openapi({ description: 'Webhook id', param: { name: 'id', in: 'path' } }),
  replayId: z.uuid().openapi({ description: 'Replay id', param: { name: 'replayId', in: 'path' } }),
});

/** docs/decisions.md "Webhook replay and partner-wide webhooks": start a replay and follow it (replay.ts). */
export function mountReplayRoutes(
  api: OpenAPIHono<AppEnv>,
  keel: Keel,
  guards: { read: () => MiddlewareHandler<AppEnv>[]; write: () => MiddlewareHandler<AppEnv>[] },
): void {
  const tags = ['webhooks'];
  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/replay', tags,
      summary:
        'Send the webhook again every event of its organisation (or partner) in a window that it subscribes to, as new deliveries with the same event ids, oldest first, queued in batches by a worker; at most WEBHOOK_REPLAY_MAX_EVENTS events (400 `replay_too_large`), one running replay per webhook (409 `replay_running`), an active webhook only (409 `webhook_not_active`)',
      middleware: guards.write(),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(ReplayBody) },
      responses: { 202: json(ReplayOut, 'Started (or complete at once when the window holds no event)'), ...errors(400, 404, 409) },
    }),
    async (c) => c.json(await startReplay(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 202),
  );
  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}/replays/{replayId}', tags, summary: 'A replay\'s progress',
      middleware: guards.read(),
      request: { params: ReplayParams, query: ScopeQuery },
      responses: { 200: json(ReplayOut, 'The replay'), ...errors(404) },
    }),
    async (c) => {
      const { id, replayId } = c.req.valid('param');
      return c.json(await readReplay(keel, accessOf(c), id, replayId), 200);
    },
  );
}
