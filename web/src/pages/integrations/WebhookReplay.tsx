// A webhook's "Replay" action: a dialog taking the window (since, until) and the event types, which
// starts a replay (POST /webhooks/:id/replay) and follows its progress until it ends
// (GET /webhooks/:id/replays/:replayId; docs/decisions.md "Webhook replay and partner-wide webhooks").
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, client, dataOf } from '../../api';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';
import { Alert, Button, Dialog, ErrorAlert, Field, useSubmit } from '../../ui';
import type { Schema } from '../../api/types';

type Webhook = Schema<'Webhook'>;
type Replay = Schema<'WebhookReplay'>;

/** A datetime-local input's value for a moment (local time, to the minute). */
function localInput(ms: number): string {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60_000);
  return d.toISOString().slice(0, 16);
}

const STATUS_TEXT: Record<Replay['status'], string> = {
  running: 'Replaying',
  complete: 'Replay complete',
  failed: 'Replay failed',
  cancelled: 'Replay cancelled',
};

function Progress({ webhookId, replay }: { webhookId: string; replay: Replay }) {
  const t = useTenant();
  const qc = useQueryClient();
  const live = useQuery({
    queryKey: [...keys.webhooks.detail(webhookId), 'replay', replay.id],
    queryFn: async () => {
      const r = dataOf(await client.GET('/api/v1/webhooks/{id}/replays/{replayId}', { params: { path: { id: webhookId, replayId: replay.id }, query: t.query } }));
      // Its deliveries appear in the history as they are queued.
      if (r.status !== 'running') void qc.invalidateQueries({ queryKey: keys.webhooks.deliveries(webhookId) });
      return r;
    },
    initialData: replay,
    refetchInterval: (q) => (q.state.data?.status === 'running' ? 1_000 : false),
  });
  const r = live.data;
  return (
    <Alert kind={r.status === 'complete' ? 'success' : r.status === 'running' ? 'info' : 'warning'}>
      <p role="status">
        {STATUS_TEXT[r.status]}: {r.sent} of {r.total} events queued again.
      </p>
      {r.error && <p>{r.error}</p>}
    </Alert>
  );
}

/** The "Replay" button of a webhook's page and its dialog. */
export function WebhookReplay({ webhook }: { webhook: Webhook }) {
  const t = useTenant();
  const [open, setOpen] = useState(false);
  const [since, setSince] = useState(() => localInput(Date.now() - 24 * 3600_000));
  const [until, setUntil] = useState('');
  const [types, setTypes] = useState<Set<string>>(new Set(webhook.events));
  const [started, setStarted] = useState<Replay | null>(null);
  const s = useSubmit(async () => {
    const body: Record<string, unknown> = { since: new Date(since).toISOString() };
    if (until) body.until = new Date(until).toISOString();
    if (types.size < webhook.events.length) body.eventTypes = [...types];
    setStarted(await api<Replay>('POST', `/webhooks/${webhook.id}/replay`, { query: t.query, body }));
  });
  const close = () => {
    setOpen(false);
    setStarted(null);
  };
  return (
    <>
      <Button id="webhook-replay" kind="secondary" onClick={() => setOpen(true)} disabled={webhook.status !== 'active'} title={webhook.status === 'active' ? undefined : 'Only an active webhook can be replayed to'}>
        Replay
      </Button>
      {open && (
        <Dialog title="Replay events" onClose={close}>
          {started ? (
            <Progress webhookId={webhook.id} replay={started} />
          ) : (
            <form onSubmit={s.submit} aria-label="Replay events">
              <p className="hint">Every event of the window that this webhook subscribes to is sent again as a new delivery with its own event id (receivers drop the ones they already have), oldest first. Events are kept for 30 days.</p>
              <ErrorAlert error={s.error} />
              <Field label="From" type="datetime-local" required value={since} onChange={(e) => setSince(e.target.value)} error={s.fields.since} />
              <Field label="Until (optional)" type="datetime-local" value={until} onChange={(e) => setUntil(e.target.value)} error={s.fields.until} hint="Empty: until now." />
              <fieldset>
                <legend>Event types</legend>
                {s.fields.eventTypes && <div className="field-error">{s.fields.eventTypes}</div>}
                {webhook.events.map((ty) => (
                  <label key={ty} className="checkbox">
                    <input
                      type="checkbox"
                      checked={types.has(ty)}
                      onChange={(e) => {
                        const next = new Set(types);
                        if (e.target.checked) next.add(ty);
                        else next.delete(ty);
                        setTypes(next);
                      }}
                    />{' '}
                    <code>{ty}</code>
                  </label>
                ))}
              </fieldset>
              <div className="row">
                <Button type="submit" busy={s.busy} disabled={types.size === 0}>
                  Start replay
                </Button>
                <Button type="button" kind="link" onClick={close}>
                  Cancel
                </Button>
              </div>
            </form>
          )}
        </Dialog>
      )}
    </>
  );
}
