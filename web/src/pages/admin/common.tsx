// Shared lookups of the administration pages (roles, sites, device groups).
import { useQuery } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';

export interface Role {
  id: string;
  name: string;
  description: string | null;
  scope: 'system' | 'partner' | 'organization';
  partnerId: string | null;
  orgId: string | null;
  isSystem: boolean;
  parentRoleId: string | null;
  forceMfa: boolean;
  permissions: { resource: string; action: string }[];
  userCount: number;
  createdAt: string;
  updatedAt: string;
}

export interface Site {
  id: string;
  orgId: string;
  name: string;
  createdAt: string;
}

export interface DeviceGroup {
  id: string;
  orgId: string;
  siteId: string | null;
  name: string;
  createdAt: string;
}

export function useRoles(kind: 'users' | 'roles' = 'users') {
  const t = useTenant();
  return useQuery({
    queryKey: keys.roles.list(kind, t.query),
    queryFn: () => api<Page<Role>>('GET', kind === 'users' ? '/users/roles' : '/roles', { query: { ...t.query, limit: 100 } }),
  });
}

export function useSites(orgId: string | null) {
  return useQuery({
    queryKey: keys.sites.ofOrg(orgId),
    enabled: !!orgId,
    queryFn: () => api<Page<Site>>('GET', `/orgs/${orgId ?? ''}/sites`, { query: { limit: 100 } }),
  });
}

export function useDeviceGroups(orgId: string | null) {
  return useQuery({
    queryKey: keys.deviceGroups.ofOrg(orgId),
    enabled: !!orgId,
    queryFn: () => api<Page<DeviceGroup>>('GET', `/orgs/${orgId ?? ''}/device-groups`, { query: { limit: 100 } }),
  });
}
