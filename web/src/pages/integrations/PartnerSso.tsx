// The partner's own single sign-on in the console (docs/decisions.md "Partner-level SSO"): shown on
// the single sign-on page under the organisation's, for who may manage the partner (partner users
// with every organisation, platform administrators): its sign-in page `/login/<slug>` (with the slug
// editable), its providers (GET /sso/providers?partnerId=), a create form naming `partnerId` and the
// partner's verified domains (Domains.tsx, partner scope). A provider's page is the organisations'
// one; `usePartnerScope` feeds its form the partner's roles, organisations and members.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { useLocation } from 'wouter';
import { api, client, dataOf, type Page } from '../../api';
import { useAuth } from '../../auth';
import { keys } from '../../api/keys';
import { Button, Card, ErrorAlert, Field, MfaNote, QueryState, Select, useSubmit } from '../../ui';
import type { Role } from '../admin/common';
import type { Schema } from '../../api/types';
import { hasCode } from '../../api/errors';
import { usePartnerContext } from './PartnerWebhooks';
import { VerifiedDomains, partnerDomains } from './Domains';
import { CopyValue, ProviderRow, type Provider } from './Sso';

/** The partner's sign-in page as people open it. */
export const partnerLoginLink = (slug: string) => `${window.location.origin}/login/${slug}`;

/** The query naming a partner for the caller: platform administrators name it, partner users act in their own. */
function partnerQuery(scope: string | null | undefined, partnerId: string): { partnerId?: string } {
  return scope === 'system' ? { partnerId } : {};
}

/** What a partner provider's form offers: the partner's roles, organisations and members. */
export function usePartnerScope(partnerId: string | null) {
  const { me } = useAuth();
  const q = partnerQuery(me?.scope, partnerId ?? '');
  const enabled = partnerId !== null;
  const roles = useQuery({
    queryKey: [...keys.roles.all, 'partner-sso', partnerId],
    queryFn: () => api<Page<Role>>('GET', '/users/roles', { query: { ...q, limit: 100 } }),
    enabled,
  });
  const orgs = useQuery({
    queryKey: [...keys.orgs.all, 'partner-sso', partnerId],
    queryFn: () => api<Page<Schema<'Organization'>>>('GET', '/orgs', { query: { ...q, limit: 100 } }),
    enabled,
  });
  const members = useQuery({
    queryKey: [...keys.users.all, 'partner-sso', partnerId],
    queryFn: () => api<Page<Schema<'User'>>>('GET', '/users', { query: { ...q, limit: 100 } }),
    enabled,
  });
  return {
    roles: (roles.data?.data ?? []).filter((r) => r.scope === 'partner' && (r.partnerId === null || r.partnerId === partnerId)),
    orgs: (orgs.data?.data ?? []).filter((o) => o.partnerId === partnerId).map((o) => ({ id: o.id, name: o.name })),
    members: (members.data?.data ?? []).filter((u) => u.partnerId === partnerId).map((u) => ({ id: u.id, name: `${u.name} (${u.email})` })),
  };
}

/**
 * A partner's slug (its sign-in page `/login/<slug>`) with Change address, for the partner's
 * administrators and the platform's Partners page: a slug another partner has (409
 * `partner_slug_taken`) or a malformed one (400, `details.fields.slug`) is said beside the field.
 */
export function PartnerSlugForm({ partnerId, slug, label = 'Partner sign-in address', onChanged }: { partnerId: string; slug: string; label?: string; onChanged?: (slug: string) => void }) {
  const qc = useQueryClient();
  const [value, setValue] = useState<string | null>(null);
  const s = useSubmit(async () => {
    const next = (value ?? '').trim();
    await api('PATCH', `/partners/${partnerId}`, { body: { slug: next } });
    setValue(null);
    await qc.invalidateQueries({ queryKey: keys.partners.all });
    onChanged?.(next);
  });
  // The 409 has no field in its details: said beside the field as a malformed slug is.
  const taken = hasCode(s.error, 'partner_slug_taken') ? s.error.message : undefined;
  return (
    <form onSubmit={s.submit} aria-label={label} className="row">
      <Field
        label="Address name (slug)"
        required
        maxLength={63}
        value={value ?? slug}
        onChange={(e) => setValue(e.target.value)}
        error={s.fields.slug ?? taken}
        hint="Lowercase letters, digits and inner hyphens: the page is /login/<slug>. The old address stops working."
      />
      <Button type="submit" kind="secondary" busy={s.busy} disabled={value === null || value.trim() === slug}>
        Change address
      </Button>
      {!taken && <ErrorAlert error={s.error} shown={['slug']} />}
    </form>
  );
}

