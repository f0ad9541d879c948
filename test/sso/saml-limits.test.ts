/**
 * What anonymous callers can make Keel spend on SSO (docs/decisions.md "Organisation SSO: SAML checks,
 * login binding and unauthenticated limits"): `/sso/login` and the ACS limited per address, live login
 * sessions capped per provider, and a posted SAMLResponse measured and scanned before any XML parser.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { generate } from 'selfsigned';
import { backendAvailable } from '../helpers/app.js';
import { clock } from '../../src/platform/clock.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { ssoWorld, type SsoWorld } from './helpers.js';

const LOGIN_LIMIT = 4;
const ACS_LIMIT = 3;
const OUTSTANDING = 6;
let lastOctet = 0;
/** A client address of its own for each use (the limits count per address). */
const address = () => `10.250.${Math.floor(Math.random() * 250)}.${++lastOctet}`;

describe.skipIf(!backendAvailable())('SSO: limits on what anonymous callers spend', () => {
  let w: SsoWorld;

  beforeAll(async () => {
    w = await ssoWorld({ env: { SSO_LOGIN_LIMIT: String(LOGIN_LIMIT), SAML_ACS_LIMIT: String(ACS_LIMIT), SSO_LOGIN_OUTSTANDING_LIMIT: String(OUTSTANDING) } });
    const pems = await generate([{ name: 'commonName', value: 'Limits IdP' }], { keySize: 2048, algorithm: 'sha256' });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'IdP', type: 'saml', entityId: 'https://idp.example.test/limits', ssoUrl: 'https://idp.example.test/sso', certificate: pems.cert, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect(created.status).toBe(201);
    expect((await w.api('POST', `/sso/providers/${created.body.id}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
  }, 60_000);
  afterAll(async () => w?.app.close());
  afterEach(() => clock.reset());

  const start = (ip: string) => w.app.api('GET', `/sso/login/${w.tenant.orgId}`, { headers: { 'x-forwarded-for': ip } });
  const acs = (ip: string, SAMLResponse: string) =>
    w.app.request('POST', '/api/v1/sso/saml/acs', {
      raw: new URLSearchParams({ SAMLResponse }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': ip },
    });
  const lastReason = (): string => {
    const line = w.logs.text.filter((l) => l.includes('SSO login refused')).at(-1);
    return line ? (JSON.parse(line) as { reason?: string }).reason ?? '' : '';
  };
  const b64 = (xml: string) => Buffer.from(xml).toString('base64');

  it('/sso/login: the (N+1)-th start from one address is 429 with Retry-After; another address still starts', async () => {
    const ip = address();
    for (let i = 0; i < LOGIN_LIMIT; i++) expect((await start(ip)).status).toBe(302);
    const refused = await start(ip);
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await start(address())).status).toBe(302);
  });

  it('live login sessions are capped per provider: a start beyond the cap is 429 sso_logins_outstanding until sessions expire', async () => {
    clock.advance(11 * 60_000); // the sessions of the other tests have expired
    for (let i = 0; i < OUTSTANDING; i++) expect((await start(address())).status).toBe(302);
    const refused = await start(address());
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('sso_logins_outstanding');
    expect(refused.headers.get('retry-after')).toBe('60');
    clock.advance(11 * 60_000);
    expect((await start(address())).status).toBe(302);
  });

  it('the ACS: the (N+1)-th post from one address is 429 with Retry-After', async () => {
    const ip = address();
    for (let i = 0; i < ACS_LIMIT; i++) expect((await acs(ip, b64('<x/>'))).status).toBe(302);
    const refused = await acs(ip, b64('<x/>'));
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe('rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('an oversized SAMLResponse is 400 at the edge, before any XML parsing', async () => {
    const big = b64(`<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol">${'<a/>'.repeat(50_000)}</samlp:Response>`);
    expect(big.length).toBeGreaterThan(256 * 1024);
    const res = await acs(address(), big);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'validation_failed', details: { fields: [{ path: 'form.SAMLResponse' }] } });
  });

  it('the scan before parsing refuses a DOCTYPE, too many elements, deep nesting and what is not base64', async () => {
    const cases: [string, string][] = [
      [b64('<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]><samlp:Response>&b;</samlp:Response>'), 'saml: DOCTYPE or other declaration refused'],
      [b64(`<samlp:Response>${'<a/>'.repeat(6000)}</samlp:Response>`), 'saml: more than 5000 elements'],
      [b64(`<samlp:Response>${'<a>'.repeat(40)}${'</a>'.repeat(40)}</samlp:Response>`), 'saml: elements nested deeper than 32'],
      ['<samlp:Response/>', 'saml: SAMLResponse is not base64'],
    ];
    for (const [body, reason] of cases) {
      const res = await acs(address(), body);
      expect(res.status).toBe(302);
      expect(res.headers.get('location')).toBe(`${w.app.publicUrl}/login?error=sso_error`);
      expect(lastReason()).toBe(reason);
    }
  });
});
