// The caller's API keys: create (permissions within the caller's own, the key shown once), revoke.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, dataOf, client } from '../../api';
import { Alert, Button, Card, ErrorAlert, Field, PageHeader, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { PermissionGrid } from './Roles';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type ApiKey = Schema<'ApiKey'>;

export const ApiKeys = permissionPage(ApiKeysPage, '/admin/api-keys');

function ApiKeysPage() {
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [creating, setCreating] = useState(false);
  const [created, setCreated] = useState<{ name: string; key: string } | null>(null);
  const [copied, setCopied] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const list = useQuery({ queryKey: keys.apiKeys.list(page), queryFn: async () => dataOf(await client.GET('/api/v1/api-keys', { params: { query: { page, limit: 25 } } })) });
  const revoke = async (k: ApiKey) => {
    if (!window.confirm(`Revoke the key ${k.name}? Anything using it stops working at once.`)) return;
    setError(null);
    try {
      await api('DELETE', `/api-keys/${k.id}`);
      await qc.invalidateQueries({ queryKey: keys.apiKeys.all });
    } catch (err) {
      setError(err);
    }
  };
  return (
    <>
      <PageHeader title="API keys">{!creating && <Button onClick={() => { setCreating(true); setCreated(null); }}>New API key</Button>}</PageHeader>
      {created && (
        <Alert kind="warning">
          <p>
            <strong>Copy the key {created.name} now:</strong> it is not shown again.
          </p>
          <p>
            <code className="secret" aria-label="API key, shown once">{created.key}</code>
          </p>
          <Button kind="secondary" onClick={() => void navigator.clipboard.writeText(created.key).then(() => setCopied(true), () => setCopied(false))}>
            {copied ? 'Copied' : 'Copy'}
          </Button>
        </Alert>
      )}
      {creating && (
        <CreateKey
          onDone={(k) => {
            setCreating(false);
            if (k) {
              setCreated(k);
              setCopied(false);
              void qc.invalidateQueries({ queryKey: keys.apiKeys.all });
            }
          }}
        />
      )}
      <ErrorAlert error={error} />
      <PagedTable
        query={list}
        label="API keys"
        columns={6}
        head={
          <tr>
            <th>Name</th>
            <th>Key</th>
            <th>Permissions</th>
            <th>Expires</th>
            <th>Last used</th>
            <th>
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        }
        empty={<>No API keys yet.</>}
        row={(k) => (
          <tr key={k.id}>
            <td>{k.name}</td>
            <td>
              <code>{k.keyPrefix}…</code>
            </td>
            <td className="small">{k.permissions.map((p) => `${p.resource}:${p.action}`).join(', ')}</td>
            <td>{when(k.expiresAt)}</td>
            <td>{when(k.lastUsedAt)}</td>
            <td>
              <Button kind="link" onClick={() => void revoke(k)} aria-label={`Revoke ${k.name}`}>
                Revoke
              </Button>
            </td>
          </tr>
        )}
        onPage={setPage}
      />
    </>
  );
}

function CreateKey({ onDone }: { onDone: (k: { name: string; key: string } | null) => void }) {
  const [name, setName] = useState('');
  const [expires, setExpires] = useState('');
  const [perms, setPerms] = useState<Set<string>>(new Set());
  const s = useSubmit(async () => {
    const permissions = [...perms].map((k) => {
      const i = k.lastIndexOf(':');
      return { resource: k.slice(0, i), action: k.slice(i + 1) };
    });
    const r = await api<ApiKey & { key: string }>('POST', '/api-keys', {
      body: { name: name.trim(), permissions, expiresAt: expires ? new Date(`${expires}T23:59:59Z`).toISOString() : null },
    });
    onDone({ name: r.name, key: r.key });
  });
  return (
    <Card title="New API key">
      <form onSubmit={s.submit} aria-label="New API key">
        <ErrorAlert error={s.error} />
        <Field label="Name" required maxLength={100} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} />
        <Field label="Expires (optional)" type="date" value={expires} onChange={(e) => setExpires(e.target.value)} error={s.fields.expiresAt} />
        <p className="muted small">A key can hold only permissions you hold yourself, and loses any you lose later.</p>
        {s.fields.permissions && <div className="field-error">{s.fields.permissions}</div>}
        <PermissionGrid value={perms} onChange={setPerms} />
        <div className="row">
          <Button type="submit" busy={s.busy} disabled={perms.size === 0}>
            Create key
          </Button>
          <Button type="button" kind="link" onClick={() => onDone(null)}>
            Cancel
          </Button>
        </div>
      </form>
    </Card>
  );
}
