// The console's one factory of query keys (docs/decisions.md, "The console's API types"). Every
// `useQuery` and every `invalidateQueries` takes its key from here. Keys nest by resource: a
// resource's `all` is a prefix of its lists, its details and what hangs under a detail (a webhook's
// deliveries, a role's effective permissions), so invalidating `keys.webhooks.all` after a write
// refreshes every view of webhooks, and `keys.webhooks.detail(id)` the page of one with its history.

type Query = Readonly<Record<string, unknown>> | null | undefined;

const resource = <N extends string>(name: N) => {
  const all = [name] as const;
  return {
    all,
    lists: () => [name, 'list'] as const,
    list: (...args: unknown[]) => [name, 'list', ...args] as const,
    detail: (id: string) => [name, 'detail', id] as const,
  };
};

const webhooks = resource('webhooks');
const devices = resource('devices');
const roles = resource('roles');

export const keys = {
  sessions: { all: ['sessions'] as const },
  passkeys: { all: ['passkeys'] as const },
  ssoCheck: (org: string | null) => ['sso-check', org] as const,
  catalog: { all: ['permissions', 'catalog'] as const },
  audit: { ...resource('audit') },
  partners: { ...resource('partners'), picker: () => ['partners', 'picker'] as const },
  orgs: {
    ...resource('orgs'),
    picker: (query: Query) => ['orgs', 'picker', query] as const,
    forInvite: (tenant: Query) => ['orgs', 'invite', tenant] as const,
  },
  sites: { ...resource('sites'), ofOrg: (orgId: string | null) => ['sites', 'list', orgId] as const },
  deviceGroups: { ...resource('device-groups'), ofOrg: (orgId: string | null) => ['device-groups', 'list', orgId] as const },
  users: { ...resource('users') },
  invitations: { ...resource('invitations'), preview: (token: string) => ['invitations', 'preview', token] as const },
  roles: {
    ...roles,
    detail: (id: string, tenant?: Query) => (tenant === undefined ? roles.detail(id) : ([...roles.detail(id), tenant] as const)),
    /** Effective permissions of a role: under `roles`, so a role write refreshes them too. */
    effectiveAll: () => ['roles', 'effective'] as const,
    effective: (id: string | null, tenant: Query) => ['roles', 'effective', id, tenant] as const,
  },
  apiKeys: { ...resource('api-keys') },
  webhooks: {
    ...webhooks,
    detail: (id: string, tenant?: Query) => (tenant === undefined ? webhooks.detail(id) : ([...webhooks.detail(id), tenant] as const)),
    /** A webhook's delivery history: under its detail, whose delivery counts change with it. */
    deliveries: (id: string, ...args: unknown[]) => [...webhooks.detail(id), 'deliveries', ...args] as const,
    /** A webhook's last 24 hours (its charts): under its detail, so a test or a retry refreshes them. */
    stats: (id: string, ...args: unknown[]) => [...webhooks.detail(id), 'stats', ...args] as const,
    /** A webhook's audited changes: under its detail, so an edit on its page refreshes them. */
    audit: (id: string, ...args: unknown[]) => [...webhooks.detail(id), 'audit', ...args] as const,
  },
  domains: {
    ...resource('domains'),
    /** A partner's own domains: a list apart from any organisation's (`list(orgId)`). */
    ofPartner: (partnerId: string) => ['domains', 'list', 'partner', partnerId] as const,
  },
  ssoProviders: { ...resource('sso-providers') },
  ssoPresets: { all: ['sso-presets'] as const },
  scimTokens: { ...resource('scim-tokens') },
  scimSettings: { ...resource('scim-settings') },
  scimUsers: { ...resource('scim-users') },
  /** The event catalogue: the same for every tenant and unchanged while the server runs. */
  eventTypes: { all: ['event-types'] as const },
  devices: {
    ...devices,
    /** A device's update history: under its detail, so an Update now or a decommission refreshes it. */
    history: (id: string, page: number) => [...devices.detail(id), 'update-history', page] as const,
    /** What its next heartbeat would be offered: under its detail, and refreshed after a pin change. */
    decision: (id: string) => [...devices.detail(id), 'update-decision'] as const,
  },
  enrollmentKeys: { ...resource('enrollment-keys') },
  agentVersions: { ...resource('agent-versions'), distribution: (query: Query) => ['agent-versions', 'distribution', query] as const },
  agentUpdateSettings: { all: ['agent-update-settings'] as const, of: (path: string | null) => ['agent-update-settings', path] as const },
};
