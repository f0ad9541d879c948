// Webhooks of the organisation in context: list, create and edit (events, headers, retry policy,
// status), secret rotation (a generated secret shown once), delivery history with each delivery's
// payload and response, retry of a failed delivery, and a test delivery.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { api, client, dataOf } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, Dialog, ErrorAlert, Field, PageHeader, QueryState, Select, useSubmit, when, duration, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { keys } from '../../api/keys';
import { EVENT_TYPES, type EventType } from '../../../../src/event-types.js';
import type { Schema } from '../../api/types';
import { WebhookReplay } from './WebhookReplay';
import { PartnerWideWebhooks, WebhookOwnerSelect, type WebhookOwner } from './PartnerWebhooks';
import { WebhookActivity } from './WebhookActivity';

type WebhookStatus = Schema<'Webhook'>['status'];

type RetryPolicy = Schema<'WebhookRetryPolicy'>;

type RetrySchedule = Webhook['retrySchedule'];

type Webhook = Schema<'Webhook'>;

type Delivery = Schema<'WebhookDelivery'>;

/** The groups of the event picker, by the first part of a type's name; a type of no group lands in "Other". */
const GROUP_TITLES: [prefix: string, title: string][] = [
  ['device', 'Devices'],
  ['alert', 'Alerts'],
  ['script', 'Scripts'],
  ['automation', 'Automations'],
  ['policy', 'Policies'],
  ['patch', 'Patches'],
  ['security', 'Security and remote access'],
  ['remote', 'Security and remote access'],
  ['user', 'Users and sessions'],
  ['session', 'Users and sessions'],
  ['webhook', 'Webhooks'],
];

/** The server's event catalogue (src/event-types.ts, the one list), grouped by what the types are about. */
export const EVENT_GROUPS: { title: string; types: EventType[] }[] = (() => {
  const groups = new Map<string, EventType[]>();
  for (const [, title] of GROUP_TITLES) groups.set(title, []);
  for (const type of EVENT_TYPES) {
    const title = GROUP_TITLES.find(([prefix]) => type.split('.')[0] === prefix)?.[1] ?? 'Other';
    groups.set(title, [...(groups.get(title) ?? []), type]);
  }
  return [...groups].filter(([, types]) => types.length > 0).map(([title, types]) => ({ title, types }));
})();

function StatusBadge({ status }: { status: string }) {
  const ok = status === 'active' || status === 'delivered';
  return <span className={`badge ${ok ? 'badge-ok' : 'badge-warn'}`}>{status}</span>;
}

type Stats = Schema<'WebhookDeliveryStats'>;

/** What `new Webhook()` of the standardwebhooks libraries takes for a Keel secret: its UTF-8 bytes in base64 (the README's "Webhooks" snippet). */
function standardWebhooksKey(secret: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(secret)));
}
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * A webhook's numbers, the same words in the list and on its page (docs/decisions.md "Webhook
 * numbers"): deliveries by their state, and the attempts they took apart from them.
 */
function DeliveryNumbers({ stats, detail = false }: { stats: Stats; detail?: boolean }) {
  const deliveries = detail
    ? `${plural(stats.total, 'delivery', 'deliveries')}: ${stats.delivered} delivered, ${stats.failed} failed, ${stats.retrying} retrying, ${stats.pending} pending`
    : `${stats.delivered} delivered, ${stats.failed} failed`;
  const attempts = stats.attempts.succeeded + stats.attempts.failed;
  return (
    <>
      <span>{deliveries}</span>
      <br />
      <span className="small muted">
        {plural(attempts, 'attempt')}: {stats.attempts.succeeded} succeeded, {stats.attempts.failed} failed
      </span>
    </>
  );
}

export const Webhooks = permissionPage(WebhookList, '/integrations/webhooks', { context: 'org' });

