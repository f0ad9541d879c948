import { SAML, ValidateInResponseTo, type CacheProvider, type Profile } from '@node-saml/node-saml';
import { eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { randomBytes } from 'node:crypto';
import { clock } from '../../platform/clock.js';
import { notFound } from '../../platform/http/errors.js';
import type { SingleUseRecord } from '../../platform/single-use.js';
import type { AuditRequestInfo } from '../audit/service.js';
import { signsIn, type ProviderRow } from './providers.js';
import { ssoProviders, type AttributeMapping } from './schema.js';
import { SAML_ATTRIBUTE_URIS } from './presets.js';
import { completeSsoLogin, mapClaims } from './provisioning.js';
import { providerAssertedMfa, samlAuthnContextClassRefs } from './mfa.js';
import { successLocation } from './locations.js';
import { checkScannedResponse, scanSamlResponse } from './saml-scan.js';
import { ACS_PATH, SAML_ASSERTION_PURPOSE, SAML_CLOCK_SKEW_MS, SSO_LOGIN_PURPOSE, SSO_LOGIN_TTL_MS, SsoFailure } from './constants.js';
import { ssoError } from './errors.js';

const EMAIL_FORMAT = 'urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress';

/** Keel's SAML entity id: `SAML_SP_ENTITY_ID`, else `{PUBLIC_URL}/api/v1/sso/saml/metadata` (one per deployment). */
export const spEntityId = (keel: Keel) => keel.config.SAML_SP_ENTITY_ID ?? `${keel.config.publicUrl}/api/v1/sso/saml/metadata`;
export const acsUrl = (keel: Keel) => `${keel.config.publicUrl}${ACS_PATH}`;

/** What a SAML login session stores (found again by the response's InResponseTo, never by a cookie). */
interface SamlSessionData {
  type: 'saml';
  providerId: string;
  orgId: string | null;
  partnerId?: string | null;
  redirectPath: string;
  /** SHA-256 of the browser's binding cookie, carried to the exchange code. */
  binding: string;
}

const unusedCache: CacheProvider = {
  saveAsync: () => Promise.resolve(null),
  getAsync: () => Promise.resolve(null),
  removeAsync: () => Promise.resolve(null),
};

/** `GET /sso/saml/metadata/:providerId`: SP metadata (entity id, ACS by HTTP-POST, email NameID, WantAssertionsSigned). */
export async function samlMetadata(keel: Keel, providerId: string): Promise<string> {
  const [p] = await keel.db.select({ id: ssoProviders.id, type: ssoProviders.type }).from(ssoProviders).where(eq(ssoProviders.id, providerId));
  if (p?.type !== 'saml') throw notFound('SAML provider');
  const saml = new SAML({
    idpCert: 'unused',
    issuer: spEntityId(keel),
    callbackUrl: acsUrl(keel),
    identifierFormat: EMAIL_FORMAT,
    wantAssertionsSigned: true,
    cacheProvider: unusedCache,
  });
  return saml.generateServiceProviderMetadata(null);
}

/**
 * The AuthnRequest by HTTP-Redirect (`/sso/login/:orgId` for a SAML provider): its ID is the
 * login session's token, so the ACS finds the session by InResponseTo (10 minutes, single use).
 */
export async function samlAuthorizeUrl(keel: Keel, p: ProviderRow, redirectPath: string, binding: string): Promise<string> {
  if (!p.ssoUrl || !p.certificate) {
    throw ssoError('sso_provider_incomplete');
  }
  const requestId = `_${randomBytes(20).toString('hex')}`;
  const data: SamlSessionData = { type: 'saml', providerId: p.id, orgId: p.orgId, partnerId: p.partnerId, redirectPath, binding };
  await keel.singleUse.create(keel.db, { purpose: SSO_LOGIN_PURPOSE, token: requestId, ttlMs: SSO_LOGIN_TTL_MS, subjectId: p.id, data: { ...data } });
  const saml = new SAML({
    idpCert: p.certificate,
    issuer: spEntityId(keel),
    callbackUrl: acsUrl(keel),
    entryPoint: p.ssoUrl,
    identifierFormat: EMAIL_FORMAT,
    generateUniqueId: () => requestId,
    validateInResponseTo: ValidateInResponseTo.always,
    cacheProvider: unusedCache,
    disableRequestedAuthnContext: true,
  });
  return saml.getAuthorizeUrlAsync('', undefined, {});
}

const isUniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return e.code === '23505' || e.cause?.code === '23505';
};

