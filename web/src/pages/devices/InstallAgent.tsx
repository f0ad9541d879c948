// Install the agent on a machine: create an enrolment key for the organisation (optionally bound to
// a site or a device group), shown once with the command line that enrols the machine; revoke keys.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, PageHeader, PagedTable, Select, useSubmit, when } from '../../ui';
import { permissionPage } from '../../permission';
import { useDeviceGroups, useSites } from '../admin/common';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type EnrollmentKey = Schema<'EnrollmentKey'>;
type Created = Schema<'EnrollmentKeyCreated'>;

/** The command that enrols a machine: the reference agent reads its settings from the environment (agent/cli.ts). */
export function installCommand(serverUrl: string, key: string): string {
  return `KEEL_URL=${serverUrl} KEEL_ENROLLMENT_KEY=${key} npx keel-agent`;
}

export const InstallAgent = permissionPage(InstallChooser, '/devices/install');

/** The organisation: the one a link names (`?orgId=`, from an organisation's page), else the one picked at the top. */
function InstallChooser() {
  const t = useTenant();
  const orgId = new URLSearchParams(window.location.search).get('orgId') ?? t.orgId;
  if (!orgId) {
    return (
      <>
        <PageHeader title="Install agent" />
        <Alert kind="info">Pick an organisation at the top of the page, or open an organisation and choose Install agent: machines enrol into one organisation.</Alert>
      </>
    );
  }
  return <InstallPage orgId={orgId} />;
}

function InstallPage({ orgId }: { orgId: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const params = new URLSearchParams(window.location.search);
  const [name, setName] = useState('');
  const [siteId, setSiteId] = useState(params.get('siteId') ?? '');
  const [deviceGroupId, setDeviceGroupId] = useState(params.get('deviceGroupId') ?? '');
  const [created, setCreated] = useState<Created | null>(null);
  const [page, setPage] = useState(1);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const sites = useSites(orgId);
  const groups = useDeviceGroups(orgId);
  const list = useQuery({
    queryKey: keys.enrollmentKeys.list(orgId, page),
    queryFn: () => api<Page<EnrollmentKey>>('GET', `/orgs/${orgId}/enrollment-keys`, { query: { page, limit: 25 } }),
  });
  const write = can('devices', 'write');
  const create = useSubmit(async () => {
    setNotice(null);
    const made = await api<Created>('POST', `/orgs/${orgId}/enrollment-keys`, {
      body: { ...(name.trim() ? { name: name.trim() } : {}), ...(siteId ? { siteId } : {}), ...(deviceGroupId ? { deviceGroupId } : {}) },
    });
    setCreated(made);
    setName('');
    await qc.invalidateQueries({ queryKey: keys.enrollmentKeys.all });
  });
  const revoke = async (k: EnrollmentKey) => {
    if (!window.confirm(`Revoke the enrolment key ${k.name ?? k.id}? Machines can no longer enrol with it; devices already enrolled stay.`)) return;
    setError(null);
    setNotice(null);
    try {
      await api('DELETE', `/orgs/${orgId}/enrollment-keys/${k.id}`);
      if (created?.id === k.id) setCreated(null);
      setNotice(`The key ${k.name ?? ''} is revoked: enrolling with it is refused.`.replace('  ', ' '));
      await qc.invalidateQueries({ queryKey: keys.enrollmentKeys.all });
    } catch (err) {
      setError(err);
    }
  };
  const siteName = (id: string | null) => (id ? (sites.data?.data.find((s) => s.id === id)?.name ?? 'a site') : 'any');
  const groupName = (id: string | null) => (id ? (groups.data?.data.find((g) => g.id === id)?.name ?? 'a group') : 'any');
  const state = (k: EnrollmentKey) => (k.revokedAt ? 'revoked' : k.expiresAt && new Date(k.expiresAt).getTime() <= Date.now() ? 'expired' : 'active');
  const serverUrl = created?.serverUrl ?? window.location.origin;
  return (
    <>
      <PageHeader title="Install agent" />
      <p>
        Create an enrolment key, then run the command it shows on the machine (Node.js 20 or later). The machine appears under Devices at its first heartbeat. A key bound to a site or a device group places
        its machines there.
      </p>
      {write && (
        <Card title="New enrolment key">
          <form onSubmit={create.submit} aria-label="New enrolment key">
            <ErrorAlert error={create.error} />
            <Field label="Name (optional)" maxLength={255} value={name} onChange={(e) => setName(e.target.value)} error={create.fields.name} hint="For example: Head office laptops" />
            <Select label="Site" value={siteId} onChange={(e) => setSiteId(e.target.value)} error={create.fields.siteId}>
              <option value="">Any (the agent may name one)</option>
              {sites.data?.data.map((s) => (
                <option key={s.id} value={s.id}>
                  {s.name}
                </option>
              ))}
            </Select>
            <Select label="Device group" value={deviceGroupId} onChange={(e) => setDeviceGroupId(e.target.value)} error={create.fields.deviceGroupId}>
              <option value="">Any (the agent may name one)</option>
              {groups.data?.data.map((g) => (
                <option key={g.id} value={g.id}>
                  {g.name}
                </option>
              ))}
            </Select>
            <Button type="submit" busy={create.busy}>
              Create enrolment key
            </Button>
          </form>
        </Card>
      )}
      {created && (
        <Card title="Run this on the machine">
          <Alert kind="warning">This is the only time the key is shown. Copy the command now; anyone with the key can enrol machines into this organisation until you revoke it.</Alert>
          <pre className="payload" aria-label="Install command" tabIndex={0}>
            <code>{installCommand(serverUrl, created.key)}</code>
          </pre>
          <p className="small muted">
            Keel&apos;s address for agents: {serverUrl}
            {created.serverUrl ? ' (PUBLIC_URL).' : ' (this page’s address; set PUBLIC_URL when agents reach Keel at another one).'}
          </p>
          <Button kind="secondary" onClick={() => setCreated(null)}>
            Done, hide the key
          </Button>
        </Card>
      )}
      {notice && <Alert kind="success">{notice}</Alert>}
      <ErrorAlert error={error} />
      <h2>Enrolment keys</h2>
      <PagedTable
        query={list}
        label="Enrolment keys"
        columns={write ? 6 : 5}
        head={
          <tr>
            <th>Name</th>
            <th>Site</th>
            <th>Device group</th>
            <th>Status</th>
            <th>Created</th>
            {write && (
              <th>
                <span className="sr-only">Actions</span>
              </th>
            )}
          </tr>
        }
        empty={<>No enrolment keys yet.</>}
        row={(k) => (
          <tr key={k.id}>
            <td>{k.name ?? '—'}</td>
            <td>{siteName(k.siteId)}</td>
            <td>{groupName(k.deviceGroupId)}</td>
            <td>{state(k)}</td>
            <td>{when(k.createdAt)}</td>
            {write && (
              <td>
                {state(k) === 'active' && (
                  <Button kind="link" aria-label={`Revoke key ${k.name ?? k.id}`} onClick={() => void revoke(k)}>
                    Revoke
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
