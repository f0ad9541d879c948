import { z } from '@hono/zod-openapi';
import { PRESETS } from './presets.js';
import { SAML_MAX_BASE64 } from './saml-scan.js';

/** Request and response schemas of the SSO routes; every field described (the API description rules). */

const d = (description: string, example?: unknown) => (example === undefined ? { description } : { description, example });

const Url500 = z.url().max(500);

export const AttributeMappingSchema = z
  .object({
    email: z.string().min(1).max(500).openapi(d('Claim (OIDC) or attribute (SAML) holding the email address', 'email')),
    name: z.string().min(1).max(500).openapi(d('Claim holding the display name', 'name')),
    firstName: z.string().min(1).max(500).optional().openapi(d('Claim holding the given name; used with lastName when the name is missing', 'given_name')),
    lastName: z.string().min(1).max(500).optional().openapi(d('Claim holding the family name', 'family_name')),
    groups: z.string().min(1).max(500).optional().openapi(d('Claim holding the groups (an array of strings), read by groupRoleMappings (needed to save any); default groups, or the preset\'s', 'groups')),
  })
  .openapi('SsoAttributeMapping', { description: 'IdP claim names for each profile field' });

export const GroupRoleMappingSchema = z
  .object({
    group: z.string().min(1).max(255).openapi(d('Group name or id as the IdP sends it in the groups claim', 'keel-admins')),
    roleId: z.uuid().openapi(d('Role given to members of the group: organization-scoped of the organization, or partner-scoped of the partner for a partner provider', '00000000-0000-7000-8000-000000000004')),
    orgIds: z.array(z.uuid()).max(500).optional().openapi(d('Partner providers only: the mapping gives `orgAccess: selected` with these organizations of the partner (absent: the provider\'s orgAccess)')),
  })
  .openapi('SsoGroupRoleMapping', { description: 'At each SSO login, of the mappings whose group the user is in, the role with the most permissions decides (roles that may change something before read-only ones; on a tie, the earlier mapping; docs/decisions.md "SCIM")' });

const GroupRoleMappings = z.array(GroupRoleMappingSchema).max(100);
const MfaAcrValues = z.array(z.string().trim().min(1).max(500)).max(20);

export const PresetSchema = z
  .object({
    id: z.string().openapi(d('Preset id', 'workforce-idp')),
    type: z.enum(['oidc', 'saml']).openapi(d('Protocol')),
    name: z.string().openapi(d('Human name of the preset')),
    scopes: z.string().nullable().openapi(d('Default space-separated scopes (null for SAML)', 'openid profile email groups')),
    attributeMapping: AttributeMappingSchema.openapi(d('Default attribute mapping')),
    samlAttributes: z
      .array(z.object({ uri: z.string().openapi(d('SAML attribute name (URI)')), field: z.string().openapi(d('Profile field it fills')) }))
      .nullable()
      .openapi(d('SAML only: attribute URIs mapped automatically')),
    groupRoleMappingsSupported: z.boolean().openapi(d('The preset names a groups claim, so its providers accept groupRoleMappings (the groups claim decides the role at each login); without one, set attributeMapping.groups first')),
  })
  .openapi('SsoPreset');

export const presetsView = () => PRESETS.map((p) => ({ ...p, samlAttributes: p.samlAttributes, groupRoleMappingsSupported: Boolean(p.attributeMapping.groups) }));

