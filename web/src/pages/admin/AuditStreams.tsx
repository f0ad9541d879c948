// "Audit streaming": the audit streams (SIEM destinations) of the partner in context, or the
// platform's for a platform administrator without one: create, edit, delete; status, lag, last error.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';
import { Alert, Button, Card, Dialog, ErrorAlert, Field, QueryState, Select, TableFrame, TextArea, useSubmit, when } from '../../ui';

type Stream = Schema<'AuditStream'>;
type StreamType = Stream['type'];

/** The streams' base path: a partner's, the platform's (platform administrators), or none (an organisation's users). */
function useStreamsPath(): string | null {
  const { me } = useAuth();
  const t = useTenant();
  if (!me || t.orgId) return null;
  if (me.isPlatformAdmin) return t.partnerId ? `/partners/${t.partnerId}/audit-streams` : '/audit-streams';
  return me.partnerId ? `/partners/${me.partnerId}/audit-streams` : null;
}

export function AuditStreams() {
  const { can } = useAuth();
  const path = useStreamsPath();
  const qc = useQueryClient();
  const [editing, setEditing] = useState<Stream | 'new' | null>(null);
  const key = [...keys.audit.all, 'streams', path] as const;
  const list = useQuery({ queryKey: key, enabled: path !== null, queryFn: () => api<{ data: Stream[] }>('GET', path ?? '') });
  if (!path || !can('audit', 'read')) return null;
  const writable = can('audit', 'stream');
  const refresh = () => qc.invalidateQueries({ queryKey: keys.audit.all });
  return (
    <Card
      title="Audit streaming"
      actions={writable ? <Button kind="secondary" onClick={() => setEditing('new')}>Add stream</Button> : undefined}
    >
      <p className="small">
        Every audit entry of {path.startsWith('/partners/') ? 'the partner and its organisations' : 'the platform'} is sent to each stream, in order: syslog (RFC 5424 over TLS) or signed HTTPS batches.
      </p>
      <QueryState query={list}>
        {() =>
          list.data && list.data.data.length > 0 ? (
            <TableFrame label="Audit streams">
              <thead>
                <tr>
                  <th>Destination</th>
                  <th>Status</th>
                  <th>Lag</th>
                  <th>Last error</th>
                  <th>Last sent</th>
                  <th>
                    <span className="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {list.data.data.map((s) => (
                  <tr key={s.id}>
                    <td>
                      <code>{s.url}</code> ({s.type})
                    </td>
                    <td>{s.status}</td>
                    <td>{s.lagSeconds} s</td>
                    <td>{s.lastError ?? '—'}</td>
                    <td>{when(s.lastSentAt)}</td>
                    <td>
                      {writable && (
                        <>
                          <Button kind="link" onClick={() => setEditing(s)} aria-label={`Edit stream ${s.url}`}>
                            Edit
                          </Button>
                          <DeleteButton path={`${path}/${s.id}`} url={s.url} onDone={refresh} />
                        </>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </TableFrame>
          ) : (
            <p>No audit streams.</p>
          )
        }
      </QueryState>
      {editing && (
        <StreamDialog
          path={path}
          stream={editing === 'new' ? null : editing}
          onClose={() => setEditing(null)}
          onSaved={() => {
            setEditing(null);
            void refresh();
          }}
        />
      )}
    </Card>
  );
}

function DeleteButton({ path, url, onDone }: { path: string; url: string; onDone: () => unknown }) {
  const s = useSubmit(async () => {
    await api('DELETE', path);
    await onDone();
  });
  return (
    <>
      <Button kind="link" busy={s.busy} onClick={() => s.submit()} aria-label={`Delete stream ${url}`}>
        Delete
      </Button>
      <ErrorAlert error={s.error} />
    </>
  );
}

function StreamDialog({ path, stream, onClose, onSaved }: { path: string; stream: Stream | null; onClose: () => void; onSaved: () => void }) {
  const [type, setType] = useState<StreamType>(stream?.type ?? 'syslog');
  const [url, setUrl] = useState(stream?.url ?? '');
  const [ca, setCa] = useState(stream?.tls.ca ?? '');
  const [secret, setSecret] = useState('');
  const s = useSubmit(async () => {
    const body: Record<string, unknown> = { type, url, tls: { ca: ca.trim() === '' ? null : ca } };
    if (type === 'https' && (secret !== '' || !stream?.hasSecret || stream.type !== 'https')) body.secret = secret;
    if (stream) await api('PATCH', `${path}/${stream.id}`, { body });
    else await api('POST', path, { body });
    onSaved();
  });
  return (
    <Dialog title={stream ? 'Edit audit stream' : 'Add audit stream'} onClose={onClose}>
      <form onSubmit={s.submit}>
        <Select label="Type" value={type} onChange={(e) => setType(e.target.value as StreamType)}>
          <option value="syslog">syslog (RFC 5424 over TLS)</option>
          <option value="https">HTTPS (signed batches)</option>
        </Select>
        <Field
          label="URL"
          required
          value={url}
          placeholder={type === 'syslog' ? 'syslog+tls://siem.example.com:6514' : 'https://siem.example.com/ingest'}
          onChange={(e) => setUrl(e.target.value)}
          error={s.fields.url}
        />
        <TextArea label="Trusted CA (PEM, optional)" rows={4} value={ca} onChange={(e) => setCa(e.target.value)} error={s.fields['tls.ca']} />
        {type === 'https' && (
          <Field
            label="Signing secret"
            type="password"
            autoComplete="off"
            hint={stream?.hasSecret ? 'Leave empty to keep the current secret' : '16 to 256 characters'}
            value={secret}
            onChange={(e) => setSecret(e.target.value)}
            error={s.fields.secret}
          />
        )}
        <ErrorAlert error={s.error} shown={['url', 'tls.ca', 'secret']} />
        {stream && <Alert kind="info">Changing the destination sends from where the stream stopped.</Alert>}
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Save
          </Button>
          <Button type="button" kind="link" onClick={onClose}>
            Cancel
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
