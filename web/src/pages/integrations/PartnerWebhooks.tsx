// Partner-wide webhooks in the console (docs/decisions.md "Webhook replay and partner-wide webhooks"):
// the create form's choice between the organisation in context and every organisation of its
// partner, and the list of the partner's partner-wide webhooks (GET /webhooks?partnerId=).
import { useQuery } from '@tanstack/react-query';
import { Link } from 'wouter';
import { client, dataOf } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';
import { Card, QueryState, Select, when } from '../../ui';

export type WebhookOwner = 'org' | 'partner';

/** The partner in context when the caller may have partner-wide webhooks (partner users and platform administrators), else null. */
export function usePartnerContext(): { partnerId: string; name: string } | null {
  const { me } = useAuth();
  const t = useTenant();
  const partnerId = me?.scope === 'partner' || me?.scope === 'system' ? t.partnerId : null;
  const partner = useQuery({
    queryKey: [...keys.partners.detail(partnerId ?? ''), 'name'],
    queryFn: async () => dataOf(await client.GET('/api/v1/partners/{id}', { params: { path: { id: partnerId ?? '' } } })),
    enabled: partnerId !== null,
    staleTime: 60_000,
  });
  return partnerId ? { partnerId, name: partner.data?.name ?? 'the partner' } : null;
}

/** The create form's "Receives events of" choice; nothing for organisation users. */
export function WebhookOwnerSelect({ value, onChange, orgName }: { value: WebhookOwner; onChange: (v: WebhookOwner) => void; orgName?: string | undefined }) {
  const partner = usePartnerContext();
  if (!partner) return null;
  return (
    <Select label="Receives events of" value={value} onChange={(e) => onChange(e.target.value as WebhookOwner)}>
      <option value="org">{orgName ? `This organisation (${orgName})` : 'This organisation'}</option>
      <option value="partner">All organisations of {partner.name}</option>
    </Select>
  );
}

/** The partner's partner-wide webhooks, under the organisation's (for who may manage them; the rest see nothing). */
export function PartnerWideWebhooks() {
  const partner = usePartnerContext();
  const list = useQuery({
    queryKey: keys.webhooks.list('partner', partner?.partnerId),
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks', { params: { query: { partnerId: partner?.partnerId ?? '', limit: 100 } } })),
    enabled: partner !== null,
    retry: false,
  });
  // A partner user without every organisation of the partner may not list them (403): nothing shown.
  if (!partner || list.error) return null;
  return (
    <Card title={`Partner-wide webhooks of ${partner.name}`}>
      <QueryState query={list}>
        {() =>
          list.data?.data.length ? (
            <table aria-label="Partner-wide webhooks">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>URL</th>
                  <th>Status</th>
                  <th>Last delivery</th>
                </tr>
              </thead>
              <tbody>
                {list.data.data.map((w) => (
                  <tr key={w.id}>
                    <td>
                      <Link href={`/integrations/webhooks/${w.id}`}>{w.name}</Link>
                    </td>
                    <td className="small secret">{w.url}</td>
                    <td>{w.status}</td>
                    <td>{when(w.lastDeliveryAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          ) : (
            <p className="muted">No partner-wide webhooks: they receive the events of every organisation of the partner.</p>
          )
        }
      </QueryState>
    </Card>
  );
}
