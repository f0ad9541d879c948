// Verified domains of the organisation in context (shown on the single sign-on page): claim a
// domain, publish the TXT record it shows, verify it, give it up. Without a verified domain the page
// nudges administrators to verify one: until then any organisation's provider may sign in addresses
// of the domain, and the organisation's own provider signs in any address.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, QueryState, TableFrame, useSubmit, when } from '../../ui';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type Domain = Schema<'VerifiedDomain'>;

export function VerifiedDomains() {
  const { can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const writable = can('organizations', 'write');
  const base = `/orgs/${t.orgId ?? ''}/domains`;
  const list = useQuery({ queryKey: keys.domains.list(t.orgId), queryFn: () => api<Page<Domain>>('GET', base, { query: { limit: 100 } }), enabled: Boolean(t.orgId) });
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
    <Card title="Verified domains">
      <p className="muted">
        Prove that your organisation owns its email domains. Once a domain is verified, no other organisation’s identity provider can sign in addresses of it, and your own provider signs in only addresses of your verified domains.
      </p>
      <QueryState query={list}>
        {() => (
          <>
            {!verified && (
              <Alert kind="warning">
                No domain is verified yet: until one is, another organisation’s identity provider could claim addresses of your domain. {writable ? 'Add your email domain below and publish its TXT record.' : 'Ask an administrator to verify your email domain.'}
              </Alert>
            )}
            <ErrorAlert error={error} />
            <TableFrame label="Domains">
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
        <form onSubmit={add.submit} aria-label="Add a domain">
          <ErrorAlert error={add.error} />
          <Field label="Domain" required maxLength={253} value={domain} onChange={(e) => setDomain(e.target.value)} error={add.fields.domain} hint="Your email domain, e.g. contoso.com. Publish the TXT record it gets at the domain, then verify. Keel checks it again every day." />
          <Button type="submit" busy={add.busy}>
            Add domain
          </Button>
        </form>
      )}
    </Card>
  );
}
