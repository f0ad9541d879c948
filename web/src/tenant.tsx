// Which partner and organisation the administration pages act in. Organisation users have one;
// partner users pick one of their organisations (or the partner itself); platform administrators
// pick a partner, then optionally one of its organisations. Sent as `partnerId` / `orgId` queries.
import { createContext, useContext, useId, useMemo, useState, type ReactNode } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, type Page } from './api';
import { useAuth } from './auth';
import { keys } from './api/keys';
import type { Schema } from './api/types';

export type Org = Schema<'Organization'>;

export type Partner = Schema<'Partner'>;

export type SecuritySettings = NonNullable<Schema<'TenantSettings'>['security']>;

/** The security policy stored in a partner's or organisation's settings (the document gives stored settings as an open object; they were written through TenantSettings). */
export function securityOf(tenant: { settings: Record<string, unknown> }): SecuritySettings | undefined {
  return tenant.settings.security as SecuritySettings | undefined;
}

interface TenantValue {
  partnerId: string | null;
  orgId: string | null;
  setPartnerId: (id: string | null) => void;
  setOrgId: (id: string | null) => void;
  /** The query naming the context, for routes that take `orgId` / `partnerId`. */
  query: { orgId?: string; partnerId?: string };
}

const TenantContext = createContext<TenantValue | null>(null);

export function useTenant(): TenantValue {
  const v = useContext(TenantContext);
  if (!v) throw new Error('useTenant outside TenantProvider');
  return v;
}

function stored(key: string): string | null {
  return sessionStorage.getItem(key);
}

export function TenantProvider({ children }: { children: ReactNode }) {
  const { me } = useAuth();
  const [pickedPartner, setPickedPartner] = useState<string | null>(() => stored('keel.partnerId'));
  const [pickedOrg, setPickedOrg] = useState<string | null>(() => stored('keel.orgId'));
  const value = useMemo<TenantValue>(() => {
    const partnerId = me?.scope === 'system' ? pickedPartner : (me?.partnerId ?? null);
    const orgId = me?.scope === 'organization' ? (me.orgId ?? null) : pickedOrg;
    const query: TenantValue['query'] = {};
    if (orgId && me?.scope !== 'organization') query.orgId = orgId;
    else if (partnerId && me?.scope === 'system') query.partnerId = partnerId;
    return {
      partnerId,
      orgId,
      query,
      setPartnerId(id) {
        if (id) sessionStorage.setItem('keel.partnerId', id);
        else sessionStorage.removeItem('keel.partnerId');
        sessionStorage.removeItem('keel.orgId');
        setPickedPartner(id);
        setPickedOrg(null);
      },
      setOrgId(id) {
        if (id) sessionStorage.setItem('keel.orgId', id);
        else sessionStorage.removeItem('keel.orgId');
        setPickedOrg(id);
      },
    };
  }, [me, pickedPartner, pickedOrg]);
  return <TenantContext.Provider value={value}>{children}</TenantContext.Provider>;
}

/** The header's context picker (nothing for organisation users). */
export function TenantPicker() {
  const { me, can } = useAuth();
  const t = useTenant();
  const isSystem = me?.scope === 'system';
  const partners = useQuery({
    queryKey: keys.partners.picker(),
    queryFn: () => api<Page<Partner>>('GET', '/partners', { query: { limit: 100 } }),
    enabled: isSystem,
  });
  const orgQuery = isSystem ? (t.partnerId ? { partnerId: t.partnerId, limit: 100 } : null) : { limit: 100 };
  const id = useId();
  const orgs = useQuery({
    queryKey: keys.orgs.picker(orgQuery),
    queryFn: () => api<Page<Org>>('GET', '/orgs', { query: orgQuery ?? {} }),
    enabled: !!orgQuery && me?.scope !== 'organization' && can('organizations', 'read'),
  });
  if (!me || me.scope === 'organization' || me.scope === null) return null;
  return (
    <div className="tenant-picker">
      {isSystem && (
        <div className="pick">
          <label htmlFor={`${id}-partner`}>Partner</label>
          <select id={`${id}-partner`} value={t.partnerId ?? ''} onChange={(e) => t.setPartnerId(e.target.value || null)}>
            <option value="">— platform —</option>
            {partners.data?.data.map((p) => (
              <option key={p.id} value={p.id}>
                {p.name}
              </option>
            ))}
          </select>
        </div>
      )}
      {(!isSystem || t.partnerId) && (
        <div className="pick">
          <label htmlFor={`${id}-org`}>Organisation</label>
          <select id={`${id}-org`} value={t.orgId ?? ''} onChange={(e) => t.setOrgId(e.target.value || null)}>
            <option value="">{isSystem ? '— whole partner —' : '— partner level —'}</option>
            {orgs.data?.data.map((o) => (
              <option key={o.id} value={o.id}>
                {o.name}
              </option>
            ))}
          </select>
        </div>
      )}
    </div>
  );
}
