// Verified domains, claimed by the organisation in context or by a partner for its own technicians
// (both shown on the single sign-on page): claim a domain, publish the TXT record it shows, verify
// it, give it up. Without a verified domain the card nudges administrators to verify one: until then
// any organisation's provider may sign in addresses of the domain, the organisation's own provider
// signs in any address, and a partner's providers sign in no one.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { Alert, Button, Card, ErrorAlert, Field, QueryState, TableFrame, useSubmit, when } from '../../ui';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type Domain = Schema<'VerifiedDomain'>;

/** Whose domains a card shows: where they live in the API, their query key and the card's words. */
export interface DomainScope {
  /** `/orgs/<id>/domains` or `/partners/<id>/domains`; null while no organisation is in context. */
  base: string | null;
  queryKey: readonly unknown[];
  title: string;
  intro: string;
  /** The warning while none is verified, for who may add one and for who may not. */
  nudge: (writable: boolean) => string;
  tableLabel: string;
  formLabel: string;
  hint: string;
}

/** The organisation in context's domains. */
export const orgDomains = (orgId: string | null): DomainScope => ({
  base: orgId ? `/orgs/${orgId}/domains` : null,
  queryKey: keys.domains.list(orgId),
  title: 'Verified domains',
  intro: 'Prove that your organisation owns its email domains. Once a domain is verified, no other organisation’s identity provider can sign in addresses of it, and your own provider signs in only addresses of your verified domains.',
  nudge: (writable) => `No domain is verified yet: until one is, another organisation’s identity provider could claim addresses of your domain. ${writable ? 'Add your email domain below and publish its TXT record.' : 'Ask an administrator to verify your email domain.'}`,
  tableLabel: 'Domains',
  formLabel: 'Add a domain',
  hint: 'Your email domain, e.g. contoso.com. Publish the TXT record it gets at the domain, then verify. Keel checks it again every day.',
});

/** A partner's own domains: those of its technicians' addresses, which its providers sign in. */
export const partnerDomains = (partner: { partnerId: string; name: string }): DomainScope => ({
  base: `/partners/${partner.partnerId}/domains`,
  queryKey: keys.domains.ofPartner(partner.partnerId),
  title: `Partner-level verified domains of ${partner.name}`,
  intro: 'Prove that the partner owns its technicians’ email domains. The partner’s own providers sign in only addresses of its verified domains, and no organisation’s identity provider can sign in addresses of them.',
  nudge: (writable) => `No domain of the partner is verified yet: until one is, the partner’s providers sign in no one. ${writable ? 'Add your technicians’ email domain below and publish its TXT record.' : 'Ask an administrator of the partner to verify its email domain.'}`,
  tableLabel: 'Partner domains',
  formLabel: 'Add a partner domain',
  hint: 'Your technicians’ email domain, e.g. msp.example. Publish the TXT record it gets at the domain, then verify. Keel checks it again every day.',
});

export function VerifiedDomains({ scope }: { scope: DomainScope }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const writable = can('organizations', 'write');
  const base = scope.base ?? '';
  const list = useQuery({ queryKey: scope.queryKey, queryFn: () => api<Page<Domain>>('GET', base, { query: { limit: 100 } }), enabled: scope.base !== null });
  const [domain, setDomain] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const refresh = () => qc.invalidateQueries({ queryKey: keys.domains.all });
  const add = useSubmit(async () => {
    await api<Domain>('POST', base, { body: { domain: domain.trim() } });
    setDomain('');
    await refresh();
  });
  const act = async (key: string, fn: () => Promise<unknown>) => {
    setError(null);
    setBusy(key);
    try {
      await fn();
      await refresh();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
    }
  };
  const verified = list.data?.data.some((d) => d.status === 'verified') ?? false;
  return (
    <Card title={scope.title}>
      <p className="muted">{scope.intro}</p>
      <QueryState query={list}>
        {() => (
          <>
            {!verified && (
              <Alert kind="warning">{scope.nudge(writable)}</Alert>
            )}
            <ErrorAlert error={error} />
            <TableFrame label={scope.tableLabel}>
              <thead>
                <tr>
                  <th>Domain</th>
                  <th>Status</th>
                  <th>TXT record to publish</th>
                  <th>Last check</th>
                  {writable && <th>Actions</th>}
                </tr>
              </thead>
              <tbody>
                {list.data?.data.length === 0 && (
                  <tr>
                    <td colSpan={writable ? 5 : 4} className="muted">
                      No domains yet.
                    </td>
                  </tr>
                )}
                {list.data?.data.map((d) => (
                  <tr key={d.id}>
                    <td>{d.domain}</td>
                    <td>
                      <span className={`badge ${d.status === 'verified' ? 'badge-ok' : 'badge-warn'}`}>{d.status}</span>
                      {d.reasonText && <div className="small muted">{d.reasonText}</div>}
                    </td>
                    <td>
                      <code>{d.txtRecord}</code>
                    </td>
                    <td>{d.checkedAt ? when(d.checkedAt) : 'never'}</td>
                    {writable && (
                      <td>
                        <div className="row">
                          <Button kind="secondary" busy={busy === `v${d.id}`} onClick={() => void act(`v${d.id}`, () => api('POST', `${base}/${d.id}/verify`))} aria-label={`Verify ${d.domain}`}>
                            Verify
                          </Button>
                          <Button kind="danger" busy={busy === `d${d.id}`} onClick={() => void act(`d${d.id}`, () => api('DELETE', `${base}/${d.id}`))} aria-label={`Remove ${d.domain}`}>
                            Remove
                          </Button>
                        </div>
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </TableFrame>
          </>
        )}
      </QueryState>
      {writable && (
        <form onSubmit={add.submit} aria-label={scope.formLabel}>
          <ErrorAlert error={add.error} />
          <Field label="Domain" required maxLength={253} value={domain} onChange={(e) => setDomain(e.target.value)} error={add.fields.domain} hint={scope.hint} />
          <Button type="submit" busy={add.busy}>
            Add domain
          </Button>
        </form>
      )}
    </Card>
  );
}
