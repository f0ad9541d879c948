import type { AttributeMapping } from './schema.js';

/** The 2005/05 identity-claims namespace and the vendor claims namespace of docs/specification.md "Single sign-on: providers". */
export const CLAIMS_2005 = 'http://schemas.xmlsoap.org/ws/2005/05/identity/claims';
export const VENDOR_CLAIMS = 'http://schemas.microsoft.com';

/** SAML attribute URIs mapped automatically (docs/specification.md "Single sign-on: providers"), in the order they are tried. */
export const SAML_ATTRIBUTE_URIS: readonly { uri: string; field: keyof AttributeMapping }[] = [
  { uri: `${CLAIMS_2005}/emailaddress`, field: 'email' },
  { uri: `${CLAIMS_2005}/name`, field: 'name' },
  { uri: `${CLAIMS_2005}/givenname`, field: 'firstName' },
  { uri: `${CLAIMS_2005}/surname`, field: 'lastName' },
  { uri: `${VENDOR_CLAIMS}/ws/2008/06/identity/claims/groups`, field: 'groups' },
  { uri: 'urn:oid:0.9.2342.19200300.100.1.3', field: 'email' },
  { uri: 'urn:oid:2.5.4.42', field: 'firstName' },
  { uri: 'urn:oid:2.5.4.4', field: 'lastName' },
  { uri: 'urn:oid:2.16.840.1.113730.3.1.241', field: 'name' },
];

export const DEFAULT_SCOPES = 'openid profile email';
/**
 * The mapping of a provider made without a preset: the groups claim (OIDC) or attribute (SAML) is
 * `groups` by default, so group mappings work without another setting (docs/decisions.md "SSO that
 * explains itself").
 */
export const DEFAULT_MAPPING: AttributeMapping = { email: 'email', name: 'name', groups: 'groups' };

export interface Preset {
  id: string;
  type: 'oidc' | 'saml';
  name: string;
  /** Space-separated; null for SAML. */
  scopes: string | null;
  attributeMapping: AttributeMapping;
  /** SAML only: attribute URIs mapped to profile fields. */
  samlAttributes: { uri: string; field: string }[] | null;
}

const oidc = (id: string, name: string, scopes: string, mapping: AttributeMapping): Preset => ({
  id, type: 'oidc', name, scopes, attributeMapping: mapping, samlAttributes: null,
});
/** The vendor groups claim URI (Entra ID, AD FS); other SAML IdPs send the attribute named as configured there (`groups`). */
const VENDOR_GROUPS = `${VENDOR_CLAIMS}/ws/2008/06/identity/claims/groups`;
const saml = (id: string, name: string, groups: string): Preset => ({
  id,
  type: 'saml',
  name,
  scopes: null,
  attributeMapping: { email: `${CLAIMS_2005}/emailaddress`, name: `${CLAIMS_2005}/name`, firstName: `${CLAIMS_2005}/givenname`, lastName: `${CLAIMS_2005}/surname`, groups },
  samlAttributes: SAML_ATTRIBUTE_URIS.map((a) => ({ uri: a.uri, field: a.field })),
});

/**
 * The presets of docs/specification.md "Single sign-on: providers" (neutral ids, named for the IdP
 * each is made for). The groups claim is the one the IdP sends (docs/decisions.md "SSO that explains
 * itself"): `groups` for OIDC, the vendor URI for Entra ID and AD FS SAML, `groups` for the SAML apps
 * where the attribute is named by the administrator; Google's OIDC sends none, so its preset names
 * none and group mappings are refused until one is set.
 */
export const PRESETS: readonly Preset[] = [
  oidc('cloud-directory', 'Microsoft Entra ID (OIDC)', 'openid profile email', { email: 'email', name: 'name', firstName: 'given_name', lastName: 'family_name', groups: 'groups' }),
  oidc('workforce-idp', 'Okta (OIDC)', 'openid profile email groups', { email: 'email', name: 'name', firstName: 'given_name', lastName: 'family_name', groups: 'groups' }),
  oidc('workspace-idp', 'Google Workspace (OIDC)', 'openid profile email', { email: 'email', name: 'name', firstName: 'given_name', lastName: 'family_name' }),
  oidc('identity-platform', 'AD FS 2016+ (OIDC)', 'openid profile email', { email: 'email', name: 'name', firstName: 'given_name', lastName: 'family_name', groups: 'groups' }),
  saml('cloud-directory-saml', 'Microsoft Entra ID (SAML)', VENDOR_GROUPS),
  saml('workforce-idp-saml', 'Okta (SAML)', 'groups'),
  saml('portal-saml', 'Other identity provider (SAML)', 'groups'),
  saml('federation-server-saml', 'AD FS (SAML)', VENDOR_GROUPS),
  saml('workspace-idp-saml', 'Google Workspace (SAML)', 'groups'),
];

export function findPreset(id: string): Preset | undefined {
  return PRESETS.find((p) => p.id === id);
}
