import { devicePlacementSql } from '../agents/devices.js';
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { validationError } from '../../platform/http/errors.js';
import { authenticate } from '../../http/authenticate.js';
import { principalOf, requestInfo } from '../identity/request.js';
import { IdParam, ScopeQuery } from '../access/api-schemas.js';
import { accessOf, guard, orgRequired, type AccessContext } from '../access/scope.js';
import { EVENT_TYPES } from '../../events.js';
import { EVENT_CATALOGUE } from '../../event-catalogue.js';
import { DELIVERY_STATUSES, HEADER_LIMITS, RETRY_BOUNDS, WEBHOOK_EVENT_TYPES } from './model.js';
import {
  createWebhook,
  deleteWebhook,
  readWebhook,
  listDeliveries,
  listWebhooks,
  partnerLevelOf,
  publishEvent,
  retryDelivery,
  rotateSecret,
  testWebhook,
  updateWebhook,
  webhookLimits,
} from './service.js';
import { webhooksError } from './errors.js';
import { mountReplayRoutes } from './replay-routes.js';
import { RATE_LIMIT_BOUNDS } from './throttle.js';

const d = (description: string) => ({ description });
const EventType = z.enum(EVENT_TYPES).openapi({ description: 'An event type (device.*, alert.*, script.*, automation.*, policy.*, patch.*, security.score_changed, remote.*, user.login/logout, session.login/logout, webhook.test)' });
const ApiStatus = z.enum(['active', 'paused', 'failed']).openapi({
  description: '`active`: deliveries are made; `paused`: deliveries are held (not attempted) until active again; `failed`: set by Keel after 24 hours in which every delivery (at least 10) was dead-lettered, held until a person makes it active',
});
const HeaderKey = z.string().min(1).max(HEADER_LIMITS.nameLength).openapi(d(`Header name (1-${HEADER_LIMITS.nameLength} characters, no CR/LF; Content-Type, User-Agent, X-Service-* and webhook-* are Keel's own)`));
const HeaderValue = z.string().max(HEADER_LIMITS.valueLength).openapi(d(`Header value (at most ${HEADER_LIMITS.valueLength} characters, no CR/LF); write-only: never returned`));
const Header = z.object({ key: HeaderKey, value: HeaderValue }).strict();
const Headers = z.array(Header).max(HEADER_LIMITS.count).openapi(d(`Custom headers sent on each delivery, after the standard ones (at most ${HEADER_LIMITS.count}); their values are write-only`));
const HeaderPatch = z
  .object({ key: HeaderKey, value: HeaderValue.optional().openapi(d('The new value; omitted: the value stored for this header name is kept (400 when there is none)')) })
  .strict();
const HeadersPatch = z
  .array(HeaderPatch)
  .max(HEADER_LIMITS.count)
  .openapi(d(`The whole list of custom headers (at most ${HEADER_LIMITS.count}): a header left out is removed; an entry without \`value\` keeps its stored value`));
const HeaderOut = z
  .object({
    key: z.string().openapi(d('Header name')),
    valueSet: z.literal(true).openapi(d('A value is stored; it is write-only and never returned')),
  })
  .openapi('WebhookHeader', { description: 'A custom header: its name, never its value' });
const Url = z.string().trim().min(1).max(2048).openapi(d('The receiver: HTTPS, not a local or private address (checked at save and before every attempt), without user:password@ (400 `invalid_webhook_url`: send credentials in a custom header); stored encrypted'));
const Secret = z.string().min(16).max(256).openapi({ description: 'HMAC signing secret (16-256 characters); never returned' });
const bounded = (k: keyof typeof RETRY_BOUNDS, description: string, intOnly = true) => {
  const [min, max] = RETRY_BOUNDS[k];
  const n = intOnly ? z.number().int() : z.number();
  return n.min(min).max(max).optional().openapi(d(`${description} (${min}-${max}; the default when omitted)`));
};
const RetryPolicyIn = z
  .object({
    maxRetries: bounded('maxRetries', 'Retries after the first attempt'),
    initialDelayMs: bounded('initialDelayMs', 'Delay before the first retry, in ms'),
    backoffMultiplier: bounded('backoffMultiplier', 'Factor applied to the delay for each further retry', false),
    maxDelayMs: bounded('maxDelayMs', 'Longest delay between two attempts, in ms'),
  })
  .strict()
  .openapi('WebhookRetryPolicyInput', { description: 'Retry schedule override: delay of retry n (from 0) is min(initialDelayMs × backoffMultiplier^n, maxDelayMs)' });
