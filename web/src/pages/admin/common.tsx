// Shared pieces of the administration pages: the tenant context they act in, and lookups.
import type { ReactNode } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert } from '../../ui';

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

/** Platform administrators pick a partner or an organisation before tenant pages make sense. */
export function NeedsTenant({ children }: { children: ReactNode }) {
  const { me } = useAuth();
  const t = useTenant();
  if (me?.scope === 'system' && !t.partnerId && !t.orgId) {
    return <Alert kind="info">Pick a partner (and optionally an organisation) at the top of the page to manage it.</Alert>;
  }
  return <>{children}</>;
}

export function useRoles(kind: 'users' | 'roles' = 'users') {
  const t = useTenant();
  return useQuery({
    queryKey: ['roles', kind, t.query],
    queryFn: () => api<Page<Role>>('GET', kind === 'users' ? '/users/roles' : '/roles', { query: { ...t.query, limit: 100 } }),
  });
}

export function useSites(orgId: string | null) {
  return useQuery({
    queryKey: ['sites', orgId],
    enabled: !!orgId,
    queryFn: () => api<Page<Site>>('GET', `/orgs/${orgId ?? ''}/sites`, { query: { limit: 100 } }),
  });
}

export function useDeviceGroups(orgId: string | null) {
  return useQuery({
    queryKey: ['device-groups', orgId],
    enabled: !!orgId,
    queryFn: () => api<Page<DeviceGroup>>('GET', `/orgs/${orgId ?? ''}/device-groups`, { query: { limit: 100 } }),
  });
}

/**
 * Pages of one organisation's resources (webhooks, single sign-on): partner users and platform
 * administrators pick the organisation first; organisation users act in their own.
 */
export function NeedsOrg({ children }: { children: ReactNode }) {
  const { me } = useAuth();
  const t = useTenant();
  if (me?.scope !== 'organization' && !t.orgId) {
    return <Alert kind="info">Pick an organisation at the top of the page: this page manages one organisation at a time.</Alert>;
  }
  return <>{children}</>;
}
