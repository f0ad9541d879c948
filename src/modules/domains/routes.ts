import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { notFound } from '../../platform/http/errors.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import { addDomain, deleteDomain, listDomains, verifyDomain, type DomainOwner } from './service.js';

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

const DomainSchema = z
  .object({
    id: z.uuid().openapi(d('Domain claim id (UUID), for …/domains/{id}')),
    orgId: z.uuid().nullable().openapi(d('The organisation that claims it (null for a partner\'s claim)')),
    partnerId: z.uuid().nullable().openapi(d('The partner that claims it (null for an organisation\'s claim)')),
    domain: z.string().openapi(d('The domain, IDNA (punycode) in lower case; it covers its subdomains', 'contoso.com')),
    status: z.enum(['pending', 'verified']).openapi(d('`verified` once the TXT record was found; `pending` before, after a failed check, and when the daily re-check no longer finds the record')),
    txtRecord: z.string().openapi(d('The TXT record to publish at the domain (the whole value)', 'keel-verification=3q2-7wF0a1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU1vW2x')),
    reason: z.enum(['txt_record_missing', 'txt_record_mismatch', 'dns_lookup_failed', 'txt_record_removed']).nullable().openapi(d('Why the last check did not verify it (null after a success or before any check)')),
    reasonText: z.string().nullable().openapi(d('The reason as a sentence for people')),
    verifiedAt: z.string().nullable().openapi(d('When it was verified (ISO 8601); null while pending')),
    checkedAt: z.string().nullable().openapi(d('Last DNS check (ISO 8601): a verify, or the daily re-check of a verified domain')),
    lapsedAt: z.string().nullable().openapi(d('When a verified domain went back to pending because its record was gone (ISO 8601)')),
    createdAt: z.string().openapi(d('When it was claimed (ISO 8601)')),
  })
  .openapi('VerifiedDomain', { description: 'An email domain claimed by an organisation or partner, proven by a DNS TXT record' });

const DomainCreate = z
  .object({ domain: z.string().trim().min(1).max(300).openapi(d('The domain to claim: a registrable name or a subdomain, Unicode or punycode, no wildcard, not a public suffix alone', 'contoso.com')) })
  .openapi('VerifiedDomainCreate', { example: { domain: 'contoso.com' } });

const OrgPath = z.object({
  orgId: z.uuid().openapi({ description: 'Id (UUID) of the organisation; one the caller cannot reach answers 404', param: { name: 'orgId', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e90' }),
});
const PartnerPath = z.object({
  partnerId: z.uuid().openapi({ description: 'Id (UUID) of the partner; another partner answers 404', param: { name: 'partnerId', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e91' }),
});
const IdPart = {
  id: z.uuid().openapi({ description: 'Id (UUID) of the domain claim, as the list or create answer gave it; another owner\'s answers 404', param: { name: 'id', in: 'path' }, example: '01936f4e-8c1a-7b2e-9d4f-3a5b6c7d8e9f' }),
};

/** The organisation a route acts in (the guard reached it from the path, else answered 404). */
function orgOwner(c: Context<AppEnv>): DomainOwner {
  const access = accessOf(c);
  if (!access.orgId) throw notFound('Organization');
  return { kind: 'org', orgId: access.orgId, partnerId: access.partnerId };
}

/** A partner's own domains: partner users of that partner and platform administrators naming it. */
function partnerOwner(c: Context<AppEnv>): DomainOwner {
  const access = accessOf(c);
  if (access.scope === 'organization' || !access.partnerId || access.orgId) throw notFound('Partner');
  return { kind: 'partner', partnerId: access.partnerId };
}

const userId = (c: Context<AppEnv>) => {
  const p = c.get('principal');
  return p.kind === 'user' ? p.userId : null;
};

/**
 * Verified domains (docs/decisions.md "Verified domains and SSO step-up"): an organisation (or a partner) claims an
 * email domain and proves it with a DNS TXT record. Reads need `organizations:read`; writes
 * `organizations:write`, the whole organisation (no site or group restriction) and, for partner
 * users, `orgAccess: all`.
 */
export function mountDomainRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const auth = authenticate(keel);
  const levels = [
    { base: '/orgs/{orgId}/domains', params: OrgPath, owner: orgOwner, scope: { orgIdParam: 'orgId' }, tag: 'organizations', who: 'an organisation' },
    { base: '/partners/{partnerId}/domains', params: PartnerPath, owner: partnerOwner, scope: { partnerIdParam: 'partnerId' }, tag: 'partners', who: 'a partner' },
  ] as const;
  for (const l of levels) {
    const read = [auth, ...guard(keel, { ...l.scope, permission: ['organizations', 'read'] })];
    const write = [auth, ...guard(keel, { ...l.scope, permission: ['organizations', 'write'], wholeOrg: true, fullOrgAccess: true })];
    const tags = [l.tag];
    const Params = l.params;
    const ItemParams = l.params.extend(IdPart);

    api.openapi(
      createRoute({
        method: 'get', path: l.base, tags, summary: `Email domains claimed by ${l.who}, with their verification status`,
        middleware: read,
        request: { params: Params, query: PageQuery },
        responses: { 200: json(paginated(DomainSchema), 'Domains'), ...errors(404) },
      }),
      async (c) => {
        const q = c.req.valid('query');
        const { data, total } = await listDomains(keel.db, l.owner(c), q);
        return c.json(page(data, q, total), 200);
      },
    );

    api.openapi(
      createRoute({
        method: 'post', path: l.base, tags, summary: 'Claim a domain: answers the TXT record to publish (409 domain_claimed when verified elsewhere)',
        middleware: write,
        request: { params: Params, body: jsonBody(DomainCreate) },
        responses: { 201: json(DomainSchema, 'Claimed (pending)'), ...errors(404, 409) },
      }),
      async (c) => c.json(await addDomain(keel, l.owner(c), c.req.valid('json'), userId(c), requestInfo(c)), 201),
    );

    api.openapi(
      createRoute({
        method: 'post', path: `${l.base}/{id}/verify`, tags, summary: 'Look the TXT record up now: verified, or pending with the reason',
        middleware: write,
        request: { params: ItemParams },
        responses: { 200: json(DomainSchema, 'The claim after the check'), ...errors(404, 409, 429) },
      }),
      async (c) => c.json(await verifyDomain(keel, l.owner(c), c.req.valid('param').id, requestInfo(c)), 200),
    );

    api.openapi(
      createRoute({
        method: 'delete', path: `${l.base}/{id}`, tags, summary: 'Give a domain up (a verified one becomes free for others)',
        middleware: write,
        request: { params: ItemParams },
        responses: { 204: { description: 'Deleted' }, ...errors(404) },
      }),
      async (c) => {
        await deleteDomain(keel, l.owner(c), c.req.valid('param').id, requestInfo(c));
        return c.body(null, 204);
      },
    );
  }
}