function WebhookList() {
  const { can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const [creating, setCreating] = useState(false);
  const list = useQuery({
    queryKey: keys.webhooks.list(t.query, status, page),
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks', { params: { query: { ...t.query, ...(status ? { status: status as WebhookStatus } : {}), page, limit: 25 } } })),
  });
  return (
    <>
      <PageHeader title="Webhooks">{can('webhooks', 'write') && !creating && <Button onClick={() => setCreating(true)}>New webhook</Button>}</PageHeader>
      {creating && (
        <Card title="New webhook">
          <WebhookForm
            onCancel={() => setCreating(false)}
            onSaved={(w) => {
              setCreating(false);
              void qc.invalidateQueries({ queryKey: keys.webhooks.all });
              navigate(`/integrations/webhooks/${w.id}`);
            }}
          />
        </Card>
      )}
      <div className="filters" role="search">
        <Select label="Status" value={status} onChange={(e) => { setStatus(e.target.value); setPage(1); }}>
          <option value="">Any</option>
          <option value="active">Active</option>
          <option value="paused">Paused</option>
          <option value="failed">Failed</option>
        </Select>
      </div>
      <PagedTable
        query={list}
        label="Webhooks"
        columns={6}
        head={
          <tr>
            <th>Name</th>
            <th>URL</th>
            <th>Events</th>
            <th>Status</th>
            <th>Deliveries (attempts)</th>
            <th>Last delivery</th>
          </tr>
        }
        empty={<>No webhooks{status ? ' with this status' : ' yet'}.</>}
        row={(w) => (
          <tr key={w.id}>
            <td>
              <Link href={`/integrations/webhooks/${w.id}`}>{w.name}</Link>
            </td>
            <td className="small secret">{w.url}</td>
            <td className="small">{w.events.length === 1 ? w.events[0] : `${w.events.length} types`}</td>
            <td>
              <StatusBadge status={w.status} />
            </td>
            <td>
              <DeliveryNumbers stats={w.deliveryStats} />
            </td>
            <td>{when(w.lastDeliveryAt)}</td>
          </tr>
        )}
        onPage={setPage}
      />
      <PartnerWideWebhooks />
    </>
  );
}

function EventPicker({ value, onChange, error }: { value: Set<string>; onChange: (v: Set<string>) => void; error?: string | undefined }) {
  // What each type means, from the server's event catalogue (GET /webhooks/event-types).
  const catalogue = useQuery({
    queryKey: keys.eventTypes.all,
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks/event-types')),
    staleTime: Infinity,
  });
  const described = new Map((catalogue.data?.data ?? []).map((t) => [t.type, t.description]));
  const toggle = (types: string[], on: boolean) => {
    const next = new Set(value);
    for (const ty of types) if (on) next.add(ty);
    else next.delete(ty);
    onChange(next);
  };
  return (
    <div className="field">
      <div className="row">
        <strong id="events-label">Events</strong>
        <span className="muted small">{value.size} chosen</span>
      </div>
      {error && <div className="field-error">{error}</div>}
      <div className="events" role="group" aria-labelledby="events-label">
        {EVENT_GROUPS.map((g) => {
          const all = g.types.every((ty) => value.has(ty));
          return (
            <fieldset key={g.title}>
              <legend>{g.title}</legend>
              <label className="checkbox small">
                <input type="checkbox" checked={all} onChange={(e) => toggle(g.types, e.target.checked)} /> All {g.title.toLowerCase()}
              </label>
              {g.types.map((ty) => {
                const description = described.get(ty);
                const descriptionId = `event-${ty.replaceAll('.', '-')}-about`;
                return (
                  <div key={ty} className="event-type">
                    <label className="checkbox">
                      <input type="checkbox" checked={value.has(ty)} onChange={(e) => toggle([ty], e.target.checked)} aria-describedby={description ? descriptionId : undefined} />{' '}
                      <code>{ty}</code>
                    </label>
                    {description && (
                      <div id={descriptionId} className="muted small event-about">
                        {description}
                      </div>
                    )}
                  </div>
                );
              })}
            </fieldset>
          );
        })}
      </div>
    </div>
  );
}

/** A header being edited: `stored` while its value is the one already saved (left empty, it is kept). */
interface HeaderDraft {
  key: string;
  value: string;
  stored: boolean;
}

function HeadersEditor({ value, onChange, fields }: { value: HeaderDraft[]; onChange: (v: HeaderDraft[]) => void; fields: Record<string, string> }) {
  const set = (i: number, patch: Partial<HeaderDraft>) => onChange(value.map((h, j) => (j === i ? { ...h, ...patch } : h)));
  return (
    <div className="field">
      <strong>Custom headers</strong>
      <p className="hint">Sent with every delivery. Keel's own headers (signature, event, delivery id, content type) cannot be overridden.</p>
      {fields.headers && <div className="field-error">{fields.headers}</div>}
      {value.map((h, i) => (
        <div className="kv-row" key={i}>
          <Field label={`Header ${i + 1} name`} required maxLength={100} value={h.key} onChange={(e) => set(i, { key: e.target.value })} error={fields[`headers.${i}.key`] ?? fields[`headers.${i}`]} />
          <Field
            label={`Header ${i + 1} value`}
            maxLength={2000}
            value={h.value}
            onChange={(e) => set(i, { value: e.target.value })}
            error={fields[`headers.${i}.value`]}
            hint={h.stored ? 'A value is saved (never shown); leave empty to keep it.' : undefined}
          />
          <Button type="button" kind="link" onClick={() => onChange(value.filter((_, j) => j !== i))} aria-label={`Remove header ${i + 1}`}>
            Remove
          </Button>
        </div>
      ))}
      {value.length < 20 && (
        <Button type="button" kind="secondary" onClick={() => onChange([...value, { key: '', value: '', stored: false }])}>
          Add a header
        </Button>
      )}
    </div>
  );
}

const POLICY_FIELDS: { key: keyof RetryPolicy; label: string; hint: string; step?: string }[] = [
  { key: 'maxRetries', label: 'Retries after the first attempt', hint: '0-10 (default 5)' },
  { key: 'initialDelayMs', label: 'First retry after (ms)', hint: '100-3,600,000 (default 1,000)' },
  { key: 'backoffMultiplier', label: 'Backoff multiplier', hint: '1-10 (default 2)', step: '0.1' },
  { key: 'maxDelayMs', label: 'Longest wait (ms)', hint: '100-86,400,000 (default 300,000)' },
];

function WebhookForm({ webhook, onSaved, onCancel }: { webhook?: Webhook; onSaved: (w: Webhook) => void; onCancel: () => void }) {
  const t = useTenant();
  const [name, setName] = useState(webhook?.name ?? '');
  const [url, setUrl] = useState(webhook ? '' : 'https://');
  const [secret, setSecret] = useState('');
  const [events, setEvents] = useState<Set<string>>(new Set(webhook?.events ?? []));
  const [headers, setHeaders] = useState<HeaderDraft[]>(() => (webhook?.headers ?? []).map((h) => ({ key: h.key, value: '', stored: true })));
  const [status, setStatus] = useState<WebhookStatus>(webhook?.status ?? 'active');
  const [owner, setOwner] = useState<WebhookOwner>('org');
  const [schedule, setSchedule] = useState<RetrySchedule>(webhook?.retrySchedule ?? 'default');
  const [rateLimit, setRateLimit] = useState(webhook?.rateLimitPerSecond ? String(webhook.rateLimitPerSecond) : '');
  const [policy, setPolicy] = useState<Record<keyof RetryPolicy, string>>(() => {
    const p = webhook?.retrySchedule === 'custom' ? webhook.retryPolicy : undefined;
    return { maxRetries: String(p?.maxRetries ?? ''), initialDelayMs: String(p?.initialDelayMs ?? ''), backoffMultiplier: String(p?.backoffMultiplier ?? ''), maxDelayMs: String(p?.maxDelayMs ?? '') };
  });
  const s = useSubmit(async () => {
    const retryPolicy: Partial<RetryPolicy> = {};
    for (const f of POLICY_FIELDS) if (policy[f.key].trim() !== '') retryPolicy[f.key] = Number(policy[f.key]);
    // A saved header left empty is sent without a value: the server keeps the stored one.
    const sent = headers.map((h) => (h.stored && h.value === '' ? { key: h.key } : { key: h.key, value: h.value }));
    const body: Record<string, unknown> = { name: name.trim(), events: [...events], headers: sent };
    // The schedule is sent when it is custom (its numbers) or when it changed.
    if (schedule === 'custom') Object.assign(body, { retrySchedule: schedule, retryPolicy });
    else if (schedule !== webhook?.retrySchedule) body.retrySchedule = schedule;
    if (url.trim()) body.url = url.trim();
    if (secret) body.secret = secret;
    const limit = rateLimit.trim() === '' ? null : Number(rateLimit);
    if (limit !== (webhook?.rateLimitPerSecond ?? null)) body.rateLimitPerSecond = limit;
    if (webhook) {
      if (status !== webhook.status) body.status = status;
      return onSaved(await api<Webhook>('PATCH', `/webhooks/${webhook.id}`, { query: t.query, body }));
    }
    // A partner-wide webhook names its partner instead of the organisation in context.
    if (owner === 'partner') return onSaved(await api<Webhook>('POST', '/webhooks', { body: { ...body, partnerId: t.partnerId } }));
    return onSaved(await api<Webhook>('POST', '/webhooks', { query: t.query, body }));
  });
  return (
    <form onSubmit={s.submit} aria-label={webhook ? 'Edit webhook' : 'New webhook'}>
      <ErrorAlert error={s.error} />
      <Field label="Name" required maxLength={255} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} />
      {!webhook && <WebhookOwnerSelect value={owner} onChange={setOwner} />}
      <Field
        label="URL"
        type="url"
        required={!webhook}
        maxLength={2048}
        value={url}
        onChange={(e) => setUrl(e.target.value)}
        error={s.fields.url}
        hint={webhook ? `Now ${webhook.url} (credentials hidden). Leave empty to keep it.` : 'HTTPS; private and loopback addresses are refused.'}
      />
      <Field
        label={webhook ? 'New signing secret (optional)' : 'Signing secret (optional)'}
        type="password"
        autoComplete="new-password"
        minLength={16}
        maxLength={256}
        value={secret}
        onChange={(e) => setSecret(e.target.value)}
        error={s.fields.secret}
        hint={webhook ? 'Replaces the secret at once. To keep the old one valid for a day, use Rotate secret instead.' : '16-256 characters. Deliveries are signed with HMAC-SHA256 of it.'}
      />
      {webhook && (
        <Select label="Status" value={status} onChange={(e) => setStatus(e.target.value as WebhookStatus)} error={s.fields.status}>
          <option value="active">Active</option>
          <option value="paused">Paused (events are not delivered)</option>
          {webhook.status === 'failed' && <option value="failed">Failed (stopped after repeated failures)</option>}
        </Select>
      )}
      <EventPicker value={events} onChange={setEvents} error={s.fields.events} />
      <HeadersEditor value={headers} onChange={setHeaders} fields={s.fields} />
      <fieldset className="card">
        <legend>Retry policy</legend>
        <Select label="Retry schedule" value={schedule} onChange={(e) => setSchedule(e.target.value as RetrySchedule)} error={s.fields.retrySchedule}>
          <option value="default">Default: 5 retries within about 30 seconds</option>
          <option value="extended">Extended: 7 retries over about 27 hours</option>
          <option value="custom">Custom</option>
        </Select>
        {schedule === 'extended' && <p className="hint">Retries after 5 seconds, 5 minutes, 30 minutes, 2, 5, 10 and 10 hours (each moved by up to 10 % at random), for receivers that may be down for a day.</p>}
        {schedule === 'custom' && (
          <>
        <p className="hint">Leave a field empty for its default. The wait doubles (by the multiplier) after each failed attempt, up to the longest wait.</p>
        <div className="filters">
          {POLICY_FIELDS.map((f) => (
            <Field
              key={f.key}
              label={f.label}
              type="number"
              step={f.step ?? '1'}
              value={policy[f.key]}
              onChange={(e) => setPolicy({ ...policy, [f.key]: e.target.value })}
              hint={f.hint}
              error={s.fields[`retryPolicy.${f.key}`]}
            />
          ))}
        </div>
          </>
        )}
      </fieldset>
      <Field
        label="Rate limit (deliveries per second)"
        type="number"
        min={1}
        max={1000}
        step="1"
        value={rateLimit}
        onChange={(e) => setRateLimit(e.target.value)}
        error={s.fields.rateLimitPerSecond}
        hint="1-1000; empty for no limit. Deliveries beyond it wait in the queue; a 429 answer with Retry-After is honoured either way."
      />
      <div className="row">
        <Button type="submit" busy={s.busy} disabled={events.size === 0}>
          {webhook ? 'Save changes' : 'Create webhook'}
        </Button>
        <Button type="button" kind="link" onClick={onCancel}>
          Cancel
        </Button>
      </div>
    </form>
  );
}