const RetryPolicyOut = z
  .object({
    maxRetries: z.number().int().openapi(d('Retries after the first attempt (default 5: six attempts in all)')),
    initialDelayMs: z.number().int().openapi(d('Delay before the first retry, in ms (default 1,000)')),
    backoffMultiplier: z.number().openapi(d('Factor applied for each further retry (default 2)')),
    maxDelayMs: z.number().int().openapi(d('Longest delay, in ms (default 300,000)')),
  })
  .openapi('WebhookRetryPolicy', { description: 'The retry schedule in force' });
const RetrySchedule = z
  .enum(['default', 'extended', 'custom'])
  .openapi({
    description:
      'The retry schedule: `default` (5 retries: 1, 2, 4, 8, 16 s), `extended` (7 retries over about 27 hours: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, each ±10 %), or `custom` (the `retryPolicy` given)',
  });
const RateLimit = z
  .number()
  .int()
  .min(RATE_LIMIT_BOUNDS[0])
  .max(RATE_LIMIT_BOUNDS[1])
  .openapi({
    description:
      'At most this many deliveries are sent to the webhook per second, across every worker (1-1000); the rest wait in the queue, not failed. A 429 answer with Retry-After holds the webhook until then without counting the attempt (docs/decisions.md "Webhook throttling and stats"). null: no limit',
  });
const Events = z.array(EventType).min(1).max(WEBHOOK_EVENT_TYPES.length).openapi(d('Event types this webhook receives (at least one)'));

const Webhook = z
  .object({
    id: z.uuid().openapi(d('Webhook id')),
    orgId: z.uuid().nullable().openapi(d('The organisation whose events it receives; null for a partner-wide webhook')),
    partnerId: z.uuid().nullable().openapi(d('A partner-wide webhook\'s partner: it receives the events of every organisation of the partner, new ones included (each body names its `orgId`); null for an organisation\'s webhook')),
    name: z.string().openapi(d('Display name')),
    url: z.string().openapi({ description: 'The URL with userinfo removed and credential-like query values REDACTED' }),
    events: z.array(z.string()).openapi(d('Subscribed event types')),
    headers: z.array(HeaderOut).openapi(d('Custom headers sent on each delivery: names only, the values are write-only')),
    status: ApiStatus,
    hasSecret: z.boolean().openapi(d('Whether deliveries are signed (the secret itself is never returned)')),
    previousSecretExpiresAt: z.string().nullable().openapi(d('While a rotated-out secret still signs (24 hours after a rotation): when it stops; else null')),
    retrySchedule: RetrySchedule,
    retryPolicy: RetryPolicyOut,
    rateLimitPerSecond: RateLimit.nullable(),
    successCount: z.number().int().openapi(d('Attempts (not deliveries) answered 2xx, ever; for a caller restricted to some sites or device groups, those of the deliveries it may see (`deliveryStats.attempts.succeeded`)')),
    failureCount: z.number().int().openapi(d('Attempts (not deliveries) that failed, ever: a delivery retried twice and then delivered counts 2 here; for a restricted caller, those of the deliveries it may see')),
    lastDeliveryAt: z.string().nullable().openapi(d('Time of the most recent attempt (ISO 8601), or null')),
    lastSuccessAt: z.string().nullable().openapi(d('Time of the most recent 2xx (ISO 8601), or null')),
    createdBy: z.string().nullable().openapi(d('User id of its creator')),
    createdAt: z.string().openapi(d('Creation time (ISO 8601)')),
    updatedAt: z.string().openapi(d('Last change (ISO 8601)')),
  })
  .openapi('Webhook', { description: 'A subscription of an HTTPS receiver to an organisation\'s events' });
