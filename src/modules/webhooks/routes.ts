import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { forbidden } from '../../platform/http/errors.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { authenticate } from '../../http/authenticate.js';
import { principalOf, requestInfo } from '../identity/http.js';
import { IdParam, ScopeQuery } from '../access/http.js';
import { accessOf, guard, orgRequired, type AccessContext } from '../access/scope.js';
import { EVENT_TYPES } from '../../events.js';
import { DELIVERY_STATUSES, HEADER_LIMITS, RETRY_BOUNDS, WEBHOOK_EVENT_TYPES } from './model.js';
import {
  createWebhook,
  deleteWebhook,
  deliveryStats,
  listDeliveries,
  listWebhooks,
  publishEvent,
  retryDelivery,
  rotateSecret,
  testWebhook,
  updateWebhook,
  visibleWebhook,
  webhookView,
} from './service.js';

const EventType = z.enum(EVENT_TYPES).openapi({ description: 'An event type of SPEC 6.1' });
const ApiStatus = z.enum(['active', 'paused', 'failed']);
const Header = z.object({ key: z.string().min(1).max(HEADER_LIMITS.nameLength), value: z.string().max(HEADER_LIMITS.valueLength) }).strict();
const Headers = z.array(Header).max(HEADER_LIMITS.count);
const Url = z.string().trim().min(1).max(2048);
const Secret = z.string().min(16).max(256).openapi({ description: 'HMAC signing secret (16-256 characters); never returned' });
const bounded = (k: keyof typeof RETRY_BOUNDS, intOnly = true) => {
  const [min, max] = RETRY_BOUNDS[k];
  const n = intOnly ? z.number().int() : z.number();
  return n.min(min).max(max).optional();
};
const RetryPolicyIn = z
  .object({
    maxRetries: bounded('maxRetries'),
    initialDelayMs: bounded('initialDelayMs'),
    backoffMultiplier: bounded('backoffMultiplier', false),
    maxDelayMs: bounded('maxDelayMs'),
  })
  .strict()
  .openapi('WebhookRetryPolicyInput');
const RetryPolicyOut = z
  .object({ maxRetries: z.number().int(), initialDelayMs: z.number().int(), backoffMultiplier: z.number(), maxDelayMs: z.number().int() })
  .openapi('WebhookRetryPolicy');
const Events = z.array(EventType).min(1).max(WEBHOOK_EVENT_TYPES.length);

