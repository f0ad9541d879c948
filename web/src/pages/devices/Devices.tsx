// Devices the caller sees (its organisations, sites and device groups): filters and pages, each
// device's installed versions and status, the auto-update toggle, "update now" (also the retry of a
// failed update) and its update history.
import { Fragment, useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { api, dataOf, client, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, PageHeader, QueryState, Select, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { useDeviceGroups, useSites } from '../admin/common';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';
import { REASON_LABEL, UpdateDecision, UpdatePins } from './UpdatePins';

export type Device = Schema<'Device'>;
type HistoryEntry = Schema<'UpdateHistoryEntry'>;

const HISTORY_LABEL: Record<HistoryEntry['state'], string> = {
  offered: 'offered',
  started: 'started',
  succeeded: 'succeeded',
  failed: 'failed',
  rolled_back: 'rolled back',
  retried: 'retry requested',
};

const EMPTY = { status: '', siteId: '', deviceGroupId: '', hostname: '' };
type BehindReason = keyof typeof REASON_LABEL;

/** The reason for being behind the page was opened with (`?behind=`, from the Agent versions page's links), if it is one. */
function behindOfUrl(): BehindReason | null {
  const r = new URLSearchParams(window.location.search).get('behind');
  return r !== null && r in REASON_LABEL ? (r as BehindReason) : null;
}

function StatusBadge({ status }: { status: Device['status'] }) {
  return <span className={`badge ${status === 'online' ? 'badge-ok' : 'badge-warn'}`}>{status}</span>;
}

export const Devices = permissionPage(DeviceList, '/devices', { context: 'tenant' });

function DeviceList() {
  const { can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [draft, setDraft] = useState(EMPTY);
  const [filters, setFilters] = useState(EMPTY);
  const [page, setPage] = useState(1);
  const [behind, setBehind] = useState<BehindReason | null>(behindOfUrl);
  const [, navigate] = useLocation();
  const clearBehind = () => {
    setBehind(null);
    setPage(1);
    const params = new URLSearchParams(window.location.search);
    params.delete('behind');
    const rest = params.toString();
    navigate(rest ? `/devices?${rest}` : '/devices', { replace: true });
  };
  const [notice, setNotice] = useState<string | null>(() => {
    const gone = new URLSearchParams(window.location.search).get('decommissioned');
    return gone ? `${gone} is decommissioned.` : null;
  });
  const [error, setError] = useState<unknown>(null);
  const sites = useSites(t.orgId);
  const groups = useDeviceGroups(t.orgId);
  const list = useQuery({
    queryKey: keys.devices.list(t.query, { ...filters, behind: behind ?? '' }, page),
    queryFn: () => api<Page<Device>>('GET', '/devices', { query: { ...t.query, ...filters, ...(behind ? { behind } : {}), page, limit: 25 } }),
  });
  const execute = can('devices', 'execute');
  const updateNow = async (d: Device) => {
    setError(null);
    setNotice(null);
    try {
      await api('POST', '/devices/update-now', { body: { deviceIds: [d.id] } });
      setNotice(`${d.hostname} is offered the current version at its next heartbeat.`);
      await qc.invalidateQueries({ queryKey: keys.devices.all });
    } catch (err) {
      setError(err);
    }
  };
  return (
    <>
      <PageHeader title="Devices">
        <Link href={t.orgId ? `/devices/install?orgId=${t.orgId}` : '/devices/install'}>Install agent</Link>
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
        <Field label="Host name" value={draft.hostname} onChange={(e) => setDraft({ ...draft, hostname: e.target.value })} />
        <Select label="Status" value={draft.status} onChange={(e) => setDraft({ ...draft, status: e.target.value })}>
          <option value="">Any</option>
          <option value="online">Online</option>
          <option value="offline">Offline</option>
          <option value="updating">Updating</option>
        </Select>
        {t.orgId && (
          <>
            <Select label="Site" value={draft.siteId} onChange={(e) => setDraft({ ...draft, siteId: e.target.value })}>
              <option value="">Any</option>
              {sites.data?.data.map((s) => (
                <option key={s.id} value={s.id}>
                  {s.name}
                </option>
              ))}
            </Select>
            <Select label="Device group" value={draft.deviceGroupId} onChange={(e) => setDraft({ ...draft, deviceGroupId: e.target.value })}>
              <option value="">Any</option>
              {groups.data?.data.map((g) => (
                <option key={g.id} value={g.id}>
                  {g.name}
                </option>
              ))}
            </Select>
          </>
        )}
        <div className="row">
          <Button type="submit">Filter</Button>
          <Button type="button" kind="link" onClick={() => { setDraft(EMPTY); setFilters(EMPTY); setPage(1); }}>
            Clear
          </Button>
        </div>
      </form>
      {behind && (
        <ul className="chips" aria-label="Active filters">
          <li className="chip">
            Behind the target: {REASON_LABEL[behind]}
            <button type="button" className="chip-remove" aria-label={`Remove the filter: behind the target, ${REASON_LABEL[behind]}`} onClick={clearBehind}>
              ×
            </button>
          </li>
        </ul>
      )}
      <ErrorAlert error={error} />
      {notice && <Alert kind="success">{notice}</Alert>}
      <PagedTable
        query={list}
        label="Devices"
        columns={7}
        head={
          <tr>
            <th>Host name</th>
            <th>Status</th>
            <th>Platform</th>
            <th>Agent</th>
            <th>Auto-update</th>
            <th>Last seen</th>
            {execute && (
              <th>
                <span className="sr-only">Actions</span>
              </th>
            )}
          </tr>
        }
        empty={
          Object.values(filters).some(Boolean) ? (
            <>No devices match.</>
          ) : (
            <>
              No devices yet. <Link href={t.orgId ? `/devices/install?orgId=${t.orgId}` : '/devices/install'}>Install the agent on a machine</Link> to enrol it.
            </>
          )
        }
        row={(d) => (
          <tr key={d.id}>
            <td>
              <Link href={`/devices/${d.id}`}>{d.hostname}</Link>
            </td>
            <td>
              <StatusBadge status={d.status} />
            </td>
            <td>{[d.os, d.arch].filter(Boolean).join('/') || '—'}</td>
            <td>{d.components.agent ?? '—'}</td>
            <td>{d.autoUpdate ? 'on' : 'off'}</td>
            <td>{when(d.lastSeenAt)}</td>
            {execute && (
              <td>
                {d.updateNowPending ? (
                  <span className="muted small">update requested</span>
                ) : (
                  <Button kind="link" disabled={!d.autoUpdate} onClick={() => void updateNow(d)} aria-label={`Update now: ${d.hostname}`}>
                    Update now
                  </Button>
                )}
              </td>
            )}
          </tr>
        )}
        onPage={setPage}
      />
    </>
  );
}

export const DeviceDetail = permissionPage(DevicePage, '/devices');

function DevicePage({ id }: { id: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [, navigate] = useLocation();
  const device = useQuery({ queryKey: keys.devices.detail(id), queryFn: async () => dataOf(await client.GET('/api/v1/devices/{id}', { params: { path: { id } } })) });
  const execute = can('devices', 'execute');
  const decommission = useSubmit(async () => {
    const name = device.data?.hostname ?? 'this device';
    if (!window.confirm(`Decommission ${name}? Its agent's token stops working at once and the device leaves the list; enrolling it again needs a new enrolment.`)) return;
    await api('DELETE', `/devices/${id}`);
    // Leave first: the decommissioned device's page must not refetch itself into a 404.
    navigate(`/devices?decommissioned=${encodeURIComponent(name)}`);
    await qc.invalidateQueries({ queryKey: keys.devices.all });
  });
  const run = async (fn: () => Promise<string>) => {
    setError(null);
    setNotice(null);
    setBusy(true);
    try {
      setNotice(await fn());
      await qc.invalidateQueries({ queryKey: keys.devices.detail(id) });
      await qc.invalidateQueries({ queryKey: keys.devices.all });
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <QueryState query={device}>
      {() => {
        const d = device.data;
        if (!d) return null;
        return (
          <>
            <PageHeader title={`Device ${d.hostname}`}>
              {execute && (
                <Button busy={busy} disabled={!d.autoUpdate || d.updateNowPending} onClick={() => void run(async () => {
                  await api('POST', '/devices/update-now', { body: { deviceIds: [d.id] } });
                  return 'The current version is offered at the next heartbeat.';
                })}>
                  Update now
                </Button>
              )}
            </PageHeader>
            <p>
              <Link href="/devices">All devices</Link>
            </p>
            <ErrorAlert error={error} />
            {notice && <Alert kind="success">{notice}</Alert>}
            <Card title="Status">
              <dl className="facts">
                <dt>Status</dt>
                <dd>
                  <StatusBadge status={d.status} />
                </dd>
                <dt>Last seen</dt>
                <dd>{when(d.lastSeenAt)}</dd>
                <dt>Platform</dt>
                <dd>{[d.os, d.arch].filter(Boolean).join('/') || '—'}</dd>
                <dt>Logged-in user</dt>
                <dd>{d.loggedInUser ?? '—'}</dd>
                <dt>Enrolled</dt>
                <dd>{when(d.createdAt)}</dd>
                <dt>Update now</dt>
                <dd>{d.updateNowPending ? 'requested, waiting for the next heartbeat' : '—'}</dd>
              </dl>
            </Card>
            <Card title="Installed versions">
              <dl className="facts">
                {(['agent', 'helper', 'watchdog'] as const).map((c) => (
                  <Fragment key={c}>
                    <dt>{c}</dt>
                    <dd>{d.components[c] ?? 'not reported'}</dd>
                  </Fragment>
                ))}
              </dl>
            </Card>
            <UpdateDecision id={d.id} />
            <UpdatePins device={d} />
            <UpdateHistory id={d.id} />
            <Card title="Automatic updates">
              <p>{d.autoUpdate ? 'On: the device takes new versions inside its maintenance window.' : 'Off: the device is not offered any update, not even "update now".'}</p>
              {execute ? (
                <Button kind="secondary" busy={busy} onClick={() => void run(async () => {
                  await api('POST', `/devices/${d.id}/auto-update`, { body: { enabled: !d.autoUpdate } });
                  return d.autoUpdate ? 'Automatic updates are off.' : 'Automatic updates are on.';
                })}>
                  {d.autoUpdate ? 'Turn automatic updates off' : 'Turn automatic updates on'}
                </Button>
              ) : (
                <p className="muted small">Changing this needs the devices:execute permission.</p>
              )}
            </Card>
            {can('devices', 'delete') && (
              <Card title="Decommission">
                <p>The device&apos;s agent is signed out for good (its token stops working) and the device leaves the list.</p>
                <ErrorAlert error={decommission.error} />
                <Button kind="danger" busy={decommission.busy} onClick={() => decommission.submit()}>
                  Decommission this device
                </Button>
              </Card>
            )}
          </>
        );
      }}
    </QueryState>
  );
}

/** The device's update history, newest first: what Keel offered and what the agent reported, with its reason. */
function UpdateHistory({ id }: { id: string }) {
  const [page, setPage] = useState(1);
  const history = useQuery({
    queryKey: keys.devices.history(id, page),
    queryFn: async () => dataOf(await client.GET('/api/v1/devices/{id}/update-history', { params: { path: { id }, query: { page, limit: 20 } } })),
  });
  return (
    <Card title="Update history">
      <p className="muted small">A version this device failed or rolled back is not offered to it again until someone presses Update now.</p>
      <PagedTable
        query={history}
        label="Update history"
        columns={4}
        head={
          <tr>
            <th>When</th>
            <th>What</th>
            <th>Version</th>
            <th>Reason</th>
          </tr>
        }
        empty={<>No update offered or reported yet.</>}
        row={(e) => (
          <tr key={e.id}>
            <td>{when(e.at)}</td>
            <td>
              <span className={`badge ${e.state === 'succeeded' ? 'badge-ok' : e.state === 'failed' || e.state === 'rolled_back' ? 'badge-warn' : ''}`}>{HISTORY_LABEL[e.state]}</span>
            </td>
            <td>
              {e.component} {e.fromVersion ? `${e.fromVersion} → ` : ''}
              {e.toVersion}
            </td>
            <td className="small">{e.error ?? '—'}</td>
          </tr>
        )}
        onPage={setPage}
      />
    </Card>
  );
}
