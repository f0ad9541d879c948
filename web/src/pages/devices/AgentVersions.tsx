// Agent versions (platform administrators): registered versions with device counts and rollout
// state; publish a build (upload or release-host URL, never promoted by itself), promote (a session
// with a second factor; a staged share by default), widen, and resume a halted rollout (explained in
// words). Statuses as docs/decisions.md "Honest rollouts" defines them; rings (promote with device
// groups offered first, each ring's counts, Advance) as docs/decisions.md "Agent update rings".
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, dataOf, client } from '../../api';
import { Alert, Button, Checkbox, Dialog, ErrorAlert, Field, MfaNote, PageHeader, Select, useSubmit, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';
import { VersionDistribution } from './UpdatePins';
import { useDeviceGroups } from '../admin/common';

export type Component = Schema<'AgentVersion'>['component'];

type AgentVersion = Schema<'AgentVersion'>;
type RolloutStatus = NonNullable<AgentVersion['rollout']>['status'];

/** How each status reads: only `complete` is shown as a success. */
const STATUS_LABEL: Record<RolloutStatus, string> = {
  active: 'active',
  halted: 'halted',
  complete: 'complete',
  failing: 'failing',
  complete_with_failures: 'complete with failures',
};

export const AgentVersions = permissionPage(VersionList, '/devices/agent-versions', { mfa: 'The fleet target' });

function VersionList() {
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [promote, setPromote] = useState<AgentVersion | null>(null);
  const [publishing, setPublishing] = useState(false);
  const [widen, setWiden] = useState<AgentVersion | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [resuming, setResuming] = useState<string | null>(null);
  const [advancing, setAdvancing] = useState<string | null>(null);
  const list = useQuery({ queryKey: keys.agentVersions.list(page), queryFn: async () => dataOf(await client.GET('/api/v1/agent-versions', { params: { query: { page, limit: 50 } } })) });
  const done = async (message: string) => {
    setNotice(message);
    setPromote(null);
    setWiden(null);
    setPublishing(false);
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
  const advance = async (v: AgentVersion) => {
    setError(null);
    setNotice(null);
    setAdvancing(v.component);
    try {
      const r = await api<{ advanced: { component: string; version: string; ring: number | null }[] }>('POST', '/agent-versions/rollout/advance', { body: { component: v.component } });
      await done(r.advanced.map((a) => `${a.component} ${a.version}: ${a.ring === null ? 'the rest of the fleet is offered it now' : `ring ${a.ring} is open`}.`).join(' '));
    } catch (err) {
      setError(err);
    } finally {
      setAdvancing(null);
    }
  };
  const halted = (list.data?.data ?? []).filter((v) => v.rollout?.status === 'halted');
  const failing = (list.data?.data ?? []).filter((v) => v.rollout?.status === 'failing');
  return (
    <>
      <PageHeader title="Agent versions">
        <Button onClick={() => { setNotice(null); setPublishing(true); }}>Publish a build</Button>
      </PageHeader>
      <p className="muted">
        Publishing a build registers it; no device is offered it until you promote it. Promoting a version makes it the fleet target; a staged rollout
        offers it to a stable share of devices first, and halts by itself when too many report a failure. A device that failed or rolled back a version
        is not offered it again until someone presses Update now on its page.
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
      {failing.map((v) => (
        <Alert key={`${v.component}:${v.version}`} kind="warning">
          <p>
            <strong>
              The {v.component} rollout of {v.version} is failing.
            </strong>{' '}
            {failingInWords(v)}
          </p>
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
        empty={
          <>
            No versions registered yet. To publish one, press <strong>Publish a build</strong>: upload the binary (or give its URL on your release host
            with its SHA-256 and size), and, when release keys are configured, its signature from <code>keel release sign</code>. Then promote it to a
            share of devices.
          </>
        }
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
                  <span className={`badge ${v.rollout.status === 'complete' ? 'badge-ok' : v.rollout.status === 'active' ? '' : 'badge-warn'}`}>{STATUS_LABEL[v.rollout.status]}</span>{' '}
                  {v.rollout.percent}%
                  <div className="small muted">
                    {v.rollout.succeeded} succeeded, {v.rollout.failed} failed, {v.rollout.devices} on it, {v.rollout.pending} to update
                    {v.rollout.blocked > 0 && `, ${v.rollout.blocked} waiting for a retry`}
                    {v.rollout.status === 'halted' && '; offered to no device until resumed'}
                  </div>
                  {v.rollout.rings.length > 0 && (
                    <ol className="small" aria-label={`Rings of ${v.component} ${v.version}`}>
                      {v.rollout.rings.map((r) => (
                        <li key={r.ring}>
                          {r.name ?? 'A device group you do not see'}: <span className={`badge ${r.state === 'halted' ? 'badge-warn' : r.state === 'done' ? 'badge-ok' : ''}`}>{r.state}</span>{' '}
                          {r.offered} offered, {r.succeeded} succeeded, {r.failed} failed; soaks {r.soakMinutes} min
                        </li>
                      ))}
                    </ol>
                  )}
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
              {v.rollout && v.rollout.status !== 'halted' && v.rollout.rings.some((r) => r.state !== 'done') && (
                <Button kind="link" busy={advancing === v.component} onClick={() => void advance(v)} aria-label={`Advance the rings of ${v.component} ${v.version}`}>
                  Advance
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
      <VersionDistribution />
      {publishing && <PublishDialog onClose={() => setPublishing(false)} onDone={done} />}
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

/** A rollout with failures and no success, in a sentence. */
function failingInWords(v: AgentVersion): string {
  const r = v.rollout;
  if (!r) return '';
  return `No device has updated to it yet, and ${r.failed} failed to update or rolled back. Those devices are not offered ${v.version} again until someone presses Update now on their page; their update history says why it failed.`;
}

const COMPONENTS: Component[] = ['agent', 'helper', 'watchdog'];

/** Registers a build (an upload, or a URL on the release host) with `promote=false`: it is never promoted by itself. */
function PublishDialog({ onClose, onDone }: { onClose: () => void; onDone: (m: string) => Promise<void> }) {
  const [source, setSource] = useState<'upload' | 'url'>('upload');
  const [form, setForm] = useState({ version: '', component: 'agent' as Component, os: 'linux', arch: 'amd64', url: '', sha256: '', size: '', signature: '' });
  const [file, setFile] = useState<File | null>(null);
  const set = (k: keyof typeof form) => (e: { target: { value: string } }) => setForm({ ...form, [k]: e.target.value });
  const s = useSubmit(
    async () => {
      const signature = form.signature.trim() || undefined;
      const meta = { version: form.version.trim(), component: form.component, os: form.os.trim(), arch: form.arch.trim() };
      if (source === 'upload' && file) {
        const body = new FormData();
        for (const [k, v] of Object.entries(meta)) body.set(k, v);
        if (signature) body.set('signature', signature);
        body.set('file', file);
        await api('POST', '/agent-versions', { query: { promote: 'false' }, body });
      } else {
        await api('POST', '/agent-versions', { query: { promote: 'false' }, body: { ...meta, url: form.url.trim(), sha256: form.sha256.trim(), size: Number(form.size), ...(signature ? { signature } : {}) } });
      }
      await onDone(`${meta.component} ${meta.version} for ${meta.os}/${meta.arch} is registered. No device is offered it until you promote it.`);
    },
    () => ({ file: source === 'upload' && !file && 'Choose the binary to upload' }),
  );
  return (
    <Dialog title="Publish a build" onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Publish a build">
        <ErrorAlert error={s.error} />
        <p className="muted small">Publishing only registers the build; promoting it is a separate step.</p>
        <Select label="Source" value={source} onChange={(e) => setSource(e.target.value === 'url' ? 'url' : 'upload')}>
          <option value="upload">Upload the binary to Keel</option>
          <option value="url">A URL on the release host</option>
        </Select>
        <Field label="Version" required value={form.version} onChange={set('version')} placeholder="1.5.0" error={s.fields.version} />
        <Select label="Component" value={form.component} onChange={set('component')} error={s.fields.component}>
          {COMPONENTS.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </Select>
        <Field label="Operating system" required value={form.os} onChange={set('os')} error={s.fields.os} />
        <Field label="CPU architecture" required value={form.arch} onChange={set('arch')} error={s.fields.arch} />
        {source === 'upload' ? (
          <Field label="Binary" type="file" onChange={(e) => setFile(e.target.files?.[0] ?? null)} error={s.fields.file} hint="Keel computes its SHA-256 and size." />
        ) : (
          <>
            <Field label="Download URL (https)" required value={form.url} onChange={set('url')} error={s.fields.url} />
            <Field label="SHA-256 (hex)" required value={form.sha256} onChange={set('sha256')} error={s.fields.sha256} />
            <Field label="Size (bytes)" type="number" min={1} required value={form.size} onChange={set('size')} error={s.fields.size} />
          </>
        )}
        <Field
          label="Release signature (base64)"
          value={form.signature}
          onChange={set('signature')}
          error={s.fields.signature}
          hint="Required when Keel has release keys (AGENT_RELEASE_PUBLIC_KEYS): the output of keel release sign for this file, version, component and platform."
        />
        <MfaNote />
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Publish
          </Button>
          <Button type="button" kind="link" onClick={onClose}>
            Cancel
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

function PromoteDialog({ v, onClose, onDone }: { v: AgentVersion; onClose: () => void; onDone: (m: string) => Promise<void> }) {
  // Staged by default: a share first, widened once it proves itself.
  const [percent, setPercent] = useState('10');
  const [downgrade, setDowngrade] = useState(false);
  const [rings, setRings] = useState<RingDraft[]>([]);
  const s = useSubmit(async () => {
    const chosen = rings.map((r) => ({ deviceGroupId: r.deviceGroupId, soakMinutes: Number(r.soakMinutes) }));
    await api('POST', '/agent-versions/promote', {
      body: { version: v.version, component: v.component, rollout: { percent: Number(percent), ...(chosen.length > 0 ? { rings: chosen } : {}) }, allowDowngrade: downgrade },
    });
    await onDone(
      chosen.length > 0
        ? `${v.component} ${v.version} is the fleet target: ring 1 is offered it now; the next ring opens after its soak, then ${percent}% of the other devices.`
        : `${v.component} ${v.version} is the fleet target for ${percent}% of devices.`,
    );
  });
  const setRing = (i: number, patch: Partial<RingDraft>) => setRings(rings.map((r, k) => (k === i ? { ...r, ...patch } : r)));
  return (
    <Dialog title={`Promote ${v.component} ${v.version}`} onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Promote">
        <ErrorAlert error={s.error} />
        <Field
          label="Offer to this share of devices (%)"
          type="number"
          min={1}
          max={100}
          required
          value={percent}
          onChange={(e) => setPercent(e.target.value)}
          error={s.fields['rollout.percent']}
          hint="A staged rollout: widen it once these devices updated well. 100 offers it to every device at once."
        />
        <fieldset>
          <legend>Rings (optional)</legend>
          <p className="small muted">Device groups offered the version first, in order. Each ring opens when the one before it has soaked its minutes with few failures (or when you advance it); the other devices follow the last ring.</p>
          {rings.map((r, i) => (
            <RingFields key={r.key} ring={r} index={i} fields={s.fields} onChange={(patch) => setRing(i, patch)} onRemove={() => setRings(rings.filter((_, k) => k !== i))} />
          ))}
          {rings.length < 10 && (
            <Button type="button" kind="link" onClick={() => setRings([...rings, { key: nextRingKey++, orgId: '', deviceGroupId: '', soakMinutes: '60' }])}>
              Add a ring
            </Button>
          )}
        </fieldset>
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

interface RingDraft {
  key: number;
  orgId: string;
  deviceGroupId: string;
  soakMinutes: string;
}
let nextRingKey = 1;

/** One ring of the promote dialog: an organisation, one of its device groups, the soak. */
function RingFields({ ring, index, fields, onChange, onRemove }: { ring: RingDraft; index: number; fields: Record<string, string>; onChange: (patch: Partial<RingDraft>) => void; onRemove: () => void }) {
  const orgs = useQuery({ queryKey: keys.orgs.picker({ limit: '100' }), queryFn: () => api<{ data: { id: string; name: string }[] }>('GET', '/orgs', { query: { limit: 100 } }) });
  const groups = useDeviceGroups(ring.orgId || null);
  const n = index + 1;
  return (
    <div className="row" role="group" aria-label={`Ring ${n}`}>
      <Select label={`Ring ${n}: organisation`} value={ring.orgId} onChange={(e) => onChange({ orgId: e.target.value, deviceGroupId: '' })}>
        <option value="">Pick an organisation</option>
        {orgs.data?.data.map((o) => (
          <option key={o.id} value={o.id}>
            {o.name}
          </option>
        ))}
      </Select>
      <Select label={`Ring ${n}: device group`} required value={ring.deviceGroupId} onChange={(e) => onChange({ deviceGroupId: e.target.value })} error={fields[`rollout.rings.${index}.deviceGroupId`]}>
        <option value="">Pick a device group</option>
        {groups.data?.data.map((g) => (
          <option key={g.id} value={g.id}>
            {g.name}
          </option>
        ))}
      </Select>
      <Field label={`Ring ${n}: soak (minutes)`} type="number" min={1} max={20160} required value={ring.soakMinutes} onChange={(e) => onChange({ soakMinutes: e.target.value })} error={fields[`rollout.rings.${index}.soakMinutes`]} />
      <Button type="button" kind="link" onClick={onRemove} aria-label={`Remove ring ${n}`}>
        Remove
      </Button>
    </div>
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
