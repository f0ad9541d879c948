// Agent versions (platform administrators): registered versions with device counts and rollout
// state; promote (a session with a second factor), widen, and resume a halted rollout (explained in
// words).
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, dataOf, client } from '../../api';
import { Alert, Button, Checkbox, Dialog, ErrorAlert, Field, MfaNote, PageHeader, useSubmit, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

export type Component = Schema<'AgentVersion'>['component'];

type AgentVersion = Schema<'AgentVersion'>;

export const AgentVersions = permissionPage(VersionList, '/devices/agent-versions', { mfa: 'The fleet target' });

function VersionList() {
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [promote, setPromote] = useState<AgentVersion | null>(null);
  const [widen, setWiden] = useState<AgentVersion | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [resuming, setResuming] = useState<string | null>(null);
  const list = useQuery({ queryKey: keys.agentVersions.list(page), queryFn: async () => dataOf(await client.GET('/api/v1/agent-versions', { params: { query: { page, limit: 50 } } })) });
  const done = async (message: string) => {
    setNotice(message);
    setPromote(null);
    setWiden(null);
    await qc.invalidateQueries({ queryKey: keys.agentVersions.all });
  };
  const resume = async (v: AgentVersion) => {
    setError(null);
    setNotice(null);
    setResuming(v.component);
    try {
      await api('POST', '/agent-versions/rollout/resume', { body: { component: v.component } });
      await done(`The ${v.component} rollout of ${v.version} is running again; failures are counted afresh.`);
    } catch (err) {
      setError(err);
    } finally {
      setResuming(null);
    }
  };
  const halted = (list.data?.data ?? []).filter((v) => v.rollout?.status === 'halted');
  return (
    <>
      <PageHeader title="Agent versions" />
      <p className="muted">
        Promoting a version makes it the fleet target; a staged rollout offers it to a stable share of devices first, and halts by itself when too many
        report a failure.
      </p>
      <ErrorAlert error={error} />
      {notice && <Alert kind="success">{notice}</Alert>}
      {halted.map((v) => (
        <Alert key={`${v.component}:${v.version}`} kind="warning">
          <p>
            <strong>
              The {v.component} rollout of {v.version} is halted.
            </strong>{' '}
            {haltedInWords(v)}
          </p>
          <Button busy={resuming === v.component} onClick={() => void resume(v)} aria-label={`Resume the rollout of ${v.component} ${v.version}`}>
            Resume the rollout
          </Button>
        </Alert>
      ))}
      <PagedTable
        query={list}
        label="Agent versions"
        columns={6}
        head={
          <tr>
            <th>Component</th>
            <th>Version</th>
            <th>Builds</th>
            <th>Devices</th>
            <th>Rollout</th>
            <th>
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        }
        empty={<>No versions registered yet.</>}
        row={(v) => (
          <tr key={`${v.component}:${v.version}`}>
            <td>{v.component}</td>
            <td>
              {v.version}
              {v.prerelease && <span className="badge">pre-release</span>}
              {v.target.length > 0 && <span className="badge badge-ok">target</span>}
            </td>
            <td className="small">
              {v.builds.length === 0
                ? '—'
                : v.builds.map((b, i) => (
                    <span key={`${b.os}/${b.arch}`}>
                      {i > 0 && ', '}
                      {b.os}/{b.arch}
                      {b.signed ? (
                        <span className="muted" title={`Signed with release key ${b.keyId ?? ''}`}> (key {b.keyId})</span>
                      ) : (
                        <span className="badge badge-warn" title="Registered without a release signature: agents that pin release keys refuse it">
                          unsigned
                        </span>
                      )}
                    </span>
                  ))}
            </td>
            <td>{v.deviceCount}</td>
            <td>
              {v.rollout ? (
                <>
                  <span className={`badge ${v.rollout.status === 'halted' ? 'badge-warn' : 'badge-ok'}`}>{v.rollout.status}</span> {v.rollout.percent}%
                  <div className="small muted">
                    {v.rollout.succeeded} succeeded, {v.rollout.failed} failed, {v.rollout.devices} on it
                    {v.rollout.status === 'halted' && '; offered to no device until resumed'}
                  </div>
                </>
              ) : (
                '—'
              )}
            </td>
            <td>
              {v.target.length === 0 && (
                <Button kind="link" onClick={() => { setNotice(null); setPromote(v); }} aria-label={`Promote ${v.component} ${v.version}`}>
                  Promote
                </Button>
              )}
              {v.rollout && v.rollout.status === 'active' && v.rollout.percent < 100 && (
                <Button kind="link" onClick={() => { setNotice(null); setWiden(v); }} aria-label={`Widen the rollout of ${v.component} ${v.version}`}>
                  Widen
                </Button>
              )}
            </td>
          </tr>
        )}
        onPage={setPage}
      />
      {promote && <PromoteDialog v={promote} onClose={() => setPromote(null)} onDone={done} />}
      {widen && <WidenDialog v={widen} onClose={() => setWiden(null)} onDone={done} />}
    </>
  );
}

/** Why a rollout stopped and what resuming does, in a sentence. */
function haltedInWords(v: AgentVersion): string {
  const r = v.rollout;
  if (!r) return '';
  const reported = r.succeeded + r.failed;
  return `${r.failed} of the ${reported} device${reported === 1 ? '' : 's'} that reported on it failed to update (or rolled back), which is more than a rollout is allowed, so Keel stopped offering ${v.version} to the ${r.percent}% of devices in the rollout. Devices already on it keep it. Resuming offers it again and counts failures afresh.`;
}

function PromoteDialog({ v, onClose, onDone }: { v: AgentVersion; onClose: () => void; onDone: (m: string) => Promise<void> }) {
  const [percent, setPercent] = useState('100');
  const [downgrade, setDowngrade] = useState(false);
  const s = useSubmit(async () => {
    await api('POST', '/agent-versions/promote', { body: { version: v.version, component: v.component, rollout: { percent: Number(percent) }, allowDowngrade: downgrade } });
    await onDone(`${v.component} ${v.version} is the fleet target for ${percent}% of devices.`);
  });
  return (
    <Dialog title={`Promote ${v.component} ${v.version}`} onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Promote">
        <ErrorAlert error={s.error} />
        <Field label="Offer to this share of devices (%)" type="number" min={1} max={100} required value={percent} onChange={(e) => setPercent(e.target.value)} error={s.fields['rollout.percent']} />
        <Checkbox label="Allow a version lower than the current target" checked={downgrade} onChange={setDowngrade} />
        <MfaNote />
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Promote
          </Button>
          <Button type="button" kind="link" onClick={onClose}>
            Cancel
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

function WidenDialog({ v, onClose, onDone }: { v: AgentVersion; onClose: () => void; onDone: (m: string) => Promise<void> }) {
  const current = v.rollout?.percent ?? 1;
  const [percent, setPercent] = useState(String(Math.min(100, current * 2)));
  const s = useSubmit(async () => {
    await api('POST', '/agent-versions/rollout', { body: { component: v.component, percent: Number(percent) } });
    await onDone(`The ${v.component} rollout of ${v.version} now reaches ${percent}% of devices.`);
  });
  return (
    <Dialog title={`Widen the rollout of ${v.component} ${v.version}`} onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Widen the rollout">
        <ErrorAlert error={s.error} />
        <Field label="New share of devices (%)" type="number" min={current} max={100} required value={percent} onChange={(e) => setPercent(e.target.value)} error={s.fields.percent} hint={`Now ${current}%; it can only grow.`} />
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Widen
          </Button>
          <Button type="button" kind="link" onClick={onClose}>
            Cancel
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