/**
 * The ACS (`POST /api/v1/sso/saml/acs`): first the scan of `saml-scan.ts` (size, shape, no DOCTYPE,
 * bounded elements, SHA-1 refused, Destination the ACS URL), then node-saml verifies the XML signature
 * (response or assertion, one assertion only, so wrapped copies are refused) against the certificate
 * of the active provider whose login session the response's InResponseTo names, the audience (Keel's
 * entity id) and NotBefore / NotOnOrAfter (SAML_CLOCK_SKEW_MS). Keel then requires the signed
 * assertion to answer that very request with Recipient the ACS URL (`checkSubjectConfirmation`).
 * Then the session is consumed once, the assertion id is recorded until the assertion expires (a
 * replay is refused), and the same provisioning and exchange code as OIDC follow.
 */
export async function samlAcs(keel: Keel, form: { SAMLResponse?: string | undefined; RelayState?: string | undefined }, info: AuditRequestInfo): Promise<string> {
  if (!form.SAMLResponse) throw new SsoFailure('sso_error', 'no SAMLResponse');
  // Before any XML parser: size, shape, no DOCTYPE, bounded elements; SHA-1 and a foreign Destination refused.
  checkScannedResponse(scanSamlResponse(form.SAMLResponse), acsUrl(keel));
  let session: SingleUseRecord | null = null;
  let provider: ProviderRow | null = null;
  // InResponseTo → the stored login session (peeked here, consumed below once everything verified).
  const sessions: CacheProvider = {
    saveAsync: () => Promise.resolve(null),
    getAsync: async (key) => {
      if (session) return session.data.requestId === key ? new Date().toISOString() : null;
      const found = await keel.singleUse.peek(keel.db, SSO_LOGIN_PURPOSE, key);
      if (found?.data.type !== 'saml') return null;
      session = { ...found, data: { ...found.data, requestId: key } };
      return new Date().toISOString();
    },
    removeAsync: () => Promise.resolve(null),
  };
  const saml = new SAML({
    idpCert: (callback) => {
      loadProvider().then(
        (p) => callback(null, p.certificate ?? undefined),
        (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))),
      );
    },
    issuer: spEntityId(keel),
    audience: spEntityId(keel),
    callbackUrl: acsUrl(keel),
    wantAssertionsSigned: false,
    wantAuthnResponseSigned: false,
    validateInResponseTo: ValidateInResponseTo.always,
    requestIdExpirationPeriodMs: SSO_LOGIN_TTL_MS,
    acceptedClockSkewMs: SAML_CLOCK_SKEW_MS,
    cacheProvider: sessions,
  });
  async function loadProvider(): Promise<ProviderRow> {
    const s = session;
    if (!s) throw new SsoFailure('session_expired', 'unknown InResponseTo');
    const [p] = await keel.db.select().from(ssoProviders).where(eq(ssoProviders.id, String(s.data.providerId)));
    if (!p || !signsIn(p) || p.type !== 'saml' || !p.certificate) throw new SsoFailure('provider_not_found', 'provider gone, inactive or without certificate');
    provider = p;
    return p;
  }
  let profile: Profile | null;
  try {
    ({ profile } = await saml.validatePostResponseAsync({ SAMLResponse: form.SAMLResponse }));
  } catch (err) {
    if (err instanceof SsoFailure) throw err;
    const message = (err as Error).message;
    if (/InResponseTo is (not valid|missing)/.test(message)) throw new SsoFailure('session_expired', `saml: ${message}`);
    throw new SsoFailure('sso_error', `saml: ${message.slice(0, 200)}`);
  }
  const s = session as SingleUseRecord | null;
  const p = provider as ProviderRow | null;
  if (!profile || !s || !p) throw new SsoFailure('sso_error', 'saml: no profile');
  if (p.entityId && profile.issuer !== p.entityId) throw new SsoFailure('sso_error', 'saml: issuer is not the provider entity id');
  checkSubjectConfirmation(profile, String(s.data.requestId), acsUrl(keel));
  const consumed = await keel.singleUse.consume(keel.db, SSO_LOGIN_PURPOSE, String(s.data.requestId));
  if (!consumed) throw new SsoFailure('session_expired', 'login session already used or expired');
  await refuseReplay(keel, p, profile);
  const attributes = Object.fromEntries(Object.entries(profile).filter(([, v]) => typeof v !== 'function'));
  const claims: Record<string, unknown> = { ...(profile.attributes as Record<string, unknown> | undefined), ...attributes };
  delete claims.attributes;
  // An emailAddress-format NameID is the email when no email attribute came (samlify's default response, many IdPs).
  const mapping = profile.nameIDFormat === EMAIL_FORMAT && !sentEmailAttribute(p.attributeMapping, claims) ? { ...p.attributeMapping, email: 'nameID' } : p.attributeMapping;
  // A second factor asserted by the IdP (an AuthnContextClassRef of the provider's mfaAcrValues) makes the session mfa: true.
  const mapped = { ...mapClaims(mapping, claims, profile.nameID, true), mfa: providerAssertedMfa(p, { acr: samlAuthnContextClassRefs(profile) }) };
  const data = s.data as unknown as SamlSessionData;
  const code = await completeSsoLogin(keel, p, mapped, {}, info, data.binding);
  return successLocation(keel, data.redirectPath, code);
}

