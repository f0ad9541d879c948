import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler } from 'hono';
import { getCookie, setCookie, deleteCookie } from 'hono/cookie';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { ErrorSchema, errors, json, jsonBody, page, PageQuery, paginated } from '../../platform/http/schemas.js';
import { platformError } from '../../platform/http/errors.js';
import type { Limit } from '../../platform/rate-limit.js';
import { requestLog } from '../../platform/request-scope.js';
import { documentAccess } from '../../platform/http/route-docs.js';
import { authenticate } from '../../http/authenticate.js';
import { requestInfo, tokenResponse, TokenAnswerSchema } from '../identity/request.js';
import { accessOf, guard } from '../access/scope.js';
import { requireMfa } from '../mfa/policy.js';
import {
  AcsFormSchema,
  CallbackQuerySchema,
  CheckSchema,
  ExchangeBodySchema,
  IdPathSchema,
  LoginQuerySchema,
  OrgPathSchema,
  PartnerCheckSchema,
  PartnerSlugPathSchema,
  PresetSchema,
  presetsView,
  ProviderCreateSchema,
  ProviderPatchSchema,
  ProviderPathSchema,
  ProviderSchema,
  StatusBodySchema,
  TestReportSchema,
} from './api-schemas.js';
import { activeProvider, noActiveProvider, createProvider, deleteProvider, findProvider, listProviders, partnerBySlug, partnerLevelOf, providerView, setProviderStatus, testProvider, updateProvider, type ProviderOwner } from './providers.js';
import { validationError } from '../../platform/http/errors.js';
import { partners } from '../tenancy/schema.js';
import { eq } from 'drizzle-orm';
import { auditSsoFailure, oidcCallback, safeRedirectPath, startLogin, stateCookieValue } from './login.js';
import { loggableError } from '../../platform/safe-error.js';
import { errorLocation } from './locations.js';
import { exchangeCode } from './provisioning.js';
import { discoverSignIn } from './discovery.js';
import { samlAcs, samlMetadata } from './saml.js';
import { BINDING_COOKIE, BINDING_COOKIE_PATH, CALLBACK_PATH, SSO_EXCHANGE_TTL_MS, SSO_LOGIN_TTL_MS, SsoFailure, STATE_COOKIE } from './constants.js';
import { randomToken, sha256Hex } from '../../platform/crypto.js';
import { accessError } from '../access/errors.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const tags = ['sso'];
const redirect = (description: string) => ({ 302: { description, headers: z.object({ Location: z.string().openapi({ description: 'Where the browser goes next' }) }) } });

const limitsOf = (keel: Keel) => keel.modules.get('sso').limits;

/** The organisation a `requireOrg` route acts in (the guard has answered 400 without one). */
function orgOf(c: Context<AppEnv>): string {
  const orgId = accessOf(c).orgId;
  if (!orgId) throw accessError('org_required');
  return orgId;
}

/**
 * Organisation single sign-on (docs/specification.md "Single sign-on: providers" and "Single sign-on: the login flow"; docs/decisions.md "SSO shapes"): presets, providers
 * (writes need `organizations:write` and an `mfa: true` session), the OIDC and SAML login flows and
 * the exchange of the one-time code. (Enforced SSO is registered with identity by the composition root.)
 */
