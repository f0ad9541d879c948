// Shared lookups of the administration pages (roles, sites, device groups).
import { useQuery } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

export type Role = Schema<'Role'>;

export type Site = Schema<'Site'>;

export type DeviceGroup = Schema<'DeviceGroup'>;

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