/** The partner's sign-in page with Copy, and its slug to change. */
function PartnerSignInPage({ partnerId }: { partnerId: string }) {
  const { can } = useAuth();
  const partner = useQuery({ queryKey: keys.partners.detail(partnerId), queryFn: async () => dataOf(await client.GET('/api/v1/partners/{id}', { params: { path: { id: partnerId } } })) });
  return (
    <QueryState query={partner}>
      {() => {
        const p = partner.data;
        if (!p) return null;
        return (
          <>
            <p>The partner’s technicians sign in at its own page, which starts single sign-on with the active provider below (else the one in testing).</p>
            <dl className="facts">
              <dt>Partner sign-in page</dt>
              <dd>
                <CopyValue label="partner sign-in page" value={partnerLoginLink(p.slug)} />
              </dd>
            </dl>
            {can('organizations', 'write') && <PartnerSlugForm partnerId={partnerId} slug={p.slug} />}
          </>
        );
      }}
    </QueryState>
  );
}

/** The partner's own providers and verified domains, under the organisation's (nothing for who may not manage them). */
export function PartnerSsoProviders() {
  const { can } = useAuth();
  const partner = usePartnerContext();
  const { me } = useAuth();
  const [creating, setCreating] = useState(false);
  const list = useQuery({
    queryKey: [...keys.ssoProviders.all, 'partner', partner?.partnerId],
    queryFn: () => api<Page<Provider>>('GET', '/sso/providers', { query: { partnerId: partner?.partnerId ?? '', limit: 100 } }),
    enabled: partner !== null,
    retry: false,
  });
  // A partner user without every organisation of the partner may not list them (403): nothing shown.
  if (!partner || list.error || !me) return null;
  return (
    <>
      <Card title={`Partner-level SSO of ${partner.name}`}>
        <PartnerSignInPage partnerId={partner.partnerId} />
        {can('organizations', 'write') && !creating && (
          <p>
            <Button kind="secondary" onClick={() => setCreating(true)}>
              New partner provider
            </Button>
          </p>
        )}
        {creating && <CreatePartnerProvider partnerId={partner.partnerId} onCancel={() => setCreating(false)} />}
        <QueryState query={list}>
          {() =>
            list.data?.data.length ? (
              <table aria-label="Partner providers">
                <thead>
                  <tr>
                    <th>Name</th>
                    <th>Protocol</th>
                    <th>Status</th>
                    <th>Password sign-in</th>
                    <th>Changed</th>
                  </tr>
                </thead>
                <tbody>
                  {list.data.data.map((p) => (
                    <ProviderRow key={p.id} provider={p} />
                  ))}
                </tbody>
              </table>
            ) : (
              <p className="muted">No partner providers yet: they sign in the partner’s own technicians (addresses of the partner’s verified domains).</p>
            )
          }
        </QueryState>
      </Card>
      <VerifiedDomains scope={partnerDomains(partner)} />
    </>
  );
}

function CreatePartnerProvider({ partnerId, onCancel }: { partnerId: string; onCancel: () => void }) {
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const [type, setType] = useState<'oidc' | 'saml'>('oidc');
  const [name, setName] = useState('');
  const s = useSubmit(async () => {
    const p = await api<Provider>('POST', '/sso/providers', { body: { name: name.trim(), type, partnerId } });
    await qc.invalidateQueries({ queryKey: keys.ssoProviders.all });
    navigate(`/integrations/sso/${p.id}`);
  });
  return (
    <form onSubmit={s.submit} aria-label="New partner provider">
      <ErrorAlert error={s.error} />
      <MfaNote />
      <Select label="Protocol" value={type} onChange={(e) => setType(e.target.value as 'oidc' | 'saml')}>
        <option value="oidc">OpenID Connect</option>
        <option value="saml">SAML 2.0</option>
      </Select>
      <Field label="Name" required maxLength={255} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} hint="What technicians see on the sign-in button: Sign in with …" />
      <div className="row">
        <Button type="submit" busy={s.busy}>
          Create partner provider
        </Button>
        <Button type="button" kind="link" onClick={onCancel}>
          Cancel
        </Button>
      </div>
    </form>
  );
}
