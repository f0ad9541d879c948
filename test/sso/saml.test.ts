/**
 * SAML 2.0 service provider (docs/decisions.md "SSO shapes"): a test IdP signs real
 * responses (xml-crypto, RSA-SHA256, a certificate generated here with selfsigned) and posts them to
 * the ACS as a browser would. Acceptance (assertion signed, or response signed), and refusal of an
 * unsigned response, a tampered assertion, signature wrapping, a wrong audience, an expired assertion,
 * another key, an unknown InResponseTo and a replayed assertion id.
 */
import { randomBytes } from 'node:crypto';
import { inflateRawSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from 'selfsigned';
import { SignedXml } from 'xml-crypto';
import { backendAvailable } from '../helpers/app.js';
import { cookie, createUser, jwtClaims, uniqueEmail } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';
import { samlifyIdp, type SamlIdp, type SamlResponseOptions } from './idp.js';

const IDP_ENTITY = 'https://idp.example.test/entity';
const IDP_SSO_URL = 'https://idp.example.test/sso';
const C = 'http://schemas.xmlsoap.org/ws/2005/05/identity/claims';

interface Keys {
  cert: string;
  key: string;
}

async function keys(): Promise<Keys> {
  const pems = await generate([{ name: 'commonName', value: 'Test IdP' }], { keySize: 2048, algorithm: 'sha256' });
  return { cert: pems.cert, key: pems.private };
}

const iso = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString();
const id = () => `_${randomBytes(16).toString('hex')}`;

interface AssertionOptions {
  inResponseTo: string;
  audience: string;
  acs: string;
  email: string;
  assertionId?: string;
  notOnOrAfterMs?: number;
  groups?: string[];
  issuer?: string;
  /** SubjectConfirmationData@Recipient (default `acs`). */
  recipient?: string;
  /** SubjectConfirmationData@InResponseTo; null leaves it out (an IdP-initiated assertion). */
  subjectInResponseTo?: string | null;
  authnContext?: string;
}

function assertionXml(o: AssertionOptions): string {
  const until = iso(o.notOnOrAfterMs ?? 5 * 60_000);
  const groups = (o.groups ?? []).map((g) => `<saml:AttributeValue>${g}</saml:AttributeValue>`).join('');
  return `<saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="${o.assertionId ?? id()}" Version="2.0" IssueInstant="${iso(0)}">` +
    `<saml:Issuer>${o.issuer ?? IDP_ENTITY}</saml:Issuer>` +
    `<saml:Subject><saml:NameID Format="urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress">${o.email}</saml:NameID>` +
    `<saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer"><saml:SubjectConfirmationData${o.subjectInResponseTo === null ? '' : ` InResponseTo="${o.subjectInResponseTo ?? o.inResponseTo}"`} NotOnOrAfter="${until}" Recipient="${o.recipient ?? o.acs}"/></saml:SubjectConfirmation></saml:Subject>` +
    `<saml:Conditions NotBefore="${iso(-60_000)}" NotOnOrAfter="${until}"><saml:AudienceRestriction><saml:Audience>${o.audience}</saml:Audience></saml:AudienceRestriction></saml:Conditions>` +
    `<saml:AuthnStatement AuthnInstant="${iso(0)}" SessionIndex="${id()}"><saml:AuthnContext><saml:AuthnContextClassRef>${o.authnContext ?? 'urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport'}</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>` +
    `<saml:AttributeStatement>` +
    `<saml:Attribute Name="${C}/emailaddress"><saml:AttributeValue>${o.email}</saml:AttributeValue></saml:Attribute>` +
    `<saml:Attribute Name="${C}/givenname"><saml:AttributeValue>Grace</saml:AttributeValue></saml:Attribute>` +
    `<saml:Attribute Name="urn:oid:2.5.4.4"><saml:AttributeValue>Hopper</saml:AttributeValue></saml:Attribute>` +
    (groups ? `<saml:Attribute Name="http://schemas.microsoft.com/ws/2008/06/identity/claims/groups">${groups}</saml:Attribute>` : '') +
    `</saml:AttributeStatement></saml:Assertion>`;
}

function responseXml(inResponseTo: string, destination: string, assertion: string): string {
  return `<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion" ID="${id()}" Version="2.0" IssueInstant="${iso(0)}" Destination="${destination}" InResponseTo="${inResponseTo}">` +
    `<saml:Issuer>${IDP_ENTITY}</saml:Issuer><samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/></samlp:Status>` +
    assertion + `</samlp:Response>`;
}

const RSA_SHA256 = 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256';
const SHA256 = 'http://www.w3.org/2001/04/xmlenc#sha256';
const RSA_SHA1 = 'http://www.w3.org/2000/09/xmldsig#rsa-sha1';
const SHA1 = 'http://www.w3.org/2000/09/xmldsig#sha1';

/** Signs the element `what` (Assertion or Response) of `xml` (RSA-SHA256 unless told), the signature placed after its Issuer. */
function sign(xml: string, what: 'Assertion' | 'Response', k: Keys, alg: { signature: string; digest: string } = { signature: RSA_SHA256, digest: SHA256 }): string {
  const sig = new SignedXml({ privateKey: k.key, publicCert: k.cert, signatureAlgorithm: alg.signature, canonicalizationAlgorithm: 'http://www.w3.org/2001/10/xml-exc-c14n#' });
  sig.addReference({
    xpath: `//*[local-name(.)='${what}']`,
    digestAlgorithm: alg.digest,
    transforms: ['http://www.w3.org/2000/09/xmldsig#enveloped-signature', 'http://www.w3.org/2001/10/xml-exc-c14n#'],
  });
  sig.computeSignature(xml, { prefix: 'ds', location: { reference: `//*[local-name(.)='${what}']/*[local-name(.)='Issuer']`, action: 'after' } });
  return sig.getSignedXml();
}

describe.skipIf(!backendAvailable())('SAML service provider', () => {
  let w: SsoWorld;
  let idpKeys: Keys;
  let otherKeys: Keys;
  let providerId: string;
  let acs: string;
  let spEntity: string;
  let samlIdp: SamlIdp;

  beforeAll(async () => {
    w = await ssoWorld();
    [idpKeys, otherKeys] = await Promise.all([keys(), keys()]);
    acs = `${w.app.publicUrl}/api/v1/sso/saml/acs`;
    spEntity = `${w.app.publicUrl}/api/v1/sso/saml/metadata`;
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'ADFS', type: 'saml', preset: 'federation-server-saml', entityId: IDP_ENTITY, ssoUrl: IDP_SSO_URL, certificate: idpKeys.cert, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect(created.status).toBe(201);
    providerId = created.body.id;
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    const metadata = await w.app.request('GET', `/api/v1/sso/saml/metadata/${providerId}`);
    samlIdp = samlifyIdp({ entityId: IDP_ENTITY, ssoUrl: IDP_SSO_URL, cert: idpKeys.cert, key: idpKeys.key, spMetadata: metadata.body as string });
  }, 60_000);
  afterAll(async () => w?.app.close());

  /** Why the last refusal happened, as logged (the URL carries only the code). */
  const lastReason = (): string => {
    const line = w.logs.text.filter((l) => l.includes('SSO login refused')).at(-1);
    return line ? (JSON.parse(line) as { reason: string }).reason : '';
  };

  /** `/sso/login/:orgId` as a browser: the AuthnRequest's ID, where the IdP is asked to post, the binding cookie. */
  async function startLogin(): Promise<{ requestId: string; acsUrl: string; location: URL; binding: { value: string; attributes: string } }> {
    const res = await w.app.api('GET', `/sso/login/${w.tenant.orgId}?redirect=/reports`);
    expect(res.status).toBe(302);
    const binding = cookie(res.cookies, 'service_sso_binding')!;
    const location = new URL(res.headers.get('location')!);
    expect(`${location.origin}${location.pathname}`).toBe(IDP_SSO_URL);
    const request = inflateRawSync(Buffer.from(location.searchParams.get('SAMLRequest')!, 'base64')).toString();
    return { requestId: /ID="([^"]+)"/.exec(request)![1]!, acsUrl: /AssertionConsumerServiceURL="([^"]+)"/.exec(request)![1]!, location, binding };
  }

  /** Posts a response to the ACS as the IdP's auto-submitting form would. */
  async function post(xml: string): Promise<string> {
    return postBase64(Buffer.from(xml).toString('base64'));
  }

  async function postBase64(SAMLResponse: string): Promise<string> {
    const res = await w.app.request('POST', '/api/v1/sso/saml/acs', {
      raw: new URLSearchParams({ SAMLResponse, RelayState: '' }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(res.status).toBe(302);
    return res.headers.get('location')!;
  }

  const failed = (code: string) => `${w.app.publicUrl}/login?error=${code}`;

  async function signedLogin(opts: Partial<AssertionOptions> & { email: string }, what: 'Assertion' | 'Response' = 'Assertion', k = idpKeys) {
    const { requestId } = await startLogin();
    const a = assertionXml({ inResponseTo: requestId, audience: spEntity, acs, ...opts });
    const xml = what === 'Assertion' ? responseXml(requestId, acs, sign(a, 'Assertion', k)) : sign(responseXml(requestId, acs, a), 'Response', k);
    return { requestId, xml, location: await post(xml) };
  }

  it('SP metadata: entity id, ACS by HTTP-POST, email NameID, WantAssertionsSigned', async () => {
    const res = await w.app.request('GET', `/api/v1/sso/saml/metadata/${providerId}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/samlmetadata\+xml/);
    const xml = res.body as string;
    expect(xml).toContain(`entityID="${spEntity}"`);
    expect(xml).toMatch(new RegExp(`AssertionConsumerService[^>]*Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST"[^>]*Location="${acs}"`));
    expect(xml).toContain('urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress');
    expect(xml).toContain('WantAssertionsSigned="true"');
    expect((await w.app.request('GET', `/api/v1/sso/saml/metadata/${crypto.randomUUID()}`)).status).toBe(404);
  });

  it('the AuthnRequest goes by HTTP-Redirect, names Keel as issuer and the ACS', async () => {
    const { acsUrl, location } = await startLogin();
    expect(acsUrl).toBe(acs);
    const request = inflateRawSync(Buffer.from(location.searchParams.get('SAMLRequest')!, 'base64')).toString();
    expect(request).toContain(`>${spEntity}</saml:Issuer>`);
  });

  /** samlify's answer to a fresh login, posted to the ACS: where Keel sends the browser. */
  async function samlifyLogin(email: string, opts: SamlResponseOptions = {}): Promise<string> {
    const { location } = await startLogin();
    return postBase64(await samlIdp.respond(location, { email }, opts));
  }
  /** The claim URIs an AD FS or Entra ID IdP releases. */
  const releasedAttributes = (email: string, groups: string[]) => [
    { name: `${C}/emailaddress`, values: [email] },
    { name: `${C}/givenname`, values: ['Grace'] },
    { name: 'urn:oid:2.5.4.4', values: ['Hopper'] },
    { name: 'http://schemas.microsoft.com/ws/2008/06/identity/claims/groups', values: groups },
  ];

  it('samlify as the IdP releasing attributes: a signed assertion signs in, URI attributes mapped, user provisioned, back to the page with #ssoCode', async () => {
    const email = uniqueEmail('saml');
    const location = await samlifyLogin(email, { attributes: releasedAttributes(email, ['g1', 'g2']) });
    expect(location.startsWith(`${w.app.publicUrl}/reports#ssoCode=`)).toBe(true);
    const ex = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(location) } });
    expect(ex.status).toBe(200);
    expect(ex.body.user).toMatchObject({ email, name: 'Grace Hopper', orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id });
  });

  it("samlify as the IdP: its default response (emailAddress NameID, no attributes) signs in, the NameID being the email", async () => {
    const { location } = await startLogin();
    const email = `cora.${randomBytes(4).toString('hex')}@c.example`;
    const landed = await postBase64(await samlIdp.respond(location, { email }));
    expect(landed.startsWith(`${w.app.publicUrl}/reports#ssoCode=`)).toBe(true);
    const ex = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(landed) } });
    expect(ex.status).toBe(200);
    expect(ex.body.user).toMatchObject({ email, name: email, orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id });
  });

  it('a SAML provider in testing is a trial through samlify: an organisation administrator signs in, a member is refused with provider_testing (docs/decisions.md "SSO that explains itself")', async () => {
    const admin = await createUser(w.app, { email: uniqueEmail('saml-trial-admin'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const member = await createUser(w.app, { email: uniqueEmail('saml-trial-member'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'testing' } })).status).toBe(200);
    try {
      const accepted = await samlifyLogin(admin.email);
      expect(accepted.startsWith(`${w.app.publicUrl}/reports#ssoCode=`), accepted).toBe(true);
      const ex = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(accepted) } });
      expect(ex.body.user).toMatchObject({ id: admin.id, roleId: SYSTEM_ROLES.orgAdmin.id });
      expect(await samlifyLogin(member.email)).toBe(`${w.app.publicUrl}/login?error=provider_testing&org=${w.tenant.orgId}`);
      const audit = await w.api('GET', '/audit-logs?action=sso.login.trial&limit=100', { token: w.adminToken });
      expect((audit.body.data as { targetId: string; result: string }[]).map((e) => `${e.targetId}:${e.result}`).sort()).toEqual([`${admin.id}:success`, `${member.id}:failure`].sort());
    } finally {
      await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } });
    }
  });

  it('samlify as the IdP signing the whole response around an unsigned assertion signs in too; an existing user is linked', async () => {
    const existing = await createUser(w.app, { email: uniqueEmail('samlx'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgTechnician.id } });
    const { location } = await startLogin();
    const xml = Buffer.from(await samlIdp.respond(location, { email: existing.email }, { signWholeResponseOnly: true }), 'base64').toString();
    expect(xml.indexOf('<ds:Signature')).toBeLessThan(xml.indexOf('<saml:Assertion')); // the response's signature, none inside the assertion
    expect(xml.match(/<ds:Signature[\s>]/g)).toHaveLength(1);
    const landed = await post(xml);
    const ex = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(landed) } });
    expect(ex.body.user.id).toBe(existing.id);
  });

  it("an AuthnContextClassRef of the provider's mfaAcrValues gives an mfa: true session; PasswordProtectedTransport does not", async () => {
    const mfaRef = 'http://schemas.microsoft.com/claims/multipleauthn';
    const set = await w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body: { mfaAcrValues: [mfaRef] } });
    expect(set.status).toBe(200);
    try {
      const email = uniqueEmail('samlmfa');
      const strong = await samlifyLogin(email, { authnContextClassRef: mfaRef });
      const ex = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(strong) } });
      expect(ex.status).toBe(200);
      expect(jwtClaims(ex.body.accessToken).mfa).toBe(true);
      const weak = await samlifyLogin(email, { authnContextClassRef: 'urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport' });
      const ex2 = await w.app.api('POST', '/sso/exchange', { body: { code: ssoCodeOf(weak) } });
      expect(jwtClaims(ex2.body.accessToken).mfa).toBe(false);
    } finally {
      await w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body: { mfaAcrValues: [] } });
    }
  });

  it('refuses an unsigned response', async () => {
    const { requestId } = await startLogin();
    expect(await post(responseXml(requestId, acs, assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: uniqueEmail('unsigned') })))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Invalid signature');
  });

  it('refuses a tampered assertion (the email changed after signing)', async () => {
    const { requestId } = await startLogin();
    const honest = uniqueEmail('honest');
    const signed = sign(assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: honest }), 'Assertion', idpKeys);
    const tampered = signed.split(honest).join('ceo@example.com');
    expect(tampered).not.toBe(signed);
    expect(await post(responseXml(requestId, acs, tampered))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Invalid signature');
  });

  it('refuses signature wrapping: a forged assertion carrying the signed one inside, or beside it', async () => {
    const { requestId } = await startLogin();
    const signed = sign(assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: uniqueEmail('victim') }), 'Assertion', idpKeys);
    const forged = assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: 'attacker@example.com' });
    // Variant 1: the signed assertion hidden inside the forged one's Subject.
    const nested = forged.replace('</saml:Subject>', `${signed}</saml:Subject>`);
    expect(await post(responseXml(requestId, acs, nested))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Invalid signature');
    // Variant 2: both side by side (the signature still verifies for the original).
    const { requestId: second } = await startLogin();
    const signed2 = sign(assertionXml({ inResponseTo: second, audience: spEntity, acs, email: uniqueEmail('victim2') }), 'Assertion', idpKeys);
    const forged2 = assertionXml({ inResponseTo: second, audience: spEntity, acs, email: 'attacker@example.com' });
    expect(await post(responseXml(second, acs, forged2 + signed2))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Invalid signature: multiple assertions');
  });

  it('refuses a wrong audience, an expired assertion and a signature by another key', async () => {
    expect((await signedLogin({ email: uniqueEmail('aud'), audience: 'https://other-sp.example/' })).location).toBe(failed('sso_error'));
    expect(lastReason()).toMatch(/audience mismatch/);
    expect((await signedLogin({ email: uniqueEmail('old'), notOnOrAfterMs: -5 * 60_000 })).location).toBe(failed('sso_error'));
    expect(lastReason()).toMatch(/No valid subject confirmation/); // its NotOnOrAfter has passed
    expect((await signedLogin({ email: uniqueEmail('key') }, 'Assertion', otherKeys)).location).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Invalid signature');
  });

  it("refuses an assertion whose Issuer is not the provider's entityId (even signed with its key)", async () => {
    expect((await signedLogin({ email: uniqueEmail('iss'), issuer: 'https://impostor.example/' })).location).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: issuer is not the provider entity id');
  });

  it('refuses an unknown InResponseTo (unsolicited or forged) as session_expired', async () => {
    const made = id();
    const xml = responseXml(made, acs, sign(assertionXml({ inResponseTo: made, audience: spEntity, acs, email: uniqueEmail('unsol') }), 'Assertion', idpKeys));
    expect(await post(xml)).toBe(failed('session_expired'));
    expect(lastReason()).toBe('saml: InResponseTo is not valid');
  });

  /** A response to `requestId` with an assertion signed by the IdP, both shaped by `o`. */
  const signedResponse = (requestId: string, o: Partial<AssertionOptions> & { destination?: string } = {}) =>
    responseXml(requestId, o.destination ?? acs, sign(assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: uniqueEmail('saml7'), ...o }), 'Assertion', idpKeys));

  it('refuses a Response whose Destination is not the ACS URL (assertion signed, or the response itself signed)', async () => {
    const { requestId, location } = await startLogin();
    expect(await post(signedResponse(requestId, { destination: 'https://evil.example/acs' }))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Destination is not the ACS URL');
    const signedWhole = sign(responseXml(requestId, 'https://evil.example/acs', assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: uniqueEmail('dest') })), 'Response', idpKeys);
    expect(await post(signedWhole)).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Destination is not the ACS URL');
    // The login session is still there: the IdP's right response signs in.
    expect(ssoCodeOf(await postBase64(await samlIdp.respond(location, { email: uniqueEmail('dest') })))).toBeTruthy();
  });

  it('refuses an assertion whose SubjectConfirmationData Recipient is not the ACS URL', async () => {
    const { requestId } = await startLogin();
    expect(await post(signedResponse(requestId, { recipient: 'https://evil.example/acs' }))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: Recipient is not the ACS URL');
  });

  it("refuses an unsolicited assertion (no InResponseTo in its signed subject confirmation) even when the unsigned Response@InResponseTo names another person's live login", async () => {
    const victim = await startLogin();
    // The attacker's own IdP-initiated assertion, wrapped in a response naming the victim's request.
    expect(await post(signedResponse(victim.requestId, { subjectInResponseTo: null }))).toBe(failed('session_expired'));
    expect(lastReason()).toBe('saml: unsolicited assertion (no InResponseTo in its subject confirmation)');
    // An assertion answering another request is refused too.
    const other = await startLogin();
    expect(await post(signedResponse(victim.requestId, { subjectInResponseTo: other.requestId }))).toBe(failed('sso_error'));
    expect(lastReason()).toBe('saml: InResponseTo does not match subjectInResponseTo');
    // The victim's login session was neither used nor spent: the victim's own answer still signs in, once.
    const own = signedResponse(victim.requestId);
    const location = await post(own);
    expect(location.startsWith(`${w.app.publicUrl}/reports#ssoCode=`)).toBe(true);
  });

  it('refuses SHA-1: an rsa-sha1 signature, or a sha1 digest under an rsa-sha256 signature', async () => {
    const { requestId } = await startLogin();
    const a = () => assertionXml({ inResponseTo: requestId, audience: spEntity, acs, email: uniqueEmail('sha1') });
    expect(await post(responseXml(requestId, acs, sign(a(), 'Assertion', idpKeys, { signature: RSA_SHA1, digest: SHA256 })))).toBe(failed('sso_error'));
    expect(lastReason()).toBe(`saml: signature algorithm refused: ${RSA_SHA1}`);
    expect(await post(responseXml(requestId, acs, sign(a(), 'Assertion', idpKeys, { signature: RSA_SHA256, digest: SHA1 })))).toBe(failed('sso_error'));
    expect(lastReason()).toBe(`saml: digest algorithm refused: ${SHA1}`);
    expect(await post(sign(responseXml(requestId, acs, a()), 'Response', idpKeys, { signature: RSA_SHA1, digest: SHA1 }))).toBe(failed('sso_error'));
    expect(lastReason()).toMatch(/^saml: (signature|digest) algorithm refused/);
  });

  it('refuses a response for a login started while the provider was active once it is inactive', async () => {
    const { requestId } = await startLogin();
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'inactive' } })).status).toBe(200);
    try {
      expect(await post(signedResponse(requestId))).toBe(failed('provider_not_found'));
      expect(lastReason()).toBe('provider gone, inactive or without certificate');
    } finally {
      expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    }
  });

  it('a second, different assertion answering the same request is refused (the login session is single use)', async () => {
    const { requestId } = await startLogin();
    expect(ssoCodeOf(await post(signedResponse(requestId)))).toBeTruthy();
    expect(await post(signedResponse(requestId))).toBe(failed('session_expired'));
    expect(lastReason()).toBe('saml: InResponseTo is not valid');
  });

  raceTest('five different assertions answering one request at once: one sign-in, the others refused', async () => {
    const { requestId } = await startLogin();
    const responses = Array.from({ length: 5 }, () => signedResponse(requestId));
    const locations = await together(5, (i) => post(responses[i]!));
    expect(locations.filter((l) => ssoCodeOf(l) !== null)).toHaveLength(1);
    expect(locations.filter((l) => l === failed('session_expired'))).toHaveLength(4);
  });

  it('refuses a replayed response, and a replayed assertion id under a new request', async () => {
    const assertionId = id();
    const first = await signedLogin({ email: uniqueEmail('replay'), assertionId });
    expect(ssoCodeOf(first.location)).toBeTruthy();
    expect(await post(first.xml)).toBe(failed('session_expired')); // the login session was used
    const again = await signedLogin({ email: uniqueEmail('replay2'), assertionId });
    expect(again.location).toBe(failed('sso_error')); // same assertion id, freshly signed, new request
    expect(lastReason()).toBe('saml: assertion id replayed');
  });

  raceTest('one signed response posted 10 times at once: one sign-in, the others session_expired', async () => {
    const { location } = await startLogin();
    const response = await samlIdp.respond(location, { email: uniqueEmail('race') });
    const locations = await together(10, () => postBase64(response));
    expect(locations.filter((l) => ssoCodeOf(l) !== null)).toHaveLength(1);
    expect(locations.filter((l) => l === failed('session_expired') || l === failed('sso_error'))).toHaveLength(9);
  });

  describe('login CSRF: the exchange code works only in the browser that started its login', () => {
    /** A finished login: its exchange code and the binding cookie of the browser that started it. */
    async function finished(): Promise<{ code: string; binding: string }> {
      const { location, binding } = await startLogin();
      const code = ssoCodeOf(await postBase64(await samlIdp.respond(location, { email: uniqueEmail('csrf') })))!;
      expect(code).toBeTruthy();
      return { code, binding: binding.value };
    }
    const browserHeaders = () => ({ 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty', origin: w.app.publicUrl });
    const exchange = (code: string, headers: Record<string, string>) => w.app.api('POST', '/sso/exchange', { body: { code }, headers });

    it('/sso/login sets the binding cookie: random, HttpOnly, SameSite=Lax, Path /api/v1/sso', async () => {
      const a = await startLogin();
      const b = await startLogin();
      expect(a.binding.value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(a.binding.value).not.toBe(b.binding.value);
      expect(a.binding.attributes).toMatch(/HttpOnly/i);
      expect(a.binding.attributes).toMatch(/SameSite=Lax/i);
      expect(a.binding.attributes).toMatch(/Path=\/api\/v1\/sso(;|$)/);
    });

    it("a browser exchanging another browser's code (fetch metadata, no binding cookie or another one) is 403 sso_binding_mismatch, and the code is spent", async () => {
      const attackers = await finished();
      const refused = await exchange(attackers.code, browserHeaders());
      expect(refused.status).toBe(403);
      expect(refused.body.code).toBe('sso_binding_mismatch');
      expect(refused.body.accessToken).toBeUndefined();
      expect((await exchange(attackers.code, { cookie: `service_sso_binding=${attackers.binding}`, ...browserHeaders() })).status).toBe(400); // spent
      const second = await finished();
      const other = await startLogin();
      const wrongCookie = await exchange(second.code, { cookie: `service_sso_binding=${other.binding.value}`, ...browserHeaders() });
      expect(wrongCookie.status).toBe(403);
      expect(wrongCookie.body.code).toBe('sso_binding_mismatch');
      const originOnly = await finished();
      expect((await exchange(originOnly.code, { origin: w.app.publicUrl })).status).toBe(403);
      const audit = await w.api('GET', `/audit-logs?orgId=${w.tenant.orgId}&action=user.sso.exchange_refused`, { token: w.adminToken });
      expect(audit.status).toBe(200);
      expect(audit.body.data.length).toBeGreaterThanOrEqual(3);
    });

    it('the browser that started the login exchanges its code (200); a backend without fetch metadata or cookie too', async () => {
      const own = await finished();
      const ok = await exchange(own.code, { cookie: `service_sso_binding=${own.binding}`, ...browserHeaders() });
      expect(ok.status).toBe(200);
      expect(ok.body.accessToken).toBeTruthy();
      const backend = await finished();
      const res = await exchange(backend.code, {}); // Node's fetch: sec-fetch-mode only, no Sec-Fetch-Site, Origin or cookie
      expect(res.status).toBe(200);
    });
  });

  it('the ACS takes a form post only; other API routes still refuse form bodies (415)', async () => {
    const json = await w.app.api('POST', '/sso/saml/acs', { body: { SAMLResponse: 'x' } });
    expect(json.status).toBe(415);
    expect(json.body.code).toBe('unsupported_media_type');
    const form = await w.app.request('POST', '/api/v1/auth/login', { raw: 'email=a%40b.c&password=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(form.status).toBe(415);
    expect(form.body.code).toBe('unsupported_media_type'); // the API gate's answer, not a route's
  });

  it('the provider test parses the certificate and reports its expiry', async () => {
    const res = await w.api('POST', `/sso/providers/${providerId}/test`, { token: w.adminToken });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ ok: true, type: 'saml', certificate: { expired: false, subject: expect.stringContaining('Test IdP') as unknown } });
    expect(res.body.certificate.daysLeft).toBeGreaterThan(300);
  });
});