const Stats = z
  .object({
    total: z.number().int().openapi(d('Delivery records of the webhook')),
    pending: z.number().int().openapi(d('Waiting for their first attempt')),
    delivered: z.number().int().openapi(d('Answered 2xx')),
    failed: z.number().int().openapi(d('Retries exhausted (dead-lettered)')),
    retrying: z.number().int().openapi(d('Failed at least once, another attempt scheduled')),
    lastDeliveredAt: z.string().nullable().openapi(d('Time of the latest 2xx (ISO 8601), or null')),
    attempts: z
      .object({
        succeeded: z.number().int().openapi(d('Attempts answered 2xx (one per delivered delivery)')),
        failed: z.number().int().openapi(d('Attempts that failed (timeouts, network errors, non-2xx), over all these deliveries')),
      })
      .openapi(d('The attempts these deliveries made, counted apart from the deliveries')),
  })
  .openapi('WebhookDeliveryStats', {
    description:
      "The webhook's deliveries counted by state (one delivery is one event sent to the webhook, however many attempts it took), and the attempts they made; over the deliveries kept (retention) and, for a caller restricted to some sites or device groups, those it may list",
  });
const WebhookWithStats = Webhook.extend({ deliveryStats: Stats }).openapi('WebhookWithStats', { description: 'A webhook with the counts of its deliveries' });
const Delivery = z
  .object({
    id: z.uuid().openapi(d('Delivery id: X-Service-Delivery-Id and webhook-id, the same across its automatic retries')),
    webhookId: z.uuid().openapi(d('The webhook')),
    orgId: z.uuid().nullable().openapi(d('The organisation of the event; null for a partner-wide webhook\'s test and operational deliveries')),
    status: z.enum(['pending', 'delivered', 'failed', 'retrying']).openapi(d('`pending` (no attempt yet), `delivered` (2xx), `retrying` (next attempt at nextAttemptAt), `failed` (retries exhausted, dead-lettered)')),
    event: z.string().openapi(d('Event type')),
    eventId: z.string().openapi(d('Event id (X-Service-Event-Id), shared by a manual retry')),
    payload: z.unknown().openapi(d('The JSON body sent: id, type, timestamp, orgId, (test,) data')),
    retryOf: z.uuid().nullable().openapi(d('The failed delivery this one retries (a manual retry), or null')),
    responseStatus: z.number().int().nullable().openapi(d('HTTP status of the latest attempt, or null (no answer)')),
    responseBody: z.string().nullable().openapi(d('Its body, first 1,000 characters')),
    responseTimeMs: z.number().int().nullable().openapi(d('How long the latest attempt took, in ms')),
    errorMessage: z.string().nullable().openapi(d('Why the latest attempt failed (timeout, network error, unsafe URL, non-2xx), or null')),
    attempt: z.number().int().openapi(d('Attempts made so far (0 when created)')),
    nextAttemptAt: z.string().nullable().openapi(d('When the next attempt is due (ISO 8601), while retrying')),
    createdAt: z.string().openapi(d('When the delivery was queued (ISO 8601)')),
    deliveredAt: z.string().nullable().openapi(d('When a 2xx was received (ISO 8601), or null')),
  })
  .openapi('WebhookDelivery', { description: 'One event sent to one webhook, with its latest attempt' });
const Queued = z
  .object({
    message: z.string().openapi(d('What happened, in words')),
    delivery: z
      .object({
        id: z.uuid().openapi(d('The new delivery\'s id')),
        webhookId: z.uuid().openapi(d('The webhook')),
        status: z.literal('pending').openapi(d('Always `pending`: queued for an immediate attempt')),
        event: z.string().openapi(d('Event type')),
        attempt: z.number().int().openapi(d('Attempts made (0)')),
      })
      .openapi(d('The queued delivery')),
  })
  .openapi('WebhookDeliveryQueued', { description: 'A delivery queued by a test or a manual retry' });

const WebhookCreate = z
  .object({
    name: z.string().trim().min(1).max(255).openapi(d('Display name (1-255 characters)')),
    url: Url,
    secret: Secret.optional(),
    events: Events,
    headers: Headers.optional(),
    retrySchedule: RetrySchedule.optional().openapi({ description: 'Default `default`, or `custom` when `retryPolicy` is given; `retryPolicy` only with `custom`' }),
    retryPolicy: RetryPolicyIn.optional(),
    rateLimitPerSecond: RateLimit.nullable().optional(),
    orgId: z.uuid().optional().openapi({ description: 'The organisation (required for partner and system callers, unless `partnerId` is given)' }),
    partnerId: z.uuid().optional().openapi({
      description:
        'In place of `orgId`: a partner-wide webhook, receiving the events of every organisation of the partner (new ones included). Partner users with access to every organisation of their partner (403 `full_org_access_required` otherwise) and system callers',
    }),
  })
  .strict()
  .openapi('WebhookCreate', {
    description: 'A new webhook (status `active`)',
    example: { name: 'PSA tickets', url: 'https://psa.example.com/hooks/keel', secret: 'a-long-random-signing-secret-42', events: ['alert.triggered', 'device.offline'], headers: [{ key: 'X-Tenant', value: 'acme' }] },
  });