export const WebhookDetail = permissionPage(WebhookPage, '/integrations/webhooks', { context: 'org' });

function WebhookPage({ id }: { id: string }) {
  const { can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const [editing, setEditing] = useState(false);
  const [secret, setSecret] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const writable = can('webhooks', 'write');
  const hook = useQuery({ queryKey: keys.webhooks.detail(id, t.query), queryFn: async () => dataOf(await client.GET('/api/v1/webhooks/{id}', { params: { path: { id }, query: t.query } })) });
  const refresh = () => qc.invalidateQueries({ queryKey: keys.webhooks.detail(id) });
  const act = async (fn: () => Promise<void>) => {
    setError(null);
    setNotice(null);
    try {
      await fn();
    } catch (err) {
      setError(err);
    }
  };
  const rotate = () =>
    act(async () => {
      if (!window.confirm('Rotate the signing secret? The previous one keeps signing beside the new one for 24 hours.')) return;
      const r = await api<Webhook & { secret?: string }>('POST', `/webhooks/${id}/rotate-secret`, { query: t.query, body: {} });
      setSecret(r.secret ?? null);
      await refresh();
    });
  const sendTest = () =>
    act(async () => {
      await api('POST', `/webhooks/${id}/test`, { query: t.query, body: {} });
      setNotice('A webhook.test delivery is queued: it appears in the history below.');
      // The history, this page's delivery counts and the list's: every view of webhooks.
      await qc.invalidateQueries({ queryKey: keys.webhooks.all });
    });
  const remove = () =>
    act(async () => {
      if (!window.confirm('Delete this webhook and its whole delivery history?')) return;
      await api('DELETE', `/webhooks/${id}`, { query: t.query });
      // Leave first: the deleted webhook's page must not refetch itself into a 404.
      navigate('/integrations/webhooks');
      await qc.invalidateQueries({ queryKey: keys.webhooks.all });
    });
  return (
    <QueryState query={hook}>
      {() => {
        const w = hook.data;
        if (!w) return null;
        return (
          <>
            <PageHeader title={`Webhook ${w.name}`}>
              {writable && (
                <>
                  <Button kind="secondary" onClick={() => void sendTest()}>
                    Send test
                  </Button>
                  <Button kind="secondary" onClick={() => void rotate()}>
                    Rotate secret
                  </Button>
                  <WebhookReplay webhook={w} />
                  {!editing && <Button onClick={() => setEditing(true)}>Edit</Button>}
                  <Button kind="danger" onClick={() => void remove()}>
                    Delete
                  </Button>
                </>
              )}
            </PageHeader>
            <p>
              <Link href="/integrations/webhooks">All webhooks</Link>
            </p>
            <ErrorAlert error={error} />
            {notice && <Alert kind="success">{notice}</Alert>}
            {secret && (
              <Alert kind="warning">
                <p>
                  <strong>Copy the new signing secret now:</strong> it is not shown again. The previous secret keeps signing for 24 hours.
                </p>
                <p>
                  <code className="secret" aria-label="Signing secret, shown once">
                    {secret}
                  </code>
                </p>
                <Button kind="secondary" onClick={() => void navigator.clipboard.writeText(secret)}>
                  Copy
                </Button>
                <p>
                  For the <code>standardwebhooks</code> libraries (<code>new Webhook(…)</code>), which take the key in base64, as the README shows:
                </p>
                <p>
                  <code className="secret" aria-label="The secret for new Webhook() of standardwebhooks">
                    {standardWebhooksKey(secret)}
                  </code>
                </p>
              </Alert>
            )}
            {editing ? (
              <Card title="Edit webhook">
                <WebhookForm
                  webhook={w}
                  onCancel={() => setEditing(false)}
                  onSaved={() => {
                    setEditing(false);
                    void qc.invalidateQueries({ queryKey: keys.webhooks.all });
                  }}
                />
              </Card>
            ) : (
              <Card title="Settings">
                <dl className="facts">
                  <dt>Status</dt>
                  <dd>
                    <StatusBadge status={w.status} />
                  </dd>
                  <dt>URL</dt>
                  <dd className="secret">{w.url}</dd>
                  <dt>Events</dt>
                  <dd>{w.events.join(', ')}</dd>
                  <dt>Custom headers</dt>
                  <dd>{w.headers.length ? w.headers.map((h) => h.key).join(', ') : 'none'}</dd>
                  <dt>Signing secret</dt>
                  <dd>{w.hasSecret ? `set${w.previousSecretExpiresAt ? `; the previous one signs too until ${when(w.previousSecretExpiresAt)}` : ''}` : 'none (deliveries are unsigned)'}</dd>
                  <dt>Retries</dt>
                  <dd>
                    {w.retrySchedule === 'extended'
                      ? 'extended: 7 retries over about 27 hours (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h)'
                      : `${w.retrySchedule}: ${w.retryPolicy.maxRetries} after ${duration(w.retryPolicy.initialDelayMs)}, ×${w.retryPolicy.backoffMultiplier}, at most ${duration(w.retryPolicy.maxDelayMs)} apart`}
                  </dd>
                  <dt>Rate limit</dt>
                  <dd>{w.rateLimitPerSecond ? `${w.rateLimitPerSecond} deliveries a second` : 'none'}</dd>
                  <dt>Deliveries</dt>
                  <dd>
                    <DeliveryNumbers stats={w.deliveryStats} detail />
                  </dd>
                </dl>
              </Card>
            )}
            <WebhookActivity id={id} />
            <Deliveries id={id} writable={writable} />
          </>
        );
      }}
    </QueryState>
  );
}

function Deliveries({ id, writable }: { id: string; writable: boolean }) {
  const t = useTenant();
  const qc = useQueryClient();
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const [open, setOpen] = useState<Delivery | null>(null);
  const [error, setError] = useState<unknown>(null);
  const list = useQuery({
    queryKey: keys.webhooks.deliveries(id, t.query, status, page),
    queryFn: async () => dataOf(await client.GET('/api/v1/webhooks/{id}/deliveries', { params: { path: { id }, query: { ...t.query, ...(status ? { status: status as Delivery['status'] } : {}), page, limit: 25 } } })),
  });
  const retry = async (d: Delivery) => {
    setError(null);
    try {
      await api('POST', `/webhooks/${id}/retry/${d.id}`, { query: t.query });
      await qc.invalidateQueries({ queryKey: keys.webhooks.all });
    } catch (err) {
      setError(err);
    }
  };
  return (
    <Card
      title="Delivery history"
      actions={
        <Button kind="secondary" onClick={() => void qc.invalidateQueries({ queryKey: keys.webhooks.all })}>
          Refresh
        </Button>
      }
    >
      <div className="filters" role="search">
        <Select label="Delivery status" value={status} onChange={(e) => { setStatus(e.target.value); setPage(1); }}>
          <option value="">Any</option>
          <option value="pending">Pending</option>
          <option value="delivered">Delivered</option>
          <option value="retrying">Retrying</option>
          <option value="failed">Failed</option>
        </Select>
      </div>
      <ErrorAlert error={error} />
      <PagedTable
        query={list}
        label="Deliveries"
        columns={6}
        head={
          <tr>
            <th>When</th>
            <th>Event</th>
            <th>Status</th>
            <th>Attempt</th>
            <th>Response</th>
            <th>
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        }
        empty={<>No deliveries{status ? ' with this status' : ' yet'}.</>}
        row={(d) => (
          <tr key={d.id}>
            <td>{when(d.createdAt)}</td>
            <td>
              <code>{d.event}</code>
            </td>
            <td>
              <StatusBadge status={d.status} />
            </td>
            <td>{d.attempt}</td>
            <td>{d.responseStatus ? `HTTP ${d.responseStatus}${d.responseTimeMs !== null ? `, ${d.responseTimeMs} ms` : ''}` : (d.errorMessage ?? '—')}</td>
            <td>
              <Button kind="link" onClick={() => setOpen(d)} aria-label={`View delivery ${d.event} of ${when(d.createdAt)}`}>
                View
              </Button>
              {writable && d.status === 'failed' && (
                <Button kind="link" onClick={() => void retry(d)} aria-label={`Retry delivery ${d.event} of ${when(d.createdAt)}`}>
                  Retry
                </Button>
              )}
            </td>
          </tr>
        )}
        onPage={setPage}
      />
      {open && (
        <Dialog title={`Delivery ${open.event}`} onClose={() => setOpen(null)}>
          <dl className="facts">
            <dt>Status</dt>
            <dd>{open.status}</dd>
            <dt>Attempt</dt>
            <dd>{open.attempt}</dd>
            <dt>Delivered</dt>
            <dd>{when(open.deliveredAt)}</dd>
            <dt>Next attempt</dt>
            <dd>{when(open.nextAttemptAt)}</dd>
            <dt>Response</dt>
            <dd>{open.responseStatus ? `HTTP ${open.responseStatus}` : '—'}</dd>
            {open.errorMessage && (
              <>
                <dt>Error</dt>
                <dd>{open.errorMessage}</dd>
              </>
            )}
          </dl>
          <h3>Payload</h3>
          <pre className="payload" tabIndex={0} aria-label="Payload">
            {JSON.stringify(open.payload, null, 2)}
          </pre>
          <h3>Response body</h3>
          <pre className="payload" tabIndex={0} aria-label="Response body">
            {open.responseBody ?? '(none)'}
          </pre>
        </Dialog>
      )}
    </Card>
  );
}
