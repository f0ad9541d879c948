import { z } from 'zod';
import { EVENT_TYPES, type EventType } from './event-types.js';

/**
 * The event catalogue (docs/decisions.md "Event catalogue"): for every event type, what it means, the
 * schema of its `data` and an example. The schemas of the events Keel emits itself are the types its
 * publishers are checked against (`KnownEventData` in events.ts is inferred from them), so the
 * published JSON Schema and the code cannot say different things. Events of other components
 * (published through `POST /events`) carry the publisher's own object.
 */

const uuid = z.uuid();
const deviceId = uuid.describe('The device');
const hostname = z.string().describe('The device\'s host name');

/** The `data` of the events Keel emits itself. */
export const KEEL_EVENT_DATA = {
  'user.login': z
    .object({
      userId: uuid.describe('The user who signed in'),
      email: z.string().describe('Their email address'),
      sessionId: uuid.describe('The session the sign-in opened'),
      method: z.enum(['password', 'mfa', 'sso', 'passkey']).describe('How they signed in: a password alone, a password and a second factor, single sign-on, or a sign-in passkey alone (user verification: two factors)'),
    })
    .strict(),
  'user.logout': z
    .object({
      userId: uuid.describe('The user who signed out'),
      email: z.string().describe('Their email address'),
      sessionId: uuid.nullable().describe('The session that ended (null when it was not known)'),
    })
    .strict(),
  'user.deactivated': z
    .object({
      userId: uuid.describe('The user whose account was disabled'),
      email: z.string().describe('Their email address'),
      source: z.literal('scim').describe('What disabled it: the organisation\'s directory, through SCIM provisioning'),
    })
    .strict(),
  'device.enrolled': z
    .object({
      deviceId,
      hostname,
      os: z.string().nullable().describe('Operating system the agent reported, if it did'),
      arch: z.string().nullable().describe('CPU architecture the agent reported, if it did'),
      siteId: uuid.nullable().describe('The site the device was placed in, if any'),
      deviceGroupId: uuid.nullable().describe('The device group the device was placed in, if any'),
      agentVersion: z.string().describe('The agent version it enrolled with'),
    })
    .strict(),
  'device.online': z.object({ deviceId, hostname }).strict(),
  'device.offline': z
    .object({ deviceId, hostname, lastSeenAt: z.iso.datetime().nullable().describe('Its last heartbeat (ISO 8601 UTC)') })
    .strict(),
  'device.updated': z
    .object({
      deviceId,
      component: z.string().describe('The component that changed version: agent, helper or watchdog'),
      fromVersion: z.string().nullable().describe('The version it ran before (null for a component it did not have)'),
      toVersion: z.string().describe('The version it runs now'),
    })
    .strict(),
  'device.decommissioned': z.object({ deviceId, hostname }).strict(),
  'session.login': z.object({ deviceId, username: z.string().describe('The operating-system user now signed in on the device') }).strict(),
  'session.logout': z.object({ deviceId, username: z.string().describe('The operating-system user who signed out of the device') }).strict(),
  'webhook.disabled': z
    .object({
      webhookId: uuid.describe('The webhook Keel set to failed'),
      name: z.string().describe('Its name'),
      deadLettered: z.number().int().describe('Deliveries dead-lettered in a row'),
      failingSince: z.iso.datetime().describe('When the first of them failed (ISO 8601 UTC)'),
    })
    .strict(),
} satisfies Partial<Record<EventType, z.ZodType>>;

export type KeelEmittedType = keyof typeof KEEL_EVENT_DATA;

/** The `data` of an event another component published: its own object. */
const PUBLISHED_DATA = z.record(z.string(), z.unknown()).describe('The publisher\'s object, as given to POST /api/v1/events');

/** The `data` of a test delivery: Keel's default object, or the payload the tester named. */
const TEST_DATA = z
  .record(z.string(), z.unknown())
  .describe('By default {message, timestamp, webhookId}; a test that names its own payload (POST /webhooks/:id/test {payload}) sends that');

interface CatalogueEntry {
  description: string;
  example: Record<string, unknown>;
}

const EXAMPLE_IDS = {
  user: '0b7f3c52-8a61-4d2e-9c1a-2f6d7e8a9b10',
  session: '5e2d1c4b-3a29-4f18-8e07-d6c5b4a39281',
  device: '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d',
  site: '3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f',
  group: '7f6e5d4c-3b2a-4190-8f7e-6d5c4b3a2918',
  webhook: '2a3b4c5d-6e7f-4081-9a2b-3c4d5e6f7a8b',
};