const WebhookPatch = z
  .object({
    name: z.string().trim().min(1).max(255).optional().openapi(d('Display name (1-255 characters)')),
    url: Url.optional(),
    secret: Secret.nullable().optional().openapi({ description: 'Replaces the secret at once (no overlap); null removes it' }),
    events: Events.optional(),
    headers: HeadersPatch.optional(),
    status: ApiStatus.optional(),
    retrySchedule: RetrySchedule.optional().openapi({ description: '`custom` needs `retryPolicy` with it; `default` and `extended` take none' }),
    retryPolicy: RetryPolicyIn.nullable().optional().openapi({ description: 'null: back to the defaults; alone, it makes the schedule `custom`' }),
    rateLimitPerSecond: RateLimit.nullable().optional().openapi({ description: 'null removes the limit' }),
    orgId: z.uuid().optional().openapi(d('The organisation (partner and system callers)')),
  })
  .strict()
  .openapi('WebhookUpdate', { description: 'Any of the fields; an absent field is unchanged', example: { status: 'paused' } });
const RotateBody = z
  .object({ secret: Secret.optional(), orgId: z.uuid().optional().openapi(d('The organisation (partner and system callers)')) })
  .strict()
  .openapi('WebhookSecretRotate', { description: 'A new secret, or none to have Keel generate one (shown once); the previous one keeps signing for 24 hours', example: {} });
const Rotated = Webhook.extend({ secret: z.string().optional().openapi({ description: 'The generated secret, shown once' }) }).openapi('WebhookRotated', { description: 'The webhook after a rotation' });
const TestBody = z
  .object({
    event: EventType.optional(),
    payload: z.record(z.string(), z.unknown()).optional().openapi(d('The `data` to send (default: a message, a timestamp and the webhook id)')),
    orgId: z.uuid().optional().openapi(d('The organisation (partner and system callers)')),
  })
  .strict()
  .openapi('WebhookTest', {
    description: 'A test delivery (default event `webhook.test`), marked `X-Service-Test: true` and `"test": true` in its body; naming another event type needs `events:publish` too (403 `permission_denied` otherwise)',
    example: { event: 'webhook.test' },
  });
const DeliveryParams = z.object({
  id: z.uuid().openapi({ description: 'Webhook id', param: { name: 'id', in: 'path' } }),
  deliveryId: z.uuid().openapi({ description: 'Delivery id (a `failed` one)', param: { name: 'deliveryId', in: 'path' } }),
});
const EventIn = z
  .object({
    type: EventType,
    orgId: z.uuid().optional().openapi(d('The organisation the event belongs to (required for partner and system keys)')),
    data: z.record(z.string(), z.unknown()).default({}).openapi(d('The event\'s data, sent as `data` in each delivery')),
  })
  .strict()
  .openapi('EventPublish', { description: 'An event of another component', example: { type: 'alert.triggered', data: { alertId: 'a-1', severity: 'critical' } } });
const EventOut = z
  .object({
    id: z.uuid().openapi(d('Event id')),
    type: z.string().openapi(d('Event type')),
    timestamp: z.string().openapi(d('When it was published (ISO 8601)')),
    orgId: z.uuid().openapi(d('Its organisation')),
  })
  .openapi('EventPublished', { description: 'The published event; one delivery was queued per subscribed active webhook' });

const noContent = { 204: { description: 'Deleted, with its deliveries' } } as const;

/** The request's organisation, or "organization context is required" (docs/specification.md "Errors") (400 `org_required`) for a partner or system caller that named none. */
function inOrg(access: AccessContext): AccessContext & { orgId: string } {
  if (!access.orgId) throw orgRequired();
  return access as AccessContext & { orgId: string };
}

const CatalogueQuery = z
  .object({ include: z.enum(['schema']).optional().openapi(d('`schema` adds each type\'s JSON Schema')) })
  .strict();
