// The audit log of the scope in context: filters, pagination, each entry's changes, and export.
import { Fragment, useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, download, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Button, ErrorAlert, Field, PageHeader, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';
import { AuditStreams } from './AuditStreams';

type AuditEntry = Schema<'AuditEntry'>;

const EMPTY = { action: '', actorId: '', targetType: '', targetId: '', from: '', to: '' };

/** A datetime-local value (the browser's local time) as ISO 8601 UTC. */
function iso(local: string): string {
  return local ? new Date(local).toISOString() : '';
}

/**
 * An entry's recorded values as JSON, with bidirectional controls written as escapes: a recorded name
 * carrying a right-to-left override would otherwise reverse the rest of the block.
 */
const recorded = (v: unknown): string =>
  JSON.stringify(v, null, 2).replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

export const Audit = permissionPage(AuditPage, '/admin/audit');

function AuditPage() {
  const { can } = useAuth();
  const t = useTenant();
  const [draft, setDraft] = useState(EMPTY);
  const [filters, setFilters] = useState(EMPTY);
  const [page, setPage] = useState(1);
  const [open, setOpen] = useState<string | null>(null);
  const query = { ...t.query, ...filters, from: iso(filters.from), to: iso(filters.to) };
  const list = useQuery({ queryKey: keys.audit.list(query, page), queryFn: () => api<Page<AuditEntry>>('GET', '/audit-logs', { query: { ...query, page, limit: 50 } }) });
  const set = (k: keyof typeof EMPTY) => (e: React.ChangeEvent<HTMLInputElement>) => setDraft({ ...draft, [k]: e.target.value });
  return (
    <>
      <PageHeader title="Audit log">
        {can('audit', 'export') && (
          <>
            <ExportButton query={query} format="jsonl" />
            <ExportButton query={query} format="csv" />
          </>
        )}
      </PageHeader>
      <form
        className="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters(draft);
          setPage(1);
        }}
      >
        <Field label="Action" placeholder="user.login" value={draft.action} onChange={set('action')} />
        <Field label="Actor id" value={draft.actorId} onChange={set('actorId')} />
        <Field label="Target type" placeholder="user" value={draft.targetType} onChange={set('targetType')} />
        <Field label="Target id" value={draft.targetId} onChange={set('targetId')} />
        <Field label="From" type="datetime-local" value={draft.from} onChange={set('from')} />
        <Field label="To" type="datetime-local" value={draft.to} onChange={set('to')} />
        <div className="row">
          <Button type="submit">Filter</Button>
          <Button type="button" kind="link" onClick={() => { setDraft(EMPTY); setFilters(EMPTY); setPage(1); }}>
            Clear
          </Button>
        </div>
      </form>
      <PagedTable
        query={list}
        label="Audit log entries"
        columns={7}
        head={
          <tr>
            <th>When</th>
            <th>Action</th>
            <th>Actor</th>
            <th>Organisation</th>
            <th>Target</th>
            <th>Result</th>
            <th>
              <span className="sr-only">Details</span>
            </th>
          </tr>
        }
        empty={<>No entries match.</>}
        row={(e) => (
          <Fragment key={e.id}>
            <tr>
              <td>{when(e.createdAt)}</td>
              <td>
                <code>{e.action}</code>
              </td>
              <td title={e.actorEmail ?? undefined}>
                <bdi>{e.actorName ?? e.actorEmail ?? e.actorType}</bdi>
              </td>
              <td>
                <bdi>{e.orgName ?? e.partnerName ?? (e.orgId || e.partnerId ? 'deleted' : 'platform')}</bdi>
              </td>
              <td title={e.targetId ?? undefined}>
                {e.targetType ? (
                  <>
                    {e.targetType.replace(/_/g, ' ')} <bdi>{e.targetName ?? e.targetId ?? ''}</bdi>
                  </>
                ) : (
                  '—'
                )}
              </td>
              <td>{e.result}</td>
              <td>
                {(e.changes || e.details) && (
                  <Button kind="link" aria-expanded={open === e.id} onClick={() => setOpen(open === e.id ? null : e.id)}>
                    Details
                  </Button>
                )}
              </td>
            </tr>
            {open === e.id && (
              <tr>
                <td colSpan={7}>
                  <pre className="small">{recorded({ actorId: e.actorId, orgId: e.orgId, targetId: e.targetId, changes: e.changes, details: e.details, ipAddress: e.ipAddress })}</pre>
                </td>
              </tr>
            )}
          </Fragment>
        )}
        onPage={setPage}
      />
      <AuditStreams />
    </>
  );
}

function ExportButton({ query, format }: { query: Record<string, string>; format: 'jsonl' | 'csv' }) {
  const s = useSubmit(() => download('/audit-logs/export', { ...query, format }, `keel-audit.${format}`));
  return (
    <>
      <Button kind="secondary" busy={s.busy} onClick={() => s.submit()}>
        Export {format.toUpperCase()}
      </Button>
      <ErrorAlert error={s.error} />
    </>
  );
}