export const ProviderSchema = z
  .object({
    id: z.uuid().openapi(d('Provider id')),
    orgId: z.uuid().nullable().openapi(d('Organization the provider signs users into (null for a partner\'s provider)')),
    partnerId: z.uuid().nullable().openapi(d('Partner whose technicians the provider signs in (null for an organization\'s provider)')),
    name: z.string().openapi(d('Display name', 'Contoso Entra ID')),
    type: z.enum(['oidc', 'saml']).openapi(d('Protocol')),
    status: z.enum(['inactive', 'testing', 'active']).openapi(d('active: used for sign-in (one per organization); testing: a trial started by /sso/login/{orgId} while none is active, completed only by those who may manage the organization SSO; inactive: not used')),
    preset: z.string().nullable().openapi(d('Preset id it was created from')),
    issuer: z.string().nullable().openapi(d('OIDC issuer URL (discovery)')),
    clientId: z.string().nullable().openapi(d('OIDC client id')),
    hasClientSecret: z.boolean().openapi(d('Whether a client secret is stored (the secret itself is never returned)')),
    authorizationUrl: z.string().nullable().openapi(d('OIDC authorization endpoint')),
    tokenUrl: z.string().nullable().openapi(d('OIDC token endpoint')),
    userInfoUrl: z.string().nullable().openapi(d('OIDC UserInfo endpoint')),
    jwksUrl: z.string().nullable().openapi(d('OIDC JWKS endpoint')),
    scopes: z.string().openapi(d('Space-separated scopes requested', 'openid profile email')),
    attributeMapping: AttributeMappingSchema.openapi(d('Claim names for each profile field')),
    autoProvision: z.boolean().openapi(d('Create unknown users at their first SSO login')),
    defaultRoleId: z.uuid().nullable().openapi(d('Role of provisioned users when no group mapping matches')),
    allowedDomains: z.string().openapi(d('Comma-separated email domains allowed (empty: all)', 'contoso.com')),
    enforceSSO: z.boolean().openapi(d('Password sign-in refused for members of the organization (platform administrators keep it, audited)')),
    entityId: z.string().nullable().openapi(d('SAML: the IdP entity id (the assertion Issuer must equal it when set)')),
    ssoUrl: z.string().nullable().openapi(d('SAML: the IdP single sign-on URL (HTTP-Redirect binding)')),
    certificate: z.string().nullable().openapi(d('SAML: the IdP signing certificate (PEM)')),
    groupRoleMappings: GroupRoleMappings.openapi(d('IdP groups to roles, first match wins')),
    mfaAcrValues: MfaAcrValues.openapi(d('OIDC acr (SAML AuthnContextClassRef) values that mean the IdP checked a second factor: a login asserting one starts an mfa: true session (as does an amr of mfa, otp, hwk, swk or pop)')),
    orgAccess: z.enum(['all', 'selected', 'none']).openapi(d('Partner providers: the organization access of a provisioned technician when no group mapping names organizations (all for an organization\'s provider)')),
    orgIds: z.array(z.uuid()).openapi(d('Partner providers with orgAccess selected: the organizations of the partner given')),
    breakGlassUserIds: z.array(z.uuid()).openapi(d('Partner providers: members of the partner who keep password sign-in under enforceSSO (audited user.login.break_glass)')),
    createdBy: z.uuid().nullable().openapi(d('User who created the provider')),
    createdAt: z.string().openapi(d('Creation time (ISO 8601)')),
    updatedAt: z.string().openapi(d('Last change (ISO 8601)')),
  })
  .openapi('SsoProvider');

const writable = {
  issuer: Url500.nullable().optional().openapi(d('OIDC issuer; discovery fills the four endpoint URLs', 'https://login.example.com/tenant/v2.0')),
  clientId: z.string().min(1).max(255).nullable().optional().openapi(d('OIDC client id', 'keel-client')),
  clientSecret: z.string().min(1).max(2000).nullable().optional().openapi(d('OIDC client secret; stored encrypted, never returned', 's3cret-from-the-idp')),
  authorizationUrl: Url500.nullable().optional().openapi(d('Authorization endpoint (set by hand or discovered)')),
  tokenUrl: Url500.nullable().optional().openapi(d('Token endpoint (set by hand or discovered)')),
  userInfoUrl: Url500.nullable().optional().openapi(d('UserInfo endpoint (set by hand or discovered)')),
  jwksUrl: Url500.nullable().optional().openapi(d('JWKS endpoint (set by hand or discovered)')),
  scopes: z.string().trim().min(1).max(500).optional().openapi(d('Space-separated scopes; default the preset\'s, else "openid profile email"', 'openid profile email')),
  attributeMapping: AttributeMappingSchema.optional().openapi(d('Claim names; default the preset\'s, else email/name')),
  autoProvision: z.boolean().optional().openapi(d('Create unknown users at first login (default true)')),
  defaultRoleId: z.uuid().nullable().optional().openapi(d('Organization-scoped role of this organization given to provisioned users')),
  allowedDomains: z.string().max(1000).optional().openapi(d('Comma-separated allowed email domains (empty: all)', 'contoso.com,contoso.co.uk')),
  enforceSSO: z.boolean().optional().openapi(d('Refuse password sign-in for members of the organization (default false)')),
  entityId: z.string().trim().min(1).max(500).nullable().optional().openapi(d('SAML: IdP entity id', 'https://sts.example.com/adfs/services/trust')),
  ssoUrl: Url500.nullable().optional().openapi(d('SAML: IdP single sign-on URL', 'https://sts.example.com/adfs/ls/')),
  certificate: z.string().min(1).max(20000).nullable().optional().openapi(d('SAML: IdP signing certificate, PEM or bare base64')),
  groupRoleMappings: GroupRoleMappings.optional().openapi(d('IdP groups to roles (of several matches, the role with the most permissions)')),
  mfaAcrValues: MfaAcrValues.optional().openapi(d('acr / AuthnContextClassRef values that mean a second factor (default none; amr mfa, otp, hwk, swk, pop always count)', ['http://schemas.openid.net/pape/policies/2007/06/multi-factor'])),
  orgAccess: z.enum(['all', 'selected']).optional().openapi(d('Partner providers only: organization access of provisioned technicians without a group mapping naming organizations (default all)', 'all')),
  orgIds: z.array(z.uuid()).max(500).optional().openapi(d('Partner providers only: the organizations of the partner given with orgAccess selected')),
  breakGlassUserIds: z.array(z.uuid()).max(10).optional().openapi(d('Partner providers only: members of the partner who keep password sign-in under enforceSSO, audited (at most 10)')),
};