/** Whether the assertion carries an email attribute: the mapped one, or one of the SAML URIs for email. */
function sentEmailAttribute(mapping: AttributeMapping, claims: Record<string, unknown>): boolean {
  const names = [mapping.email, ...SAML_ATTRIBUTE_URIS.filter((a) => a.field === 'email').map((a) => a.uri)];
  return names.some((n) => {
    const v = claims[n];
    return (typeof v === 'string' && v.trim() !== '') || (Array.isArray(v) && v.some((x) => typeof x === 'string' && x.trim() !== ''));
  });
}

interface ConfirmationData {
  $?: { Method?: string };
  SubjectConfirmationData?: { $?: { InResponseTo?: string; Recipient?: string; NotOnOrAfter?: string } }[];
}

/**
 * The signed assertion itself must answer this login: one of its bearer SubjectConfirmations carries
 * InResponseTo equal to the request the login session was found by, Recipient equal to the ACS URL and
 * a NotOnOrAfter still ahead. The response's own InResponseTo is unsigned (it only finds the session),
 * so an assertion without InResponseTo (IdP-initiated, unsolicited) is refused here.
 */
function checkSubjectConfirmation(profile: Profile, requestId: string, acs: string): void {
  const assertion = (profile.getAssertion?.() as { Assertion?: { Subject?: { SubjectConfirmation?: ConfirmationData[] }[] } } | undefined)?.Assertion;
  const bearer = (assertion?.Subject?.[0]?.SubjectConfirmation ?? [])
    .filter((c) => c.$?.Method === 'urn:oasis:names:tc:SAML:2.0:cm:bearer')
    .map((c) => c.SubjectConfirmationData?.[0]?.$ ?? {});
  const now = clock.nowMs();
  const live = bearer.filter((d) => {
    const until = Date.parse(d.NotOnOrAfter ?? '');
    return Number.isFinite(until) && until + SAML_CLOCK_SKEW_MS > now;
  });
  if (live.length === 0) throw new SsoFailure('sso_error', 'saml: no live bearer subject confirmation');
  const answering = live.filter((d) => d.InResponseTo !== undefined);
  if (answering.length === 0) throw new SsoFailure('session_expired', 'saml: unsolicited assertion (no InResponseTo in its subject confirmation)');
  const ours = answering.filter((d) => d.InResponseTo === requestId);
  if (ours.length === 0) throw new SsoFailure('session_expired', 'saml: the assertion answers another request');
  if (!ours.some((d) => d.Recipient === acs)) throw new SsoFailure('sso_error', 'saml: Recipient is not the ACS URL');
}

/** Records the assertion id (per IdP) until the assertion's NotOnOrAfter; a second use is refused. */
async function refuseReplay(keel: Keel, p: ProviderRow, profile: Profile): Promise<void> {
  const assertion = (profile.getAssertion?.() as { Assertion?: { $?: { ID?: string }; Conditions?: { $?: { NotOnOrAfter?: string } }[] } } | undefined)?.Assertion;
  const id = assertion?.$?.ID;
  if (!id) throw new SsoFailure('sso_error', 'saml: assertion without ID');
  const until = Date.parse(assertion.Conditions?.[0]?.$?.NotOnOrAfter ?? '');
  const ttlMs = Math.max(Number.isFinite(until) ? until - clock.nowMs() + SAML_CLOCK_SKEW_MS : SSO_LOGIN_TTL_MS, 60_000);
  try {
    await keel.singleUse.create(keel.db, { purpose: SAML_ASSERTION_PURPOSE, token: `${p.id}:${id}`, ttlMs, subjectId: p.id });
  } catch (err) {
    if (isUniqueViolation(err)) throw new SsoFailure('sso_error', 'saml: assertion id replayed');
    throw err;
  }
}
