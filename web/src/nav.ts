// The console's navigation, one table: each entry shows only when the signed-in caller may use it.
// A new page adds an entry here and a route in App.tsx.
import type { SelfProfile } from './api';

export interface NavItem {
  to: string;
  label: string;
  /** Whether the caller sees the entry (effective permissions from /auth/me). */
  show: (me: SelfProfile, can: (resource: string, action: string) => boolean) => boolean;
}

export interface NavSection {
  title: string;
  items: NavItem[];
}

const tenant = (me: SelfProfile) => me.scope !== null;

export const NAV: NavSection[] = [
  {
    title: 'Account',
    items: [
      { to: '/account', label: 'Profile', show: () => true },
      { to: '/account/security', label: 'Sign-in and security', show: () => true },
      { to: '/account/sessions', label: 'Sessions', show: () => true },
    ],
  },
  {
    title: 'Administration',
    items: [
      { to: '/admin/partners', label: 'Partners', show: (me) => me.isPlatformAdmin },
      { to: '/admin/orgs', label: 'Organisations', show: (me, can) => tenant(me) && can('organizations', 'read') },
      { to: '/admin/users', label: 'Users', show: (me, can) => tenant(me) && can('users', 'read') },
      { to: '/admin/roles', label: 'Roles', show: (me, can) => tenant(me) && can('users', 'read') },
      { to: '/admin/api-keys', label: 'API keys', show: tenant },
      { to: '/admin/audit', label: 'Audit log', show: (me, can) => tenant(me) && can('audit', 'read') },
    ],
  },
  {
    title: 'Integrations',
    items: [
      { to: '/integrations/webhooks', label: 'Webhooks', show: (me, can) => tenant(me) && can('webhooks', 'read') },
      { to: '/integrations/sso', label: 'Single sign-on', show: (me, can) => tenant(me) && can('organizations', 'read') },
      { to: '/integrations/provisioning', label: 'Provisioning', show: (me, can) => tenant(me) && can('users', 'read') },
    ],
  },
  {
    title: 'Devices',
    items: [
      { to: '/devices', label: 'Devices', show: (me, can) => tenant(me) && can('devices', 'read') },
      { to: '/devices/install', label: 'Install agent', show: (me, can) => tenant(me) && can('devices', 'read') },
      { to: '/devices/agent-versions', label: 'Agent versions', show: (me) => me.isPlatformAdmin },
      { to: '/devices/update-windows', label: 'Update windows', show: (me, can) => tenant(me) && can('devices', 'read') },
    ],
  },
];