const Webhook = z
  .object({
    id: z.uuid(),
    orgId: z.uuid(),
    name: z.string(),
    url: z.string().openapi({ description: 'The URL with userinfo removed and credential-like query values REDACTED' }),
    events: z.array(z.string()),
    headers: z.array(z.object({ key: z.string(), value: z.string() })),
    status: ApiStatus,
    hasSecret: z.boolean(),
    previousSecretExpiresAt: z.string().nullable(),
    retryPolicy: RetryPolicyOut,
    successCount: z.number().int(),
    failureCount: z.number().int(),
    lastDeliveryAt: z.string().nullable(),
    lastSuccessAt: z.string().nullable(),
    createdBy: z.string().nullable(),
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .openapi('Webhook');
const Stats = z
  .object({
    total: z.number().int(),
    pending: z.number().int(),
    delivered: z.number().int(),
    failed: z.number().int(),
    retrying: z.number().int(),
    lastDeliveredAt: z.string().nullable(),
  })
  .openapi('WebhookDeliveryStats');
const WebhookWithStats = Webhook.extend({ deliveryStats: Stats }).openapi('WebhookWithStats');
const Delivery = z
  .object({
    id: z.uuid(),
    webhookId: z.uuid(),
    orgId: z.uuid(),
    status: z.enum(['pending', 'delivered', 'failed', 'retrying']),
    event: z.string(),
    eventId: z.string(),
    payload: z.unknown(),
    responseStatus: z.number().int().nullable(),
    responseBody: z.string().nullable(),
    responseTimeMs: z.number().int().nullable(),
    errorMessage: z.string().nullable(),
    attempt: z.number().int(),
    nextAttemptAt: z.string().nullable(),
    createdAt: z.string(),
    deliveredAt: z.string().nullable(),
  })
  .openapi('WebhookDelivery');
const Queued = z
  .object({
    message: z.string(),
    delivery: z.object({ id: z.uuid(), webhookId: z.uuid(), status: z.literal('pending'), event: z.string(), attempt: z.number().int() }),
  })
  .openapi('WebhookDeliveryQueued');

const WebhookCreate = z
  .object({
    name: z.string().trim().min(1).max(255),
    url: Url,
    secret: Secret.optional(),
    events: Events,
    headers: Headers.optional(),
    retryPolicy: RetryPolicyIn.optional(),
    orgId: z.uuid().optional().openapi({ description: 'Required for partner and system callers' }),
  })
  .strict()
  .openapi('WebhookCreate');
const WebhookPatch = z
  .object({
    name: z.string().trim().min(1).max(255).optional(),
    url: Url.optional(),
    secret: Secret.nullable().optional().openapi({ description: 'Replaces the secret at once (no overlap); null removes it' }),
    events: Events.optional(),
    headers: Headers.optional(),
    status: ApiStatus.optional(),
    retryPolicy: RetryPolicyIn.nullable().optional().openapi({ description: 'null: back to the defaults' }),
    orgId: z.uuid().optional(),
  })
  .strict()
  .openapi('WebhookUpdate');
const RotateBody = z.object({ secret: Secret.optional(), orgId: z.uuid().optional() }).strict().openapi('WebhookSecretRotate');
const Rotated = Webhook.extend({ secret: z.string().optional().openapi({ description: 'The generated secret, shown once' }) }).openapi('WebhookRotated');
const TestBody = z
  .object({ event: EventType.optional(), payload: z.record(z.string(), z.unknown()).optional(), orgId: z.uuid().optional() })
  .strict()
  .openapi('WebhookTest');
const DeliveryParams = z.object({
  id: z.uuid().openapi({ param: { name: 'id', in: 'path' } }),
  deliveryId: z.uuid().openapi({ param: { name: 'deliveryId', in: 'path' } }),
});
const EventIn = z
  .object({ type: EventType, orgId: z.uuid().optional(), data: z.record(z.string(), z.unknown()).default({}) })
  .strict()
  .openapi('EventPublish');
const EventOut = z.object({ id: z.uuid(), type: z.string(), timestamp: z.string(), orgId: z.uuid() }).openapi('EventPublished');

const noContent = { 204: { description: 'Deleted, with its deliveries' } } as const;

/** The request's organisation, or SPEC 7's "organization context is required" (400 `org_required`) for a partner or system caller that named none. */
function inOrg(access: AccessContext): AccessContext & { orgId: string } {
  if (!access.orgId) throw orgRequired();
  return access as AccessContext & { orgId: string };
}

/**
 * SPEC 4.5 and DECISIONS "Shapes for what Keel adds": webhooks (`webhooks:read` / `webhooks:write`),
 * their deliveries, test and retry, secret rotation; and `POST /events` for API keys holding
 * `events:publish`. Organisation users act in their organisation; partner and system callers name it
 * with `orgId` on list and create (400 `org_required` otherwise), and may name it on the others.
 * Another tenant's webhook or delivery is 404.
 */
export function mountWebhookRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const tags = ['webhooks'];
  const read = (requireOrg = false) => [auth, ...guard(keel, { requireOrg, permission: ['webhooks', 'read'] })];
  const write = (requireOrg = false) => [auth, ...guard(keel, { requireOrg, permission: ['webhooks', 'write'] })];

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks', tags, summary: 'Webhooks of the organisation',
      middleware: read(true),
      request: { query: PageQuery.extend(ScopeQuery.shape).extend({ status: ApiStatus.optional() }) },
      responses: { 200: json(paginated(Webhook), 'Webhooks'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listWebhooks(keel, accessOf(c), q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks', tags, summary: 'Subscribe a URL to events of the organisation',
      middleware: write(),
      request: { query: ScopeQuery, body: jsonBody(WebhookCreate) },
      responses: { 201: json(Webhook, 'Created, status active'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      // The body is validated first; then the organisation must be known (SPEC 7).
      const body = c.req.valid('json');
      return c.json(await createWebhook(keel, inOrg(accessOf(c)), body, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}', tags, summary: 'A webhook with its delivery statistics',
      middleware: read(),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(WebhookWithStats, 'Webhook'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const row = await visibleWebhook(keel.db, accessOf(c), c.req.valid('param').id);
      return c.json({ ...webhookView(keel, row), deliveryStats: await deliveryStats(keel.db, row.id) }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/webhooks/{id}', tags, summary: 'Change a webhook (a new secret replaces the old one at once)',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(WebhookPatch) },
      responses: { 200: json(Webhook, 'Updated'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => c.json(await updateWebhook(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/webhooks/{id}', tags, summary: 'Delete a webhook and all its delivery records',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery },
      responses: { ...noContent, ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      await deleteWebhook(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/rotate-secret', tags,
      summary: 'Rotate the signing secret: the previous one keeps signing for 24 hours (a generated secret is shown once)',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery, body: { required: false, content: { 'application/json': { schema: RotateBody } } } },
      responses: { 200: json(Rotated, 'Rotated'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const body = c.req.valid('json') as z.infer<typeof RotateBody> | undefined;
      const { webhook, secret } = await rotateSecret(keel, accessOf(c), c.req.valid('param').id, body?.secret, requestInfo(c));
      return c.json(secret === undefined ? webhook : { ...webhook, secret }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}/deliveries', tags, summary: 'Delivery history, newest first',
      middleware: read(),
      request: { params: IdParam, query: PageQuery.extend(ScopeQuery.shape).extend({ status: z.enum(DELIVERY_STATUSES as ['pending', 'delivered', 'failed', 'retrying']).optional() }) },
      responses: { 200: json(paginated(Delivery), 'Deliveries'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listDeliveries(keel, accessOf(c), c.req.valid('param').id, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/test', tags, summary: 'Queue a test delivery (webhook.test by default)',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery, body: { required: false, content: { 'application/json': { schema: TestBody } } } },
      responses: { 202: json(Queued, 'Queued'), ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => {
      const body = (c.req.valid('json') as z.infer<typeof TestBody> | undefined) ?? {};
      return c.json(await testWebhook(keel, accessOf(c), c.req.valid('param').id, body, requestInfo(c)), 202);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/retry/{deliveryId}', tags, summary: 'Retry a failed delivery as a new pending record',
      middleware: write(),
      request: { params: DeliveryParams, query: ScopeQuery },
      responses: { 202: json(Queued, 'Queued'), ...errors(400, 401, 403, 404, 409, 428) },
    }),
    async (c) => {
      const { id, deliveryId } = c.req.valid('param');
      return c.json(await retryDelivery(keel, accessOf(c), id, deliveryId, requestInfo(c)), 202);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/events', tags: ['events'], summary: 'Publish an event of another component (API keys with events:publish)',
      middleware: [auth, ...guard(keel, { permission: ['events', 'publish'] })],
      request: { query: ScopeQuery, body: jsonBody(EventIn) },
      responses: { 202: json(EventOut, 'Published: one delivery per subscribed active webhook'), ...errors(400, 401, 403, 404, 428) },
    }),
    async (c) => {
      const { type, data } = c.req.valid('json');
      if (principalOf(c)?.kind !== 'api_key') throw forbidden('Events are published with an API key holding events:publish', 'api_key_required');
      const event = await publishEvent(keel, inOrg(accessOf(c)).orgId, type, data);
      return c.json({ id: event.id, type: event.type, timestamp: event.timestamp, orgId: event.orgId ?? '' }, 202);
    },
  );
}