const ENTRIES: Record<EventType, CatalogueEntry> = {
  'device.enrolled': {
    description: 'A device enrolled with an enrolment key of the organisation',
    example: { deviceId: EXAMPLE_IDS.device, hostname: 'FIN-LT-042', os: 'windows', arch: 'amd64', siteId: EXAMPLE_IDS.site, deviceGroupId: EXAMPLE_IDS.group, agentVersion: '3.1.0' },
  },
  'device.online': { description: 'A device that was offline sent a heartbeat again', example: { deviceId: EXAMPLE_IDS.device, hostname: 'FIN-LT-042' } },
  'device.offline': {
    description: 'A device missed its heartbeats for longer than the offline threshold',
    example: { deviceId: EXAMPLE_IDS.device, hostname: 'FIN-LT-042', lastSeenAt: '2026-11-27T08:15:00.000Z' },
  },
  'device.updated': {
    description: 'A device now runs another version of a component (its agent reported it)',
    example: { deviceId: EXAMPLE_IDS.device, component: 'agent', fromVersion: '3.0.2', toVersion: '3.1.0' },
  },
  'device.decommissioned': { description: 'A device was decommissioned: its token no longer works', example: { deviceId: EXAMPLE_IDS.device, hostname: 'FIN-LT-042' } },
  'alert.triggered': { description: 'An alert was raised (published by the monitoring component)', example: { alertId: 'a-1', severity: 'critical', deviceId: EXAMPLE_IDS.device } },
  'alert.acknowledged': { description: 'Someone acknowledged an alert (published by the monitoring component)', example: { alertId: 'a-1', by: 'tech@msp.example' } },
  'alert.resolved': { description: 'An alert was resolved (published by the monitoring component)', example: { alertId: 'a-1' } },
  'alert.escalated': { description: 'An alert was escalated (published by the monitoring component)', example: { alertId: 'a-1', level: 2 } },
  'script.started': { description: 'A script started on a device (published by the scripting component)', example: { runId: 'r-7', deviceId: EXAMPLE_IDS.device } },
  'script.completed': { description: 'A script finished successfully (published by the scripting component)', example: { runId: 'r-7', exitCode: 0 } },
  'script.failed': { description: 'A script failed (published by the scripting component)', example: { runId: 'r-7', exitCode: 1 } },
  'automation.started': { description: 'An automation started (published by the automation component)', example: { automationId: 'au-3' } },
  'automation.completed': { description: 'An automation completed (published by the automation component)', example: { automationId: 'au-3' } },
  'automation.failed': { description: 'An automation failed (published by the automation component)', example: { automationId: 'au-3', reason: 'timeout' } },
  'policy.evaluated': { description: 'A policy was evaluated on a device (published by the policy component)', example: { policyId: 'p-2', deviceId: EXAMPLE_IDS.device } },
  'policy.violation': { description: 'A device violates a policy (published by the policy component)', example: { policyId: 'p-2', deviceId: EXAMPLE_IDS.device } },
  'policy.compliant': { description: 'A device complies with a policy again (published by the policy component)', example: { policyId: 'p-2', deviceId: EXAMPLE_IDS.device } },
  'patch.available': { description: 'A patch is available for a device (published by the patching component)', example: { patchId: 'KB5030211', deviceId: EXAMPLE_IDS.device } },
  'patch.approved': { description: 'A patch was approved (published by the patching component)', example: { patchId: 'KB5030211' } },
  'patch.installed': { description: 'A patch was installed on a device (published by the patching component)', example: { patchId: 'KB5030211', deviceId: EXAMPLE_IDS.device } },
  'patch.failed': { description: 'A patch failed to install (published by the patching component)', example: { patchId: 'KB5030211', deviceId: EXAMPLE_IDS.device } },
  'patch.rollback': { description: 'A patch was rolled back (published by the patching component)', example: { patchId: 'KB5030211', deviceId: EXAMPLE_IDS.device } },
  'security.score_changed': { description: 'A device\'s security score changed (published by the security component)', example: { deviceId: EXAMPLE_IDS.device, from: 72, to: 85 } },
  'remote.session.started': { description: 'A remote-control session started (published by the remote-access component)', example: { remoteSessionId: 'rs-1', deviceId: EXAMPLE_IDS.device } },
  'remote.session.ended': { description: 'A remote-control session ended (published by the remote-access component)', example: { remoteSessionId: 'rs-1' } },
  'remote.file.transferred': { description: 'A file was transferred in a remote session (published by the remote-access component)', example: { remoteSessionId: 'rs-1', bytes: 1048576 } },
  'user.login': {
    description: 'A user of the organisation signed in to Keel',
    example: { userId: EXAMPLE_IDS.user, email: 'grace@customer.example', sessionId: EXAMPLE_IDS.session, method: 'mfa' },
  },
  'user.logout': {
    description: 'A user of the organisation signed out of Keel',
    example: { userId: EXAMPLE_IDS.user, email: 'grace@customer.example', sessionId: EXAMPLE_IDS.session },
  },
  'user.deactivated': {
    description: 'The organisation\'s directory disabled a user through SCIM provisioning: their sessions, refresh tokens and API keys stopped working at once',
    example: { userId: EXAMPLE_IDS.user, email: 'grace@customer.example', source: 'scim' },
  },
  'session.login': { description: 'Someone signed in to a device\'s operating system (the agent reported it)', example: { deviceId: EXAMPLE_IDS.device, username: 'ACME\\grace' } },
  'session.logout': { description: 'Someone signed out of a device\'s operating system (the agent reported it)', example: { deviceId: EXAMPLE_IDS.device, username: 'ACME\\grace' } },
  'webhook.disabled': {
    description:
      'Keel set another webhook of the organisation to failed (every delivery dead-lettered for 24 hours). Sent to every active webhook of the organisation, subscribed or not',
    example: { webhookId: EXAMPLE_IDS.webhook, name: 'PSA tickets', deadLettered: 12, failingSince: '2026-11-26T08:15:00.000Z' },
  },
  'webhook.test': {
    description: 'A test delivery sent from the console or POST /webhooks/:id/test (marked X-Service-Test: true and "test": true)',
    example: { message: 'This is a test delivery from Keel', timestamp: '2026-11-27T08:15:00.000Z', webhookId: EXAMPLE_IDS.webhook },
  },
};

