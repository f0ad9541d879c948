/**
 * Real identity providers for the SSO tests, on 127.0.0.1:
 * - `startOidcIdp`: oidc-provider (a certified OpenID provider) with its development interactions
 *   (login form, consent form); accounts are whatever the test puts in `accounts`.
 * - `Browser`: a cookie jar that follows redirects and submits the IdP's forms, as a browser would.
 * - `samlifyIdp`: samlify as a SAML identity provider answering Keel's AuthnRequests.
 */
import { createServer, type Server } from 'node:http';
import Provider from 'oidc-provider';
import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { freePort, type TestApp } from '../helpers/app.js';

export interface IdpAccount {
  sub: string;
  email?: string;
  name?: string;
  given_name?: string;
  family_name?: string;
  groups?: string[];
  /** How the IdP says it authenticated this account (the ID token's `amr` and `acr`). */
  amr?: string[];
  acr?: string;
  /** `true` unless the test says otherwise (an IdP that marks the address unverified). */
  email_verified?: boolean;
}

export interface OidcIdp {
  issuer: string;
  clientId: string;
  clientSecret: string;
  accounts: Map<string, IdpAccount>;
  /** Requests the IdP received (path only), to prove what Keel called. */
  seen: string[];
  close(): Promise<void>;
}

export async function startOidcIdp(opts: { redirectUri: string; clientId?: string; clientSecret?: string }): Promise<OidcIdp> {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  const clientId = opts.clientId ?? 'keel-test-client';
  const clientSecret = opts.clientSecret ?? 'idp-client-secret-' + Math.random().toString(36).slice(2);
  const accounts = new Map<string, IdpAccount>();
  const provider = new Provider(issuer, {
    clients: [{ client_id: clientId, client_secret: clientSecret, redirect_uris: [opts.redirectUri], grant_types: ['authorization_code'], response_types: ['code'] }],
    cookies: { keys: ['test-cookie-key-0123456789'] },
    scopes: ['openid', 'profile', 'email', 'groups'],
    claims: { openid: ['sub', 'amr', 'acr'], email: ['email', 'email_verified'], profile: ['name', 'given_name', 'family_name'], groups: ['groups'] },
    findAccount: (_ctx, id) => {
      const account = accounts.get(id);
      if (!account) return undefined;
      const { amr: _amr, acr: _acr, ...claims } = account;
      return { accountId: id, claims: () => ({ email_verified: true, ...claims }) };
    },
    pkce: { required: () => true },
    acrValues: ['urn:keel:test:pwd', 'urn:keel:test:mfa'],
  });
  // The development login form knows no authentication methods: the account's amr/acr go into the login result.
  const finish = provider.interactionFinished.bind(provider);
  provider.interactionFinished = (req, res, result, options) => {
    const login = (result as { login?: { accountId: string; amr?: string[]; acr?: string } }).login;
    const account = login ? accounts.get(login.accountId) : undefined;
    if (login && account?.amr) login.amr = account.amr;
    if (login && account?.acr) login.acr = account.acr;
    return finish(req, res, result, options);
  };
  const seen: string[] = [];
  const callback = provider.callback();
  const server: Server = createServer((req, res) => {
    seen.push((req.url ?? '').split('?')[0] ?? '');
    callback(req, res);
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    issuer,
    clientId,
    clientSecret,
    accounts,
    seen,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

/** A browser: a cookie jar per host:port, redirects followed by hand, IdP forms submitted. */
export class Browser {
  readonly jar = new Map<string, Map<string, string>>();
  constructor(private readonly app: Pick<TestApp, 'ip'>) {}

  /** Keel's public URL (localhost) is reached on its loopback address. */
  #target(url: string): URL {
    const u = new URL(url);
    if (u.hostname === 'localhost') u.hostname = '127.0.0.1';
    return u;
  }

  cookieHeader(u: URL): string {
    return [...(this.jar.get(u.host)?.entries() ?? [])].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  setCookie(host: string, name: string, value: string): void {
    const m = this.jar.get(host) ?? new Map<string, string>();
    m.set(name, value);
    this.jar.set(host, m);
  }

  async fetch(url: string, init: { method?: string; form?: Record<string, string> } = {}): Promise<Response> {
    const u = this.#target(url);
    const headers: Record<string, string> = { 'x-forwarded-for': this.app.ip };
    const cookies = this.cookieHeader(u);
    if (cookies) headers.cookie = cookies;
    let body: string | undefined;
    if (init.form) {
      body = new URLSearchParams(init.form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    }
    const res = await fetch(u, { method: init.method ?? (body ? 'POST' : 'GET'), headers, redirect: 'manual', ...(body ? { body } : {}) });
    for (const line of res.headers.getSetCookie()) {
      const [pair = ''] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      if (/max-age=0|expires=thu, 01 jan 1970/i.test(line) || value === '') this.jar.get(u.host)?.delete(name);
      else this.setCookie(u.host, name, value);
    }
    return res;
  }

  /**
   * Follows redirects from `url`, signing in at the IdP as `login` and consenting, until a redirect
   * leaves for a URL under `stopAt` (Keel's public URL outside /api/v1/sso/callback): returns that URL.
   */
  async signInAt(url: string, login: string, stopAt: (location: string) => boolean): Promise<{ location: string; steps: string[] }> {
    let next = url;
    const steps: string[] = [];
    for (let i = 0; i < 20; i++) {
      steps.push(next);
      const res = await this.fetch(next);
      if (res.status >= 300 && res.status < 400) {
        const location = new URL(res.headers.get('location') ?? '', next).href;
        await res.text();
        if (stopAt(location)) return { location, steps };
        next = location;
        continue;
      }
      const html = await res.text();
      if (res.status !== 200) throw new Error(`unexpected ${res.status} at ${next}: ${html.slice(0, 300)}`);
      const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
      if (!action) throw new Error(`no form at ${next}: ${html.slice(0, 300)}`);
      const prompt = /name="prompt" value="(\w+)"/.exec(html)?.[1] ?? 'login';
      const form: Record<string, string> = prompt === 'login' ? { prompt, login, password: 'any' } : { prompt };
      const post = await this.fetch(new URL(action, next).href, { form });
      await post.text();
      if (post.status < 300 || post.status >= 400) throw new Error(`form post answered ${post.status}`);
      next = new URL(post.headers.get('location') ?? '', next).href;
    }
    throw new Error(`too many steps: ${steps.join(' → ')}`);
  }
}

export { Provider };

/**
 * samlify (a real SAML implementation) as the identity provider: it reads Keel's SP metadata, parses
 * Keel's AuthnRequest from the redirect URL and builds its own signed login response (RSA-SHA256; the
 * assertion signed because Keel's metadata asks for it). samlify needs a schema validator; the IdP side
 * of a test takes a permissive one (Keel itself keeps node-saml).
 */
/** The part of samlify used here (its own typings pull in the DOM library through @xmldom/xmldom, which Keel's typecheck excludes). */
interface Samlify {
  setSchemaValidator(v: { validate: (xml: string) => Promise<string> }): void;
  Constants: { namespace: { binding: { redirect: string }; format: { emailAddress: string } } };
  IdentityProvider(settings: Record<string, unknown>): {
    parseLoginRequest(sp: unknown, binding: 'redirect', req: { query: Record<string, string> }): Promise<{ extract: { request: { id: string } } }>;
    createLoginResponse(
      sp: unknown,
      request: unknown,
      binding: 'post',
      user: { email: string },
      customTagReplacement?: (template: string) => { id: string; context: string },
    ): Promise<{ context: string }>;
  };
  ServiceProvider(settings: Record<string, unknown>): unknown;
  SamlLib: {
    defaultLoginResponseTemplate: { context: string };
    replaceTagsByValue(xml: string, values: Record<string, string>): string;
  };
}
const samlify = createRequire(import.meta.url)('samlify') as Samlify;
samlify.setSchemaValidator({ validate: () => Promise.resolve('skipped') });

export interface SamlResponseOptions {
  /** Sign the whole response around an unsigned assertion (an IdP option many offer). */
  signWholeResponseOnly?: boolean;
  /** An AttributeStatement with these attributes (names as the IdP sends them: URIs, OIDs). */
  attributes?: { name: string; values: string[] }[];
  /** An AuthnStatement naming this AuthnContextClassRef (how the person authenticated at the IdP). */
  authnContextClassRef?: string;
}

export interface SamlIdp {
  /** samlify's base64 HTTP-POST answer to the AuthnRequest in `loginLocation` (Keel's redirect to the IdP). */
  respond(loginLocation: URL, user: { email: string }, opts?: SamlResponseOptions): Promise<string>;
}

const xmlText = (v: string) => v.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/**
 * samlify's login-response template with an AuthnStatement and an AttributeStatement, as an IdP
 * configured with attribute release fills it in (samlify leaves both to the IdP's template); samlify
 * still parses the request and signs. The values are samlify's own tags, filled as it fills them.
 */
function customResponse(o: SamlResponseOptions, ctx: { requestId: string; acs: string; spEntity: string; idpEntity: string; email: string }) {
  return (template: string): { id: string; context: string } => {
    const authn = o.authnContextClassRef
      ? `<saml:AuthnStatement AuthnInstant="{IssueInstant}" SessionIndex="{AssertionID}"><saml:AuthnContext><saml:AuthnContextClassRef>${xmlText(o.authnContextClassRef)}</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>`
      : '';
    const attributes = (o.attributes ?? [])
      .map((a) => `<saml:Attribute Name="${xmlText(a.name)}">${a.values.map((v) => `<saml:AttributeValue>${xmlText(v)}</saml:AttributeValue>`).join('')}</saml:Attribute>`)
      .join('');
    const filled = template.replace('{AuthnStatement}', authn).replace('{AttributeStatement}', attributes ? `<saml:AttributeStatement>${attributes}</saml:AttributeStatement>` : '');
    const id = `_${randomUUID()}`;
    const now = new Date();
    const later = new Date(now.getTime() + 5 * 60_000).toISOString();
    const context = samlify.SamlLib.replaceTagsByValue(filled, {
      ID: id,
      AssertionID: `_${randomUUID()}`,
      Destination: ctx.acs,
      Audience: ctx.spEntity,
      SubjectRecipient: ctx.acs,
      Issuer: ctx.idpEntity,
      IssueInstant: now.toISOString(),
      StatusCode: 'urn:oasis:names:tc:SAML:2.0:status:Success',
      ConditionsNotBefore: now.toISOString(),
      ConditionsNotOnOrAfter: later,
      SubjectConfirmationDataNotOnOrAfter: later,
      NameIDFormat: samlify.Constants.namespace.format.emailAddress,
      NameID: ctx.email,
      InResponseTo: ctx.requestId,
    });
    return { id, context };
  };
}

export function samlifyIdp(o: { entityId: string; ssoUrl: string; cert: string; key: string; spMetadata: string }): SamlIdp {
  const idp = samlify.IdentityProvider({
    entityID: o.entityId,
    signingCert: o.cert,
    privateKey: o.key,
    singleSignOnService: [{ Binding: samlify.Constants.namespace.binding.redirect, Location: o.ssoUrl }],
    nameIDFormat: [samlify.Constants.namespace.format.emailAddress],
  });
  const sp = samlify.ServiceProvider({ metadata: o.spMetadata });
  // The same SP with assertions unsigned but the whole response signed (an IdP option many offer).
  const spWholeResponse = samlify.ServiceProvider({ metadata: o.spMetadata.replace('WantAssertionsSigned="true"', 'WantAssertionsSigned="false"'), wantMessageSigned: true });
  return {
    async respond(loginLocation, user, opts = {}) {
      const target = opts.signWholeResponseOnly ? spWholeResponse : sp;
      const request = await idp.parseLoginRequest(target, 'redirect', { query: Object.fromEntries(loginLocation.searchParams) });
      if (!opts.attributes && !opts.authnContextClassRef) return (await idp.createLoginResponse(target, request, 'post', user)).context;
      const acs = /AssertionConsumerService[^>]*Location="([^"]+)"/.exec(o.spMetadata)?.[1] ?? '';
      const spEntity = /entityID="([^"]+)"/.exec(o.spMetadata)?.[1] ?? '';
      const replace = customResponse(opts, { requestId: request.extract.request.id, acs, spEntity, idpEntity: o.entityId, email: user.email });
      return (await idp.createLoginResponse(target, request, 'post', user, replace)).context;
    },
  };
}