export function mountSsoRoutes(api: OpenAPIHono<AppEnv>, keel: Keel): void {
  const { exchangeLimit, loginLimit, acsLimit, partnerPageLimit } = limitsOf(keel);
  /** Per client address, before the request's body or any lookup (unauthenticated routes). */
  const perAddress = (limit: Limit): MiddlewareHandler<AppEnv> =>
    documentAccess<MiddlewareHandler<AppEnv>>(async (c, next) => {
      await limit.consume(requestInfo(c).ip ?? 'unknown');
      await next();
    }, { limited: true });
  const auth = authenticate(keel);
  // Partner and system callers name the organisation (orgId); a route that needs one checks it in the
  // handler (orgOf), after the body is validated, so a bad body is always answered as such.
  // Reads need only the organisation for its users; an API key would read with no permission checked,
  // so these routes are user-only (403 user_required; docs/security.md "Update channel: release writes and signatures").
  const read = () => [authenticate(keel, { principal: 'user' }), ...guard(keel)];
  // Provider writes configure who signs in to the whole organisation: partner callers need full
  // organisation access and members restricted to sites or groups may not (the service adds the cover
  // rule: assertMayConfigureProvider).
  const write = () => [auth, ...guard(keel, { permission: ['organizations', 'write'], fullOrgAccess: true, wholeOrg: true }), requireMfa(keel)];

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/presets', tags, summary: 'Provider presets with default scopes and attribute mappings',
      middleware: [auth],
      responses: { 200: json(z.object({ data: z.array(PresetSchema).openapi({ description: 'Every preset Keel knows' }) }), 'Presets') },
    }),
    (c) => c.json({ data: presetsView() }, 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/providers', tags, summary: "Providers of an organization (orgId; an organization user's own), or with `?partnerId=` the partner's own providers (partner users with every organization of it: 403 `full_org_access_required` otherwise)",
      middleware: read(),
      request: {
        query: PageQuery.extend({
          orgId: z.uuid().optional().openapi({ description: 'Organization whose providers to list (partner and system callers)' }),
          partnerId: z.uuid().optional().openapi({ description: 'List the partner\'s own providers (for its technicians) instead of an organization\'s' }),
        }),
      },
      responses: { 200: json(paginated(ProviderSchema), 'Providers'), ...errors(404) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const owner: ProviderOwner = q.partnerId !== undefined && q.orgId === undefined ? { partnerId: partnerLevelOf(accessOf(c)) } : { orgId: orgOf(c) };
      const { data, total } = await listProviders(keel.db, owner, q);
      return c.json(page(data, q, total), 200);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/providers/{id}', tags, summary: 'A provider (hasClientSecret, never the secret)',
      middleware: read(),
      request: { params: IdPathSchema },
      responses: { 200: json(ProviderSchema, 'Provider'), ...errors(404) },
    }),
    async (c) => c.json(providerView(await findProvider(keel.db, accessOf(c), c.req.valid('param').id)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/sso/providers', tags, summary: 'Create a provider (status inactive); OIDC discovery when issuer is set',
      middleware: write(),
      request: { body: jsonBody(ProviderCreateSchema) },
      responses: { 201: json(ProviderSchema, 'Created'), ...errors(404) },
    }),
    async (c) => {
      const access = accessOf(c);
      const { orgId: named, partnerId, ...input } = c.req.valid('json');
      if (partnerId !== undefined && (named !== undefined || c.req.query('orgId') !== undefined)) {
        throw validationError([{ path: 'partnerId', message: 'give either orgId or partnerId, not both' }]);
      }
      const owner: ProviderOwner = partnerId !== undefined ? { partnerId: partnerLevelOf(access) } : { orgId: orgOf(c) };
      return c.json(await createProvider(keel, access, owner, input, requestInfo(c)), 201);
    },
  );

  api.openapi(
    createRoute({
      method: 'patch', path: '/sso/providers/{id}', tags, summary: 'Change a provider (audit names the changed fields)',
      middleware: write(),
      request: { params: IdPathSchema, body: jsonBody(ProviderPatchSchema) },
      responses: { 200: json(ProviderSchema, 'Updated'), ...errors(404) },
    }),
    async (c) => c.json(await updateProvider(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json'), requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'delete', path: '/sso/providers/{id}', tags, summary: 'Delete a provider, its login sessions and identity links',
      middleware: write(),
      request: { params: IdPathSchema },
      responses: { 204: { description: 'Deleted' }, ...errors(404) },
    }),
    async (c) => {
      await deleteProvider(keel, accessOf(c), c.req.valid('param').id, requestInfo(c));
      return c.body(null, 204);
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/sso/providers/{id}/status', tags, summary: 'Set the status (one active provider per organization: 409)',
      middleware: write(),
      request: { params: IdPathSchema, body: jsonBody(StatusBodySchema) },
      responses: { 200: json(ProviderSchema, 'Updated'), ...errors(404, 409) },
    }),
    async (c) => c.json(await setProviderStatus(keel, accessOf(c), c.req.valid('param').id, c.req.valid('json').status, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/sso/providers/{id}/test', tags, summary: 'OIDC: run discovery and check the client credentials; SAML: parse the certificate and report its expiry',
      middleware: write(),
      request: { params: IdPathSchema },
      responses: { 200: json(TestReportSchema, 'Report'), ...errors(404) },
    }),
    async (c) => c.json(await testProvider(keel, accessOf(c), c.req.valid('param').id, requestInfo(c)), 200),
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/check/{orgId}', tags, summary: 'Whether an organization signs in with SSO (public, for the login page)',
      request: { params: OrgPathSchema },
      responses: { 200: json(CheckSchema, 'SSO status') },
    }),
    async (c) => {
      const { orgId } = c.req.valid('param');
      const p = UUID.test(orgId) ? await activeProvider(keel.db, orgId.toLowerCase()) : null;
      return c.json(
        p
          ? { ssoEnabled: true, provider: { id: p.id, name: p.name, type: p.type }, enforceSSO: p.enforceSso, loginUrl: `/api/v1/sso/login/${p.orgId}` }
          : { ssoEnabled: false, provider: null, enforceSSO: false, loginUrl: null },
        200,
      );
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/login/{orgId}', tags, summary: 'Start SSO: redirect to the IdP (OIDC with PKCE, or a SAML AuthnRequest) of the active provider, else of the testing one (a trial)',
      middleware: [perAddress(loginLimit)],
      request: { params: OrgPathSchema, query: LoginQuerySchema },
      responses: { ...redirect('To the identity provider'), ...errors(404) },
    }),
    async (c) => {
      const { orgId } = c.req.valid('param');
      const redirectPath = safeRedirectPath(keel, c.req.valid('query').redirect);
      if (!UUID.test(orgId)) throw noActiveProvider();
      return beginLogin(c, { orgId: orgId.toLowerCase() }, redirectPath);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/login/partner/{partnerSlug}', tags,
      summary: "Start a partner technician's SSO: redirect to the IdP of the partner's active provider, else of its testing one (a trial); callbacks as for organizations",
      middleware: [perAddress(loginLimit)],
      request: { params: PartnerSlugPathSchema, query: LoginQuerySchema },
      responses: { ...redirect('To the identity provider'), ...errors(404) },
    }),
    async (c) => {
      const redirectPath = safeRedirectPath(keel, c.req.valid('query').redirect);
      const partner = await partnerBySlug(keel.db, c.req.valid('param').partnerSlug);
      if (!partner) throw noActiveProvider();
      return beginLogin(c, { partnerId: partner.id }, redirectPath);
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/check/partner/{partnerSlug}', tags,
      summary: "A partner's sign-in page: its name and whether it signs in with SSO (public, rate-limited per address; nothing else of the partner)",
      middleware: [perAddress(partnerPageLimit)],
      request: { params: PartnerSlugPathSchema },
      responses: { 200: json(PartnerCheckSchema, 'The partner\'s sign-in page'), ...errors(404) },
    }),
    async (c) => {
      const partner = await partnerBySlug(keel.db, c.req.valid('param').partnerSlug);
      if (!partner) throw platformError('not_found', { message: 'There is no partner with this sign-in page' });
      const p = await activeProvider(keel.db, { partnerId: partner.id });
      return c.json({ name: partner.name, ssoEnabled: p !== null, providerName: p?.name ?? null }, 200);
    },
  );

  /** Starts a login at the owner's provider: the binding and state cookies, then the redirect to the IdP. */
  async function beginLogin(c: Context<AppEnv>, owner: ProviderOwner, redirectPath: string) {
    // The browser's binding: kept while it is well-formed (parallel logins in two tabs both finish), else new.
    const held = getCookie(c, BINDING_COOKIE);
    const binding = held && /^[A-Za-z0-9_-]{43}$/.test(held) ? held : randomToken();
    const start = await startLogin(keel, owner, redirectPath, sha256Hex(binding));
    setCookie(c, BINDING_COOKIE, binding, {
      httpOnly: true,
      sameSite: 'Lax',
      secure: keel.config.production,
      path: BINDING_COOKIE_PATH,
      maxAge: (SSO_LOGIN_TTL_MS + SSO_EXCHANGE_TTL_MS) / 1000,
    });
    if (start.state) {
      setCookie(c, STATE_COOKIE, stateCookieValue(keel, start.state), {
        httpOnly: true,
        sameSite: 'Lax',
        secure: keel.config.production,
        path: CALLBACK_PATH,
        maxAge: SSO_LOGIN_TTL_MS / 1000,
      });
    }
    return c.redirect(start.location, 302);
  }

  /** Every failure of a callback or the ACS: logged with its reason, answered with only its callback error code. */
  const failed = async (c: Context<AppEnv>, err: unknown) => {
    const failure = err instanceof SsoFailure ? err : new SsoFailure('sso_error', 'unexpected error');
    const info = requestInfo(c);
    const log = requestLog(keel.log, info);
    if (!(err instanceof SsoFailure)) log.error({ error: loggableError(err) }, 'SSO login: unexpected error');
    log.warn({ code: failure.code, reason: failure.reason, providerId: failure.context.providerId }, 'SSO login refused');
    await auditSsoFailure(keel, failure, info);
    const partnerId = failure.context.partnerId;
    const [partner] = partnerId ? await keel.db.select({ slug: partners.slug }).from(partners).where(eq(partners.id, partnerId)) : [];
    return c.redirect(errorLocation(keel, failure.code, failure.context.orgId, partner?.slug), 302);
  };

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/callback', tags, summary: 'OIDC callback: back to the original page with #ssoCode=, or /login?error=<code>',
      request: { query: CallbackQuerySchema },
      responses: { ...redirect('To the application') },
    }),
    async (c) => {
      const cookie = getCookie(c, STATE_COOKIE);
      deleteCookie(c, STATE_COOKIE, { path: CALLBACK_PATH, httpOnly: true, sameSite: 'Lax', secure: keel.config.production });
      try {
        return c.redirect(await oidcCallback(keel, new URL(c.req.url).searchParams, cookie, requestInfo(c)), 302);
      } catch (err) {
        return failed(c, err);
      }
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/sso/saml/acs', tags, summary: 'SAML assertion consumer service (HTTP-POST binding)',
      middleware: [perAddress(acsLimit)],
      request: { body: { required: true, content: { 'application/x-www-form-urlencoded': { schema: AcsFormSchema } } } },
      responses: { ...redirect('To the application'), 415: { description: 'Not a form post', content: { 'application/json': { schema: ErrorSchema } } } },
    }),
    async (c) => {
      if (!/^application\/x-www-form-urlencoded\b/i.test(c.req.header('content-type') ?? '')) {
        throw platformError('unsupported_media_type', { message: 'The ACS takes application/x-www-form-urlencoded' });
      }
      try {
        const form = await c.req.parseBody();
        const text = (v: unknown) => (typeof v === 'string' ? v : undefined);
        return c.redirect(await samlAcs(keel, { SAMLResponse: text(form.SAMLResponse), RelayState: text(form.RelayState) }, requestInfo(c)), 302);
      } catch (err) {
        return failed(c, err);
      }
    },
  );

  api.openapi(
    createRoute({
      method: 'get', path: '/sso/saml/metadata/{providerId}', tags, summary: 'SAML service-provider metadata (XML) for a SAML provider',
      request: { params: ProviderPathSchema },
      responses: { 200: { description: 'SP metadata', content: { 'application/samlmetadata+xml': { schema: z.string().openapi({ description: 'EntityDescriptor XML' }) } } }, ...errors(404) },
    }),
    async (c) => {
      const { providerId } = c.req.valid('param');
      if (!UUID.test(providerId)) throw platformError('not_found', { message: 'SAML provider not found' });
      return c.body(await samlMetadata(keel, providerId.toLowerCase()), 200, { 'Content-Type': 'application/samlmetadata+xml; charset=utf-8' });
    },
  );

  api.openapi(
    createRoute({
      method: 'post', path: '/sso/exchange', tags, summary: 'Exchange the one-time #ssoCode for tokens (2 minutes, single use, any instance)',
      request: { body: jsonBody(ExchangeBodySchema) },
      responses: { 200: json(TokenAnswerSchema, 'Signed in'), ...errors(403, 429) },
    }),
    async (c) => {
      const info = requestInfo(c);
      await exchangeLimit.consume(info.ip ?? 'unknown');
      // A browser must carry the binding cookie of the login. Browsers send Sec-Fetch-Site / Sec-Fetch-Dest
      // (fetch metadata) and, on a POST, Origin; a backend sends none of them. Sec-Fetch-Mode alone is not a
      // browser: Node's own fetch sends `sec-fetch-mode: cors`.
      const fromBrowser = ['sec-fetch-site', 'sec-fetch-dest', 'origin'].some((h) => c.req.header(h) !== undefined);
      const browser = fromBrowser ? { cookie: getCookie(c, BINDING_COOKIE) } : null;
      return c.json(tokenResponse(c, keel, await exchangeCode(keel, c.req.valid('json').code, info, browser)), 200);
    },
  );
  api.openapi(
    createRoute({
      method: 'post', path: '/auth/discover', tags: ['auth'],
      summary: 'Sign-in discovery: what the sign-in page asks next for an email (the same answer for every address of a domain)',
      request: { body: jsonBody(
          z
            .object({ email: z.email().max(255).openapi({ description: 'The address typed into the sign-in page; only its domain is read, never an account', example: 'ada@example.com' }) })
            .openapi('DiscoverRequest', { example: { email: 'ada@example.com' } }),
        ) },
      responses: { 200: json(DiscoverSchema), ...errors(429) },
    }),
    async (c) => c.json(await discoverSignIn(keel, c.req.valid('json').email, requestInfo(c).ip), 200),
  );
}

const DiscoverSchema = z
  .object({
    method: z.enum(['password', 'sso']).openapi({ description: '`sso` when the email\'s domain is verified by an organisation with an active SSO provider (go to `loginUrl`); else `password`' }),
    loginUrl: z.string().optional().openapi({ description: 'With `sso`: where single sign-on starts (GET /sso/login/{orgId})', example: 'https://keel.example.com/api/v1/sso/login/0b3e6f0e-8c1a-4d8e-9d41-3c2f5b7a9e10' }),
    passwordAllowed: z.boolean().openapi({ description: 'False when the provider enforces SSO (a password sign-in would be refused with 403 `sso_required`)' }),
    passkey: z.boolean().openapi({ description: 'True when this deployment offers passkey sign-in (POST /auth/passkey/options); the same for every address' }),
  })
  .openapi('SignInDiscovery', { example: { method: 'sso', loginUrl: 'https://keel.example.com/api/v1/sso/login/0b3e6f0e-8c1a-4d8e-9d41-3c2f5b7a9e10', passwordAllowed: false, passkey: true } });

