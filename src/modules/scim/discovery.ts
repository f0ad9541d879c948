import { CORE_GROUP } from './groups.js';
import { CORE_USER, ENTERPRISE_USER, MAX_COUNT, MAX_PATCH_OPERATIONS, LIST_RESPONSE } from './users.js';

/*
 * Discovery (RFC 7644 §4, RFC 7643 §5-7): what this SCIM service does, for a directory that reads it
 * before provisioning. Static: the same for every organisation.
 */

const SP_CONFIG = 'urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig';
const RESOURCE_TYPE = 'urn:ietf:params:scim:schemas:core:2.0:ResourceType';
const SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Schema';

export function serviceProviderConfig(baseUrl: string, maxPayloadSize: number): Record<string, unknown> {
  return {
    schemas: [SP_CONFIG],
    patch: { supported: true },
    bulk: { supported: false, maxOperations: 0, maxPayloadSize },
    filter: { supported: true, maxResults: MAX_COUNT },
    changePassword: { supported: false },
    sort: { supported: false },
    etag: { supported: false },
    authenticationSchemes: [
      { type: 'oauthbearertoken', name: 'Bearer token', description: 'A SCIM token of the organisation (kscim_…), made in Keel under the organisation\'s SCIM tokens', primary: true },
    ],
    meta: { resourceType: 'ServiceProviderConfig', location: `${baseUrl}/ServiceProviderConfig` },
    maxOperations: MAX_PATCH_OPERATIONS,
  };
}

export function resourceTypes(baseUrl: string): Record<string, unknown>[] {
  return [
    {
      schemas: [RESOURCE_TYPE],
      id: 'User',
      name: 'User',
      endpoint: '/Users',
      description: 'A person of the organisation: a Keel account and its membership',
      schema: CORE_USER,
      schemaExtensions: [{ schema: ENTERPRISE_USER, required: false }],
      meta: { resourceType: 'ResourceType', location: `${baseUrl}/ResourceTypes/User` },
    },
    {
      schemas: [RESOURCE_TYPE],
      id: 'Group',
      name: 'Group',
      endpoint: '/Groups',
      description: "A directory group of the organisation; the SCIM settings' group mappings give its members a role",
      schema: CORE_GROUP,
      meta: { resourceType: 'ResourceType', location: `${baseUrl}/ResourceTypes/Group` },
    },
  ];
}

type Attr = Record<string, unknown>;
const attr = (name: string, o: Partial<Attr> = {}): Attr => ({
  name,
  type: 'string',
  multiValued: false,
  description: '',
  required: false,
  caseExact: false,
  mutability: 'readWrite',
  returned: 'default',
  uniqueness: 'none',
  ...o,
});

const USER_ATTRIBUTES: Attr[] = [
  attr('userName', { required: true, uniqueness: 'server', description: "The person's email address: Keel signs people in by it" }),
  attr('externalId', { caseExact: true, description: "The directory's own id of the person" }),
  attr('name', {
    type: 'complex',
    description: 'The parts of the name',
    subAttributes: ['formatted', 'familyName', 'givenName', 'middleName', 'honorificPrefix', 'honorificSuffix'].map((n) => attr(n)),
  }),
  attr('displayName', { description: 'The name Keel shows' }),
  attr('title'),
  attr('active', { type: 'boolean', description: 'false disables the account at once: every session ends' }),
  attr('emails', {
    type: 'complex',
    multiValued: true,
    subAttributes: [attr('value'), attr('type', { canonicalValues: ['work', 'home', 'other'] }), attr('primary', { type: 'boolean' })],
  }),
];

const ENTERPRISE_ATTRIBUTES: Attr[] = [
  attr('department'),
  attr('manager', { type: 'complex', subAttributes: [attr('value', { description: 'The id of the manager' }), attr('displayName', { mutability: 'readOnly' })] }),
];

const GROUP_ATTRIBUTES: Attr[] = [
  attr('displayName', { required: true, uniqueness: 'server', description: "The group's name: the SCIM settings' group mappings name it (compared without case)" }),
  attr('externalId', { caseExact: true, description: "The directory's own id of the group" }),
  attr('members', {
    type: 'complex',
    multiValued: true,
    description: 'Users of the organisation in the group',
    subAttributes: [attr('value', { mutability: 'immutable', description: 'The id of a User' }), attr('display', { mutability: 'readOnly' }), attr('type', { mutability: 'immutable', canonicalValues: ['User'] })],
  }),
];

export function schemas(baseUrl: string): Record<string, unknown>[] {
  return [
    { schemas: [SCHEMA], id: CORE_USER, name: 'User', description: 'User account', attributes: USER_ATTRIBUTES, meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${CORE_USER}` } },
    { schemas: [SCHEMA], id: ENTERPRISE_USER, name: 'EnterpriseUser', description: 'Enterprise user', attributes: ENTERPRISE_ATTRIBUTES, meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${ENTERPRISE_USER}` } },
    { schemas: [SCHEMA], id: CORE_GROUP, name: 'Group', description: 'Group', attributes: GROUP_ATTRIBUTES, meta: { resourceType: 'Schema', location: `${baseUrl}/Schemas/${CORE_GROUP}` } },
  ];
}

/** A ListResponse of everything (discovery lists are short). */
export function listOf(resources: Record<string, unknown>[]): Record<string, unknown> {
  return { schemas: [LIST_RESPONSE], totalResults: resources.length, startIndex: 1, itemsPerPage: resources.length, Resources: resources };
}
