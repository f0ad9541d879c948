// Which partner and organisation the administration pages act in. Organisation users have one;
// partner users pick one of their organisations (or the partner itself); platform administrators
// pick a partner, then optionally one of its organisations. Sent as `partnerId` / `orgId` queries.
//
// The choice lives in the page's URL (`?partnerId=…&orgId=…`): a link carries it, the back button
// returns to the previous one, and every page of the console keeps it as people move around. The last
// choice is also remembered in localStorage for this user, so a new tab without it in its URL starts
// there (docs/decisions.md "The console's selection").
import { createContext, useContext, useEffect, useId, useMemo, type ReactNode } from 'react';
import { useQuery } from '@tanstack/react-query';
import { useLocation, useSearch } from 'wouter';
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

interface Choice {
  partnerId: string | null;
  orgId: string | null;
}

const NONE: Choice = { partnerId: null, orgId: null };
const memoryKey = (userId: string) => `keel.tenant.${userId}`;

function remembered(userId: string): Choice {
  try {
    const v = JSON.parse(localStorage.getItem(memoryKey(userId)) ?? 'null') as Partial<Choice> | null;
    return { partnerId: typeof v?.partnerId === 'string' ? v.partnerId : null, orgId: typeof v?.orgId === 'string' ? v.orgId : null };
  } catch {
    return NONE;
  }
}

/** The page's search string with the choice in it (other parameters kept). */
function searchWith(search: string, choice: Choice): string {
  const params = new URLSearchParams(search);
  params.delete('partnerId');
  params.delete('orgId');
  if (choice.partnerId) params.set('partnerId', choice.partnerId);
  if (choice.orgId) params.set('orgId', choice.orgId);
  const text = params.toString();
  return text ? `?${text}` : '';
}

export function TenantProvider({ children }: { children: ReactNode }) {
  const { me } = useAuth();
  const [location, navigate] = useLocation();
  const search = useSearch();
  // Organisation users have one organisation: nothing to choose, nothing in the URL.
  const chooses = me?.scope === 'system' || me?.scope === 'partner';
  const userId = chooses ? me.id : null;
  const params = new URLSearchParams(search);
  const inUrl = params.has('partnerId') || params.has('orgId');
  const fromUrl: Choice = { partnerId: params.get('partnerId') || null, orgId: params.get('orgId') || null };
  const picked = !userId ? NONE : inUrl ? fromUrl : remembered(userId);

  useEffect(() => {
    if (!userId) return;
    if (inUrl) localStorage.setItem(memoryKey(userId), JSON.stringify(fromUrl));
    // A page reached without the choice (a link inside the console, a new tab) takes the remembered one.
    else if (picked.partnerId || picked.orgId) navigate(`${location}${searchWith(search, picked)}`, { replace: true });
  }, [userId, location, search]);

  const value = useMemo<TenantValue>(() => {
    const partnerId = me?.scope === 'system' ? picked.partnerId : (me?.partnerId ?? null);
    const orgId = me?.scope === 'organization' ? (me.orgId ?? null) : picked.orgId;
    const query: TenantValue['query'] = {};
    if (orgId && me?.scope !== 'organization') query.orgId = orgId;
    else if (partnerId && me?.scope === 'system') query.partnerId = partnerId;
    // A new choice is a new history entry (the back button returns to the previous one), remembered at once.
    const choose = (choice: Choice) => {
      if (userId) localStorage.setItem(memoryKey(userId), JSON.stringify(choice));
      navigate(`${location}${searchWith(search, choice)}`);
    };
    return {
      partnerId,
      orgId,
      query,
      setPartnerId(id) {
        choose({ partnerId: me?.scope === 'system' ? id : null, orgId: null });
      },
      setOrgId(id) {
        choose({ partnerId: me?.scope === 'system' ? partnerId : null, orgId: id });
      },
    };
  }, [me, userId, location, search]);
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