export const ProviderCreateSchema = z
  .object({
    orgId: z.uuid().optional().openapi(d('Organization (partner and system callers; inferred for organization users)')),
    partnerId: z.uuid().optional().openapi(d('A partner\'s own provider, for its technicians, in place of orgId (partner users with every organization of the partner, platform administrators)')),
    name: z.string().trim().min(1).max(255).openapi(d('Display name (1-255)', 'Contoso Entra ID')),
    type: z.enum(['oidc', 'saml']).openapi(d('Protocol', 'oidc')),
    preset: z.string().max(100).optional().openapi(d('Preset id (GET /sso/presets): pre-fills scopes and attribute mapping', 'cloud-directory')),
    ...writable,
  })
  .openapi('SsoProviderCreate', {
    example: {
      name: 'Contoso Entra ID',
      type: 'oidc',
      preset: 'cloud-directory',
      issuer: 'https://login.example.com/tenant/v2.0',
      clientId: 'keel-client',
      clientSecret: 's3cret-from-the-idp',
      defaultRoleId: '00000000-0000-7000-8000-000000000006',
      allowedDomains: 'contoso.com',
    },
  });

export const ProviderPatchSchema = z
  .object({ name: z.string().trim().min(1).max(255).optional().openapi(d('Display name (1-255)', 'Contoso Entra ID')), ...writable })
  .openapi('SsoProviderUpdate', { example: { enforceSSO: true, allowedDomains: 'contoso.com' } });

export const StatusBodySchema = z
  .object({ status: z.enum(['inactive', 'testing', 'active']).openapi(d('New status; activating a second provider of the organization is 409', 'active')) })
  .openapi('SsoProviderStatus', { example: { status: 'active' } });

export const TestReportSchema = z
  .object({
    ok: z.boolean().openapi(d('Whether the provider looks usable')),
    type: z.enum(['oidc', 'saml']).openapi(d('Protocol tested')),
    message: z.string().openapi(d('What was found, or why it failed')),
    discovered: z
      .object({
        issuer: z.string().openapi(d('Issuer of the discovery document')),
        authorizationUrl: z.string().nullable().openapi(d('authorization_endpoint')),
        tokenUrl: z.string().nullable().openapi(d('token_endpoint')),
        userInfoUrl: z.string().nullable().openapi(d('userinfo_endpoint')),
        jwksUrl: z.string().nullable().openapi(d('jwks_uri')),
      })
      .nullable()
      .openapi(d('OIDC: what discovery found')),
    certificate: z
      .object({
        subject: z.string().openapi(d('Certificate subject')),
        issuer: z.string().openapi(d('Certificate issuer')),
        validFrom: z.string().openapi(d('Start of validity (ISO 8601)')),
        validTo: z.string().openapi(d('Expiry (ISO 8601)')),
        expired: z.boolean().openapi(d('Whether it has expired')),
        daysLeft: z.number().int().openapi(d('Whole days until expiry (negative once expired)')),
      })
      .nullable()
      .openapi(d('SAML: the signing certificate parsed')),
    credentials: z
      .object({
        result: z.enum(['accepted', 'rejected', 'unknown']).openapi(d('accepted: the token endpoint refused only a made-up code (invalid_grant); rejected: it refused the client (invalid_client); unknown: any other answer')),
        message: z.string().openapi(d('What the token endpoint said, in words')),
      })
      .nullable()
      .openapi(d('OIDC: the client id and secret checked with a token request carrying a made-up code; null when not checked')),
  })
  .openapi('SsoProviderTest');