const Catalogue = z
  .object({
    data: z.array(
      z
        .object({
          type: EventType,
          description: z.string().openapi(d('What the event means and who publishes it')),
          example: z.record(z.string(), z.unknown()).openapi(d('An example delivery body')),
          schema: z.record(z.string(), z.unknown()).optional().openapi(d('JSON Schema (draft 2020-12) of the delivery body, with `?include=schema`')),
        })
        .openapi('EventTypeInfo'),
    ).openapi(d('One entry per event type')),
  })
  .openapi('EventCatalogue', { description: 'The event types, in catalogue order' });

/**
 * docs/specification.md "Webhooks: subscriptions" and docs/decisions.md "Webhook shapes": webhooks (`webhooks:read` / `webhooks:write`),
 * their deliveries, test and retry, secret rotation; and `POST /events` for API keys holding
 * `events:publish`. Organisation users act in their organisation; partner and system callers name it
 * with `orgId` on list and create (400 `org_required` otherwise), and may name it on the others.
 * Another tenant's webhook or delivery is 404.
 */
export function mountWebhookRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const tags = ['webhooks'];
  const read = (requireOrg = false) => [auth, ...guard(keel, { requireOrg, permission: ['webhooks', 'read'] })];
  // Webhooks act on the whole organisation (every event of it): their writes (create, update, delete,
  // test, retry, rotation) are refused to callers restricted to some sites or device groups.
  const write = (requireOrg = false) => [auth, ...guard(keel, { requireOrg, wholeOrg: true, permission: ['webhooks', 'write'] })];
  mountReplayRoutes(api, keel, { read: () => read(), write: () => write() });

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks', tags, summary: 'Webhooks of the organisation, or with `?partnerId=` the partner\'s partner-wide webhooks (partner users with access to every organisation of it: 403 `full_org_access_required` otherwise)',
      middleware: read(),
      request: { query: PageQuery.extend(ScopeQuery.shape).extend({ status: ApiStatus.optional().openapi(d('Only webhooks of this status')) }) },
      responses: { 200: json(paginated(WebhookWithStats), 'Webhooks, each with its delivery numbers'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const access = accessOf(c);
      // The partner's own webhooks when it is named and no organisation is; else an organisation's (named or the caller's).
      const partnerLevel = q.partnerId !== undefined && q.orgId === undefined;
      if (!partnerLevel) inOrg(access);
      const { data, total } = await listWebhooks(keel, access, { ...q, partnerLevel }, devicePlacementSql);
      return c.json(page(data, q, total), 200);
    },
  );

  // Before `/webhooks/{id}`: the catalogue's path is not an id.
  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/event-types', tags,
      summary: 'The event catalogue: every event type a webhook can subscribe to, with its description, an example delivery body and (`?include=schema`) the JSON Schema (draft 2020-12) of that body',
      middleware: [auth, ...guard(keel, { permission: ['webhooks', 'read'] })],
      request: { query: CatalogueQuery },
      responses: { 200: json(Catalogue, 'The event types') },
    }),
    (c) => {
      const withSchema = c.req.valid('query').include === 'schema';
      return c.json({ data: EVENT_CATALOGUE.map(({ schema, ...item }) => (withSchema ? { ...item, schema } : item)) }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks', tags, summary: 'Subscribe a URL to events of the organisation (at most WEBHOOKS_PER_ORG_LIMIT, default 25: 409 `webhook_limit_reached` beyond)',
      middleware: write(),
      request: { query: ScopeQuery, body: jsonBody(WebhookCreate) },
      responses: { 201: json(Webhook, 'Created, status active'), ...errors(404, 409) },
    }),
    async (c) => {
      // The body is validated first; then the organisation must be known (docs/specification.md "Errors").
      const { partnerId, orgId, ...body } = c.req.valid('json');
      const access = accessOf(c);
      if (partnerId !== undefined && (orgId !== undefined || c.req.valid('query').orgId !== undefined)) {
        throw validationError([{ path: 'partnerId', message: 'give either orgId or partnerId, not both' }]);
      }
      const owner = partnerId !== undefined ? { partnerId: partnerLevelOf(access) } : { orgId: inOrg(access).orgId };
      return c.json(await createWebhook(keel, access, body, requestInfo(c), owner), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}', tags, summary: 'A webhook with its delivery statistics',
      middleware: read(),
      request: { params: IdParam, query: ScopeQuery },
      responses: { 200: json(WebhookWithStats, 'Webhook'), ...errors(404) },
    }),
    async (c) => c.json(await readWebhook(keel, accessOf(c), c.req.valid('param').id, devicePlacementSql), 200),
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/webhooks/{id}', tags, summary: 'Change a webhook (a new secret replaces the old one at once)',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery, body: jsonBody(WebhookPatch) },
      responses: { 200: json(Webhook, 'Updated'), ...errors(404) },
    }),
    async (c) => c.json(await updateWebhook(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/webhooks/{id}', tags, summary: 'Delete a webhook and all its delivery records',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery },
      responses: { ...noContent, ...errors(404) },
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
      responses: { 200: json(Rotated, 'Rotated'), ...errors(404) },
    }),
    async (c) => {
      const body = c.req.valid('json') as z.infer<typeof RotateBody> | undefined;
      const { webhook, secret } = await rotateSecret(keel, accessOf(c), c.req.valid('param').id, body?.secret, requestInfo(c));
      return c.json(secret === undefined ? webhook : { ...webhook, secret }, 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/webhooks/{id}/deliveries', tags,
      summary: 'Delivery history, newest first; a caller restricted to some sites or device groups sees only the deliveries of events placed within them (the event\'s siteId/deviceGroupId, else its device\'s); events with no placement only unrestricted callers see',
      middleware: read(),
      request: { params: IdParam, query: PageQuery.extend(ScopeQuery.shape).extend({ status: z.enum(DELIVERY_STATUSES as ['pending', 'delivered', 'failed', 'retrying']).optional().openapi(d('Only deliveries of this status')) }) },
      responses: { 200: json(paginated(Delivery), 'Deliveries'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const { data, total } = await listDeliveries(keel, accessOf(c), c.req.valid('param').id, q, devicePlacementSql);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/test', tags,
      summary: 'Queue a test delivery (webhook.test by default); tests and retries are limited per webhook (WEBHOOK_MANUAL_LIMIT, default 10 a minute) and per caller (WEBHOOK_MANUAL_CALLER_LIMIT, default 30): 429 with Retry-After',
      middleware: write(),
      request: { params: IdParam, query: ScopeQuery, body: { required: false, content: { 'application/json': { schema: TestBody } } } },
      responses: { 202: json(Queued, 'Queued'), ...errors(404, 409, 429) },
    }),
    async (c) => {
      const body = (c.req.valid('json') as z.infer<typeof TestBody> | undefined) ?? {};
      return c.json(await testWebhook(keel, accessOf(c), c.req.valid('param').id, body, requestInfo(c)), 202);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/webhooks/{id}/retry/{deliveryId}', tags,
      summary: 'Retry a failed delivery as a new pending record (`retryOf` names the failed one); once per failed delivery: 409 `already_retried` (with `retryDeliveryId`) after that; limited like tests (429)',
      middleware: write(),
      request: { params: DeliveryParams, query: ScopeQuery },
      responses: { 202: json(Queued, 'Queued'), ...errors(404, 409, 429) },
    }),
    async (c) => {
      const { id, deliveryId } = c.req.valid('param');
      return c.json(await retryDelivery(keel, accessOf(c), id, deliveryId, requestInfo(c)), 202);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/events', tags: ['events'], summary: 'Publish an event of another component (API keys with events:publish; EVENTS_PUBLISH_LIMIT a minute per key, default 6,000: 429 with Retry-After)',
      middleware: [auth, ...guard(keel, { permission: ['events', 'publish'] })],
      request: { query: ScopeQuery, body: jsonBody(EventIn) },
      responses: { 202: json(EventOut, 'Published: one delivery per subscribed active webhook'), ...errors(404, 429) },
    }),
    async (c) => {
      const { type, data } = c.req.valid('json');
      const principal = principalOf(c);
      if (principal?.kind !== 'api_key') throw webhooksError('api_key_required');
      await webhookLimits(keel).publish.consume(principal.apiKeyId ?? principal.userId);
      const event = await publishEvent(keel, inOrg(accessOf(c)).orgId, type, data);
      return c.json({ id: event.id, type: event.type, timestamp: event.timestamp, orgId: event.orgId ?? '' }, 202);
    },
  );
}
