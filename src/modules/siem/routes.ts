import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody } from '../../platform/http/schemas.js';
import { notFound } from '../../platform/http/errors.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import type { Scope } from '../access/service.js';
import { createStream, deleteStream, getStream, listStreams, updateStream } from './service.js';

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

const StreamSchema = z
  .object({
    id: z.uuid().openapi(d('Stream id (UUID)')),
    partnerId: z.uuid().nullable().openapi(d('The partner whose entries it sends (its own and its organisations\'); null for the platform\'s stream (every entry)')),
    type: z.enum(['syslog', 'https']).openapi(d('`syslog`: RFC 5424 over TCP with TLS, octet-counted; `https`: signed JSON batches')),
    url: z.string().openapi(d('`syslog+tls://host:port` (or `syslog://host:port` where insecure targets are allowed) or an `https://` URL', 'syslog+tls://siem.example.com:6514')),
    tls: z.object({ ca: z.string().nullable().openapi(d('PEM certificate(s) trusted beside the system\'s for this receiver (a private SIEM); null: the system\'s only')) }).openapi(d('TLS settings')),
    hasSecret: z.boolean().openapi(d('True when the stream signs its batches (https): the secret itself is never answered')),
    status: z.enum(['pending', 'ok', 'failing']).openapi(d('`pending`: not tried since it was created or changed; `ok`: the last try delivered (or nothing was due); `failing`: the last batch was not taken, tried again with backoff')),
    lagSeconds: z.number().int().openapi(d('Seconds since the oldest entry not yet sent was written; 0 when caught up')),
    lastError: z.string().nullable().openapi(d('Why the last batch was not delivered; null once one is')),
    lastSentAt: z.string().nullable().openapi(d('When a batch was last delivered (ISO 8601); null before the first')),
    createdAt: z.string().openapi(d('When it was created (ISO 8601)')),
    updatedAt: z.string().openapi(d('When its settings last changed (ISO 8601)')),
  })
  .openapi('AuditStream', { description: 'A destination (a SIEM) every audit entry of its scope is sent to, in order, at least once' });

const Tls = z.object({ ca: z.string().max(65_536).nullable().optional().openapi(d('PEM certificate(s) to trust beside the system\'s; null clears')) }).nullable();
const fields = {
  type: z.enum(['syslog', 'https']).openapi(d('`syslog` or `https`')),
  url: z.string().min(1).max(2048).openapi(d('`syslog+tls://host:port`, `syslog://host:port` (only where insecure targets are allowed) or `https://…` (checked by the outbound rules)', 'syslog+tls://siem.example.com:6514')),
  tls: Tls.optional().openapi(d('TLS settings: `ca` for a receiver whose certificate a private CA signed')),
  secret: z.string().max(256).nullable().optional().openapi(d('https only, required there: the key batches are signed with (16 to 256 characters; write-only)')),
};
const StreamCreate = z.object(fields).openapi('AuditStreamCreate', { example: { type: 'syslog', url: 'syslog+tls://siem.example.com:6514' } });
const StreamPatch = z
  .object({ type: fields.type.optional(), url: fields.url.optional(), tls: fields.tls, secret: fields.secret })
  .openapi('AuditStreamPatch', {
    description: 'Each field optional: absent is unchanged. A change sends from the cursor on to the new destination',
    example: { url: 'syslog+tls://siem2.example.com:6514' },
  });

const List = z.object({ data: z.array(StreamSchema).openapi(d('The destinations, oldest first')) }).openapi('AuditStreamList');

const PartnerPath = z.object({
  partnerId: z.uuid().openapi({ description: 'Id (UUID) of the partner; another partner answers 404', param: { name: 'partnerId', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91' }),
});
const IdPart = {
  id: z.uuid().openapi({ description: 'Id (UUID) of the stream; another owner\'s answers 404', param: { name: 'id', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e9f' }),
};

/**
 * Audit streaming to a SIEM (docs/decisions.md "Audit streaming"): a partner's streams need the whole
 * partner (`orgAccess: all`) and `audit:read` to read, `audit:stream` to change; the platform's
 * (`/audit-streams`) are for platform administrators only.
 */
export function mountSiemRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const partnerOf = (c: Context<AppEnv>): string => {
    const partnerId = accessOf(c).partnerId;
    if (!partnerId) throw notFound('Partner');
    return partnerId;
  };
  const levels = [
    {
      base: '/partners/{partnerId}/audit-streams', params: PartnerPath, who: "a partner's", owner: partnerOf,
      scope: { scopes: ['system', 'partner'] as Scope[], partnerIdParam: 'partnerId', fullOrgAccess: true },
    },
    { base: '/audit-streams', params: z.object({}), who: "the platform's", owner: (): null => null, scope: { scopes: ['system'] as Scope[] } },
  ] as const;
  for (const l of levels) {
    const read = [auth, ...guard(keel, { ...l.scope, permission: ['audit', 'read'] })];
    const write = [auth, ...guard(keel, { ...l.scope, permission: ['audit', 'stream'] })];
    const tags = ['audit'];
    const ItemParams = l.params.extend(IdPart);

    api.openapi(
      createRoute({
        method: 'get', path: l.base, tags, summary: `List ${l.who} audit streams, with their status and lag`,
        middleware: read,
        request: { params: l.params },
        responses: { 200: json(List, 'Streams'), ...errors(404) },
      }),
      async (c) => c.json({ data: await listStreams(keel, l.owner(c)) }, 200),
    );

    api.openapi(
      createRoute({
        method: 'post', path: l.base, tags, summary: `Create one of ${l.who} audit streams: it sends every retained entry of its scope, then each new one`,
        middleware: write,
        request: { params: l.params, body: jsonBody(StreamCreate) },
        responses: { 201: json(StreamSchema, 'Created'), ...errors(400, 404, 409) },
      }),
      async (c) => c.json(await createStream(keel, l.owner(c), c.req.valid('json'), requestInfo(c)), 201),
    );

    api.openapi(
      createRoute({
        method: 'get', path: `${l.base}/{id}`, tags, summary: `One of ${l.who} audit streams`,
        middleware: read,
        request: { params: ItemParams },
        responses: { 200: json(StreamSchema, 'Stream'), ...errors(404) },
      }),
      async (c) => c.json(await getStream(keel, l.owner(c), c.req.valid('param').id), 200),
    );

    api.openapi(
      createRoute({
        method: 'patch', path: `${l.base}/{id}`, tags, summary: `Change one of ${l.who} audit streams`,
        middleware: write,
        request: { params: ItemParams, body: jsonBody(StreamPatch) },
        responses: { 200: json(StreamSchema, 'Changed'), ...errors(400, 404) },
      }),
      async (c) => c.json(await updateStream(keel, l.owner(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
    );

    api.openapi(
      createRoute({
        method: 'delete', path: `${l.base}/{id}`, tags, summary: `Delete one of ${l.who} audit streams (its cursor with it)`,
        middleware: write,
        request: { params: ItemParams },
        responses: { 204: { description: 'Deleted' }, ...errors(404) },
      }),
      async (c) => {
        await deleteStream(keel, l.owner(c), c.req.valid('param').id, requestInfo(c));
        return c.body(null, 204);
      },
    );
  }
}