export const CheckSchema = z
  .object({
    ssoEnabled: z.boolean().openapi(d('Whether the organization has an active provider')),
    provider: z
      .object({ id: z.uuid().openapi(d('Provider id')), name: z.string().openapi(d('Provider name')), type: z.enum(['oidc', 'saml']).openapi(d('Protocol')) })
      .nullable()
      .openapi(d('The active provider, or null')),
    enforceSSO: z.boolean().openapi(d('Whether password sign-in is refused (a login page hides its password form)')),
    loginUrl: z.string().nullable().openapi(d('Where to send the browser to sign in', '/api/v1/sso/login/0190a5c4-0000-7000-8000-000000000001')),
  })
  .openapi('SsoCheck');

export const ExchangeBodySchema = z
  .object({ code: z.string().min(1).max(200).openapi(d('The one-time code from the #ssoCode= fragment (2 minutes, single use)', 'Xb3k9Qz4T1v0m6sR2pLw8yUe5nHc7aJd0fGi1oKq3sM')) })
  .openapi('SsoExchange', { example: { code: 'Xb3k9Qz4T1v0m6sR2pLw8yUe5nHc7aJd0fGi1oKq3sM' } });

export const AcsFormSchema = z
  .object({
    SAMLResponse: z.string().max(SAML_MAX_BASE64).optional().openapi(d(`Base64 SAML Response posted by the IdP (HTTP-POST binding), at most ${SAML_MAX_BASE64} characters`)),
    RelayState: z.string().max(2000).optional().openapi(d('Relay state echoed by the IdP (not used to find the session)')),
  })
  .openapi('SamlAcsForm', { example: { SAMLResponse: 'PHNhbWxwOlJlc3BvbnNlIC4uLg==', RelayState: '' } });

export const IdPathSchema = z.object({
  id: z.uuid().openapi({ param: { name: 'id', in: 'path' }, description: 'Provider id' }),
});
export const OrgPathSchema = z.object({
  orgId: z.string().openapi({ param: { name: 'orgId', in: 'path' }, description: 'Organization id' }),
});
export const ProviderPathSchema = z.object({
  providerId: z.string().openapi({ param: { name: 'providerId', in: 'path' }, description: 'SAML provider id' }),
});
export const LoginQuerySchema = z.object({
  redirect: z.string().optional().openapi(d('Page to return to after sign-in: a relative path on this site', '/devices')),
});
export const CallbackQuerySchema = z.object({
  code: z.string().optional().openapi(d('Authorization code from the IdP')),
  state: z.string().optional().openapi(d('State issued at login; must match the service_sso_state cookie')),
  error: z.string().optional().openapi(d('Error reported by the IdP')),
  iss: z.string().optional().openapi(d('Issuer identifier (RFC 9207), checked when sent')),
})
  // The identity provider's redirect: providers add parameters of their own (session_state, scope,
  // error_description), so this query alone is not strict (platform/http/validation.ts).
  .loose();

export const PartnerSlugPathSchema = z.object({
  partnerSlug: z.string().max(63).openapi({ param: { name: 'partnerSlug', in: 'path' }, description: 'The partner\'s slug', example: 'analytical-engines' }),
});

export const PartnerCheckSchema = z
  .object({
    name: z.string().openapi(d('The partner\'s display name', 'Analytical Engines Ltd')),
    ssoEnabled: z.boolean().openapi(d('Whether the partner has an active SSO provider (its sign-in page offers the button)')),
    providerName: z.string().nullable().openapi(d('Display name of the active provider (the page\'s "Sign in with <providerName>"; sign-in starts at GET /sso/login/partner/{partnerSlug}), or null', 'Engines Entra ID')),
  })
  .openapi('SsoPartnerCheck');