/** The schema of an event type's `data`. */
function eventDataSchema(type: EventType): z.ZodType {
  if (type === 'webhook.test') return TEST_DATA;
  return (KEEL_EVENT_DATA as Partial<Record<EventType, z.ZodType>>)[type] ?? PUBLISHED_DATA;
}

/** The body a receiver gets for an event of this type: the envelope with its `data`. */
function deliveryBodySchema(type: EventType): z.ZodType {
  return z
    .object({
      id: uuid.describe('The event\'s id: the same in every delivery of the event and in a retry (use it to drop duplicates)'),
      type: z.literal(type).describe('The event type'),
      timestamp: z.iso.datetime().describe('When the event happened (ISO 8601 UTC)'),
      orgId: uuid.nullable().describe('The organisation the event belongs to (for a partner-wide webhook too); null only in a partner-wide webhook\'s test deliveries and in the `webhook.disabled` of a partner-wide webhook'),
      test: z.literal(true).optional().describe('Present (true) on a test delivery only'),
      data: eventDataSchema(type),
    })
    .strict()
    .describe(ENTRIES[type].description);
}

export interface CatalogueItem {
  type: EventType;
  description: string;
  /** JSON Schema (draft 2020-12) of the delivery body. */
  schema: Record<string, unknown>;
  /** An example delivery body. */
  example: Record<string, unknown>;
}

function jsonSchemaOf(type: EventType): Record<string, unknown> {
  const { $schema: _drop, ...schema } = z.toJSONSchema(deliveryBodySchema(type), { target: 'draft-2020-12', io: 'output' }) as Record<string, unknown>;
  return schema;
}

/** The whole catalogue, built once: it does not change while the process runs. */
export const EVENT_CATALOGUE: readonly CatalogueItem[] = EVENT_TYPES.map((type) => ({
  type,
  description: ENTRIES[type].description,
  schema: jsonSchemaOf(type),
  example: {
    id: '6f1e2d3c-4b5a-4968-8776-5a4b3c2d1e0f',
    type,
    timestamp: '2026-11-27T08:15:00.000Z',
    orgId: '1d2c3b4a-5968-4776-8a5b-4c3d2e1f0a9b',
    ...(type === 'webhook.test' ? { test: true } : {}),
    data: ENTRIES[type].example,
  },
}));

const DELIVERY_HEADERS: { name: string; description: string; required: boolean }[] = [
  { name: 'X-Service-Event-Type', description: 'The event type', required: true },
  { name: 'X-Service-Event-Id', description: 'The event id (the body\'s `id`)', required: true },
  { name: 'X-Service-Delivery-Id', description: 'This delivery\'s id (a new one for each retry of a failed delivery)', required: true },
  { name: 'X-Service-Signature', description: 'sha256=<hex HMAC-SHA256 of "<timestamp>.<body>"> with the webhook\'s secret; the timestamp is X-Service-Signature-Timestamp (Unix milliseconds)', required: false },
  { name: 'X-Service-Signature-Timestamp', description: 'The Unix time the signature covers', required: false },
  { name: 'webhook-id', description: 'Standard Webhooks: the event id', required: true },
  { name: 'webhook-timestamp', description: 'Standard Webhooks: the Unix time of the attempt', required: true },
  { name: 'webhook-signature', description: 'Standard Webhooks: one `v1,<base64>` per valid secret, space-separated', required: false },
  { name: 'X-Service-Test', description: '`true` on a test delivery', required: false },
];

/** The OpenAPI 3.1 `webhooks` section: one POST per event type, as Keel sends it to a receiver. */
export function openApiWebhooks(): Record<string, unknown> {
  return Object.fromEntries(
    EVENT_CATALOGUE.map((item) => [
      item.type,
      {
        post: {
          summary: item.type,
          description: item.description,
          operationId: `event_${item.type.replaceAll('.', '_')}`,
          tags: ['webhooks'],
          parameters: DELIVERY_HEADERS.map((h) => ({ in: 'header', name: h.name, required: h.required, description: h.description, schema: { type: 'string' } })),
          requestBody: { required: true, content: { 'application/json': { schema: item.schema, example: item.example } } },
          responses: { '200': { description: 'Delivered: any 2xx answer within the timeout counts; anything else is retried' } },
        },
      },
    ]),
  );
}
