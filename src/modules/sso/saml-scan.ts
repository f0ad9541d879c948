import { SsoFailure } from './constants.js';

/**
 * The cheap look at a posted SAMLResponse before any XML parser sees it (docs/decisions.md
 * "Organisation SSO: SAML checks, login binding and unauthenticated limits"): base64 shape and size, then one linear
 * scan of the markup that refuses a DOCTYPE (so no entity can be declared), counts elements and their
 * depth, and reads the few attributes Keel checks itself: the root Response's Destination and
 * InResponseTo, whether the root carries its own signature, and every SignatureMethod / DigestMethod
 * algorithm. Anything the scan cannot read as plain well-formed markup is refused.
 */

/** Largest SAMLResponse accepted, in base64 characters (256 KiB; about 192 KiB of XML). */
export const SAML_MAX_BASE64 = 256 * 1024;
export const SAML_MAX_ELEMENTS = 5000;
export const SAML_MAX_DEPTH = 32;

/** Signature and digest algorithms accepted (SHA-1 and HMAC are not). */
export const SAML_SIGNATURE_ALGORITHMS = new Set([
  'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256',
  'http://www.w3.org/2001/04/xmldsig-more#rsa-sha384',
  'http://www.w3.org/2001/04/xmldsig-more#rsa-sha512',
]);
export const SAML_DIGEST_ALGORITHMS = new Set([
  'http://www.w3.org/2001/04/xmlenc#sha256',
  'http://www.w3.org/2001/04/xmldsig-more#sha384',
  'http://www.w3.org/2001/04/xmlenc#sha512',
]);

export interface ScannedResponse {
  xml: string;
  /** The root element's local name (must be Response). */
  root: string;
  destination: string | null;
  inResponseTo: string | null;
  /** A Signature element is a direct child of the root (the response itself is signed). */
  rootSigned: boolean;
  signatureAlgorithms: string[];
  digestAlgorithms: string[];
}

const BASE64 = /^[A-Za-z0-9+/\r\n]+={0,2}[\r\n]*$/;
const NAME = /[^\s/>=]+/y;
const ATTRIBUTE = /\s+([^\s/>=]+)\s*=\s*("[^"<]*"|'[^'<]*')/y;
const TAG_END = /\s*(\/?)>/y;

const refuse = (reason: string) => new SsoFailure('sso_error', `saml: ${reason}`);

function decodeEntities(value: string): string {
  return value.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);/g, (_m, e: string) => {
    if (e === 'amp') return '&';
    if (e === 'lt') return '<';
    if (e === 'gt') return '>';
    if (e === 'quot') return '"';
    if (e === 'apos') return "'";
    const code = e.startsWith('#x') ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : '\ufffd';
  });
}

const localName = (qname: string) => qname.slice(qname.indexOf(':') + 1);

/** Decodes and scans `b64`; throws `SsoFailure('sso_error')` for anything out of shape or over a bound. */
export function scanSamlResponse(b64: string): ScannedResponse {
  if (b64.length > SAML_MAX_BASE64) throw refuse(`SAMLResponse larger than ${SAML_MAX_BASE64} base64 characters`);
  if (!BASE64.test(b64)) throw refuse('SAMLResponse is not base64');
  const xml = Buffer.from(b64, 'base64').toString('utf8');
  const out: ScannedResponse = { xml, root: '', destination: null, inResponseTo: null, rootSigned: false, signatureAlgorithms: [], digestAlgorithms: [] };
  let depth = 0;
  let elements = 0;
  let i = xml.indexOf('<');
  if (i < 0) throw refuse('SAMLResponse holds no XML');
  while (i >= 0 && i < xml.length) {
    if (xml.startsWith('<!--', i)) {
      const end = xml.indexOf('-->', i + 4);
      if (end < 0) throw refuse('unterminated comment');
      i = xml.indexOf('<', end + 3);
      continue;
    }
    if (xml.startsWith('<![CDATA[', i)) {
      const end = xml.indexOf(']]>', i + 9);
      if (end < 0) throw refuse('unterminated CDATA');
      i = xml.indexOf('<', end + 3);
      continue;
    }
    if (xml.startsWith('<!', i)) throw refuse('DOCTYPE or other declaration refused');
    if (xml.startsWith('<?', i)) {
      const end = xml.indexOf('?>', i + 2);
      if (end < 0) throw refuse('unterminated processing instruction');
      i = xml.indexOf('<', end + 2);
      continue;
    }
    if (xml.startsWith('</', i)) {
      const end = xml.indexOf('>', i + 2);
      if (end < 0) throw refuse('unterminated end tag');
      depth -= 1;
      if (depth < 0) throw refuse('unbalanced end tag');
      i = xml.indexOf('<', end + 1);
      continue;
    }
    NAME.lastIndex = i + 1;
    const name = NAME.exec(xml)?.[0];
    if (!name) throw refuse('malformed start tag');
    let at = NAME.lastIndex;
    const attributes = new Map<string, string>();
    for (;;) {
      ATTRIBUTE.lastIndex = at;
      const m = ATTRIBUTE.exec(xml);
      if (!m) break;
      if (attributes.size >= 64) throw refuse('too many attributes');
      attributes.set(m[1] ?? '', decodeEntities((m[2] ?? '""').slice(1, -1)));
      at = ATTRIBUTE.lastIndex;
    }
    TAG_END.lastIndex = at;
    const end = TAG_END.exec(xml);
    if (!end) throw refuse('malformed start tag');
    elements += 1;
    if (elements > SAML_MAX_ELEMENTS) throw refuse(`more than ${SAML_MAX_ELEMENTS} elements`);
    const local = localName(name);
    if (elements === 1) {
      out.root = local;
      out.destination = attributes.get('Destination') ?? null;
      out.inResponseTo = attributes.get('InResponseTo') ?? null;
    } else if (depth === 0) {
      throw refuse('more than one root element');
    }
    if (depth === 1 && local === 'Signature') out.rootSigned = true;
    if (local === 'SignatureMethod') out.signatureAlgorithms.push(attributes.get('Algorithm') ?? '');
    if (local === 'DigestMethod') out.digestAlgorithms.push(attributes.get('Algorithm') ?? '');
    if (end[1] !== '/') {
      depth += 1;
      if (depth > SAML_MAX_DEPTH) throw refuse(`elements nested deeper than ${SAML_MAX_DEPTH}`);
    }
    i = xml.indexOf('<', TAG_END.lastIndex);
  }
  if (depth !== 0) throw refuse('unbalanced elements');
  return out;
}

/** Refuses what Keel requires of any response before the signature is checked: the algorithms and the Destination. */
export function checkScannedResponse(s: ScannedResponse, acsUrl: string): void {
  if (s.root !== 'Response') throw refuse('not a Response');
  for (const a of s.signatureAlgorithms) if (!SAML_SIGNATURE_ALGORITHMS.has(a)) throw refuse(`signature algorithm refused: ${a.slice(0, 100)}`);
  for (const a of s.digestAlgorithms) if (!SAML_DIGEST_ALGORITHMS.has(a)) throw refuse(`digest algorithm refused: ${a.slice(0, 100)}`);
  if (s.destination !== null && s.destination !== acsUrl) throw refuse('Destination is not the ACS URL');
  if (s.destination === null && s.rootSigned) throw refuse('a signed Response without Destination');
}
