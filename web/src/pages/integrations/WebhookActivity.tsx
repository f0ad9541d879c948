// A receiver's view of one webhook (docs/decisions.md "Webhook throttling and stats"): its last 24
// hours as charts (deliveries by outcome per hour, latency p50/p95 per hour), its latest failed
// deliveries one click from their response bodies (and a link to the page's replay section), and the
// audit of its changes.
import { useMemo, useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { client, dataOf } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';
import { Button, Card, Dialog, QueryState, when } from '../../ui';
import { Chart } from '../../components/Chart';

type Delivery = Schema<'WebhookDelivery'>;

/** "14:00" in the viewer's time zone. */
const hourLabel = (iso: string) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

export function WebhookActivity({ id }: { id: string }) {
  const t = useTenant();
  const stats = useQuery({
    queryKey: keys.webhooks.stats(id, t.query),
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks/{id}/stats', { params: { path: { id }, query: { ...t.query, window: '24h' } } })),
  });
  const charts = useMemo(() => {
    const s = stats.data;
    if (!s) return null;
    const labels = s.hours.map((h) => hourLabel(h.hour));
    return {
      labels,
      outcomes: [
        { name: 'Delivered', values: s.hours.map((h) => h.delivered), tone: 'ok' as const },
        { name: 'Failed', values: s.hours.map((h) => h.failed), tone: 'danger' as const },
        { name: 'Retrying', values: s.hours.map((h) => h.retrying), tone: 'warn' as const },
        { name: 'Pending', values: s.hours.map((h) => h.pending), tone: 'muted' as const },
      ],
      latency: [
        { name: 'p50 latency', values: s.hours.map((h) => h.p50Ms), tone: 'accent' as const },
        { name: 'p95 latency', values: s.hours.map((h) => h.p95Ms), tone: 'danger' as const },
      ],
    };
  }, [stats.data]);
  return (
    <Card title="Last 24 hours">
      <QueryState query={stats}>
        {() => {
          const s = stats.data;
          if (!s || !charts) return null;
          const { delivered, failed, retrying, pending } = s.totals;
          const slowest = Math.max(0, ...s.hours.map((h) => h.p95Ms ?? 0));
          return (
            <>
              {s.capped && <p>More than 100,000 deliveries in this window: the charts count the newest of them.</p>}
              <div className="chart-pair">
                <Chart
                  kind="stacked"
                  title="Deliveries by outcome, per hour"
                  summary={`In the last 24 hours: ${delivered} delivered, ${failed} failed, ${retrying} retrying, ${pending} pending.`}
                  labels={charts.labels}
                  series={charts.outcomes}
                  labelEvery={6}
                  labelHeading="Hour"
                />
                <Chart
                  kind="line"
                  title="Latency per hour (p50, p95)"
                  summary={slowest > 0 ? `The slowest hour's 95th percentile: ${slowest} ms.` : 'No attempts in the last 24 hours.'}
                  labels={charts.labels}
                  series={charts.latency}
                  unit="ms"
                  labelEvery={6}
                  labelHeading="Hour"
                />
              </div>
            </>
          );
        }}
      </QueryState>
      <RecentFailures id={id} />
      <WebhookAudit id={id} />
    </Card>
  );
}

/** The latest failed deliveries, each one click from its response body; replay is the page's replay section. */
function RecentFailures({ id }: { id: string }) {
  const t = useTenant();
  const [open, setOpen] = useState<Delivery | null>(null);
  const failed = useQuery({
    queryKey: keys.webhooks.deliveries(id, t.query, 'failed', 'recent'),
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks/{id}/deliveries', { params: { path: { id }, query: { ...t.query, status: 'failed', limit: 5, page: 1 } } })),
  });
  const list = failed.data?.data ?? [];
  return (
    <section aria-labelledby={`failures-${id}`}>
      <h3 id={`failures-${id}`}>Latest failed deliveries</h3>
      {list.length === 0 ? (
        <p>None.</p>
      ) : (
        <ul className="plain">
          {list.map((d) => (
            <li key={d.id}>
              {when(d.createdAt)} <code>{d.event}</code>: {d.errorMessage ?? (d.responseStatus ? `HTTP ${d.responseStatus}` : 'failed')}{' '}
              <Button kind="link" onClick={() => setOpen(d)} aria-label={`Response of the failed delivery ${d.event} of ${when(d.createdAt)}`}>
                Response
              </Button>
            </li>
          ))}
        </ul>
      )}
      <p>
        {/* Opens the page header's Replay dialog (WebhookReplay.tsx), for users who may write. */}
        <Button kind="link" onClick={() => document.getElementById('webhook-replay')?.click()}>
          Replay the events a receiver missed
        </Button>
      </p>
      {open && (
        <Dialog title={`Failed delivery ${open.event}`} onClose={() => setOpen(null)}>
          <p>
            {open.responseStatus ? `HTTP ${open.responseStatus}` : 'No answer'}
            {open.errorMessage ? `: ${open.errorMessage}` : ''}
          </p>
          <h4>Response body</h4>
          <pre className="payload" tabIndex={0} aria-label="Response body">
            {open.responseBody ?? '(none)'}
          </pre>
        </Dialog>
      )}
    </section>
  );
}

/** The webhook's audited changes (the audit list's target filter), for those who may read the audit log. */
function WebhookAudit({ id }: { id: string }) {
  const t = useTenant();
  const { can } = useAuth();
  const allowed = can('audit', 'read');
  const audit = useQuery({
    queryKey: keys.webhooks.audit(id, t.query),
    enabled: allowed,
    queryFn: async () => dataOf(await client.GET('/api/v1/audit-logs', { params: { query: { ...t.query, targetType: 'webhook', targetId: id, limit: 10, page: 1 } } })),
  });
  if (!allowed) return null;
  const entries = audit.data?.data ?? [];
  return (
    <section aria-labelledby={`audit-${id}`}>
      <h3 id={`audit-${id}`}>Changes</h3>
      {entries.length === 0 ? (
        <p>{audit.isPending ? 'Loading…' : 'No audited changes.'}</p>
      ) : (
        <ul className="plain">
          {entries.map((e) => (
            <li key={e.id}>
              {when(e.createdAt)} <code>{e.action}</code>
              {e.actorEmail ? ` by ${e.actorEmail}` : ''}
              {e.changes && e.changes.length > 0 ? ` (${e.changes.join(', ')})` : ''}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
