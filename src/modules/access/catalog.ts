import type { PermissionPair } from './schema.js';

/** Resources of the role builder (docs/specification.md "Roles and permissions"). */
export const BUILDER_RESOURCES = [
  'devices', 'scripts', 'alerts', 'automations', 'reports', 'backup', 'billing', 'users', 'settings',
  'organizations', 'sites', 'remote',
] as const;

/** Role-builder actions and the canonical action each maps to (docs/decisions.md "Roles, permissions and seeded roles"). */
export const BUILDER_ACTION_MAP = { view: 'read', create: 'write', update: 'write', delete: 'delete', execute: 'execute' } as const;

/** Named permissions referenced by endpoints (docs/specification.md "Roles and permissions"), plus Keel's additions (docs/decisions.md "Roles, permissions and seeded roles"). */
const NAMED: [string, string, string][] = [
  ['alerts', 'acknowledge', 'Acknowledge alerts'],
  ['users', 'invite', 'Invite users'],
  ['topology', 'read', 'View network topology'],
  ['topology', 'write', 'Change network topology'],
  ['vulnerabilities', 'accept_risk', 'Accept the risk of a vulnerability'],
  ['remote', 'access', 'Open remote sessions'],
  ['audit', 'read', 'Read the audit log'],
  ['audit', 'export', 'Export the audit log'],
  ['audit', 'stream', 'Configure audit streaming to a SIEM'],
  ['webhooks', 'read', 'View webhooks and deliveries'],
  ['webhooks', 'write', 'Create, change and delete webhooks'],
  ['events', 'publish', 'Publish events from other components'],
];

export const CANONICAL_ACTIONS = ['read', 'write', 'delete', 'execute'] as const;

export interface CatalogEntry extends PermissionPair {
  description: string;
}

/** The authoritative list of assignable permissions (GET /permissions/catalog). */
export const PERMISSION_CATALOG: CatalogEntry[] = (() => {
  const out = new Map<string, CatalogEntry>();
  for (const resource of BUILDER_RESOURCES) {
    for (const action of CANONICAL_ACTIONS) {
      out.set(`${resource}:${action}`, { resource, action, description: `${action[0]?.toUpperCase()}${action.slice(1)} ${resource}` });
    }
  }
  for (const [resource, action, description] of NAMED) out.set(`${resource}:${action}`, { resource, action, description });
  // `*` on either side (docs/decisions.md "Roles, permissions and seeded roles"): every action on one resource, or one canonical action on every resource.
  const resources = [...new Set([...out.values()].map((p) => p.resource))];
  for (const resource of resources) out.set(`${resource}:*`, { resource, action: '*', description: `Every action on ${resource}` });
  for (const action of CANONICAL_ACTIONS) {
    out.set(`*:${action}`, { resource: '*', action, description: action === 'read' ? 'Read everything' : `${action[0]?.toUpperCase()}${action.slice(1)} everything` });
  }
  out.set('*:*', { resource: '*', action: '*', description: 'Full administrative access' });
  return [...out.values()];
})();

/** Every concrete resource of the catalog: the role builder's plus those of named permissions. */
export const CATALOG_RESOURCES: readonly string[] = [...new Set(PERMISSION_CATALOG.map((p) => p.resource).filter((r) => r !== '*'))];

const PARTNER_TECH: PermissionPair[] = [
  ...['read', 'write', 'execute'].map((action) => ({ resource: 'devices', action })),
  ...['read', 'execute'].map((action) => ({ resource: 'scripts', action })),
  ...['read', 'write', 'acknowledge'].map((action) => ({ resource: 'alerts', action })),
  { resource: 'automations', action: 'read' },
  { resource: 'reports', action: 'read' },
  { resource: 'sites', action: 'read' },
  { resource: 'organizations', action: 'read' },
  { resource: 'remote', action: 'access' },
];

export interface SystemRoleSeed {
  id: string;
  name: string;
  scope: 'partner' | 'organization';
  description: string;
  forceMfa: boolean;
  permissions: PermissionPair[];
}

/** Seeded global system roles (docs/decisions.md "Roles, permissions and seeded roles"). Fixed ids so every install agrees. */
export const SYSTEM_ROLES = {
  partnerAdmin: {
    id: '00000000-0000-7000-8000-000000000001', name: 'Partner Admin', scope: 'partner', forceMfa: true,
    description: 'Full access to the partner and all its organisations', permissions: [{ resource: '*', action: '*' }],
  },
  partnerTechnician: {
    id: '00000000-0000-7000-8000-000000000002', name: 'Partner Technician', scope: 'partner', forceMfa: false,
    description: 'Day-to-day device work across the partner', permissions: PARTNER_TECH,
  },
  partnerReadOnly: {
    id: '00000000-0000-7000-8000-000000000003', name: 'Partner Read Only', scope: 'partner', forceMfa: false,
    description: 'Read everything in the partner', permissions: [{ resource: '*', action: 'read' }],
  },
  orgAdmin: {
    id: '00000000-0000-7000-8000-000000000004', name: 'Organization Admin', scope: 'organization', forceMfa: false,
    description: 'Full access to the organisation', permissions: [{ resource: '*', action: '*' }],
  },
  orgTechnician: {
    id: '00000000-0000-7000-8000-000000000005', name: 'Organization Technician', scope: 'organization', forceMfa: false,
    description: 'Day-to-day device work in the organisation',
    permissions: PARTNER_TECH.filter((p) => p.resource !== 'organizations'),
  },
  orgReadOnly: {
    id: '00000000-0000-7000-8000-000000000006', name: 'Organization Read Only', scope: 'organization', forceMfa: false,
    description: 'Read everything in the organisation', permissions: [{ resource: '*', action: 'read' }],
  },
} as const satisfies Record<string, SystemRoleSeed>;
