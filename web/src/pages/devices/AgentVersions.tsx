// Agent versions (platform administrators): registered versions with device counts and rollout
// state; promote (a session with a second factor), widen and resume the rollout. And the update
// windows and version pins of an organisation or a partner.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, Checkbox, Dialog, ErrorAlert, Field, Gate, PageHeader, Pager, QueryState, useSubmit } from '../../ui';
import { NeedsTenant } from '../admin/common';

type Component = 'agent' | 'helper' | 'watchdog';

interface AgentVersion {
  version: string;
  component: Component;
  prerelease: boolean;
  builds: { os: string; arch: string; size: number; source: string }[];
  deviceCount: number;
  target: string[];
  rollout: { percent: number; status: 'active' | 'halted' | 'complete'; succeeded: number; failed: number; devices: number } | null;
}

function mfaExplained(err: unknown): unknown {
  if (err instanceof ApiError && err.status === 403 && err.code === 'mfa_required') {
    return new ApiError(403, 'mfa_required', 'Changing the fleet target needs a session signed in with a second factor. Sign out, sign in again with your authenticator, texted code or passkey, and retry.');
  }
  return err;
}

function Explained({ error }: { error: unknown }) {
  const e = mfaExplained(error);
  if (e instanceof ApiError && e.code === 'mfa_required') return <Alert>{e.message}</Alert>;
  return <ErrorAlert error={e} />;
}

export function AgentVersions() {
  const { me } = useAuth();
  return (
    <Gate allow={!!me?.isPlatformAdmin} what="Agent versions">
      <VersionList />
    </Gate>
  );
}

function VersionList() {
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [promote, setPromote] = useState<AgentVersion | null>(null);
  const [widen, setWiden] = useState<AgentVersion | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const list = useQuery({ queryKey: ['agent-versions', page], queryFn: () => api<Page<AgentVersion>>('GET', '/agent-versions', { query: { page, limit: 50 } }) });
  const done = async (message: string) => {
    setNotice(message);
    setPromote(null);
    setWiden(null);
    await qc.invalidateQueries({ queryKey: ['agent-versions'] });
  };
  const resume = async (v: AgentVersion) => {
    setError(null);
    setNotice(null);
    try {
      await api('POST', '/agent-versions/rollout/resume', { body: { component: v.component } });
      await done(`The ${v.component} rollout of ${v.version} is running again; failures are counted afresh.`);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <>
      <PageHeader title="Agent versions" />
      <p className="muted">
        Promoting a version makes it the fleet target; a staged rollout offers it to a stable share of devices first, and halts by itself when too many
        report a failure.
      </p>
      <Explained error={error} />
      {notice && <Alert kind="success">{notice}</Alert>}
      <QueryState query={list}>
        {() => (
          <>
            <div className="table-wrap">
              <table>
                <thead>
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
                </thead>
                <tbody>
                  {list.data?.data.length === 0 && (
                    <tr>
                      <td colSpan={6} className="muted">
                        No versions registered yet.
                      </td>
                    </tr>
                  )}
                  {list.data?.data.map((v) => (
                    <tr key={`${v.component}:${v.version}`}>
                      <td>{v.component}</td>
                      <td>
                        {v.version}
                        {v.prerelease && <span className="badge">pre-release</span>}
                        {v.target.length > 0 && <span className="badge badge-ok">target</span>}
                      </td>
                      <td className="small">{v.builds.map((b) => `${b.os}/${b.arch}`).join(', ') || '—'}</td>
                      <td>{v.deviceCount}</td>
                      <td>
                        {v.rollout ? (
                          <>
                            <span className={`badge ${v.rollout.status === 'halted' ? 'badge-warn' : 'badge-ok'}`}>{v.rollout.status}</span> {v.rollout.percent}%
                            <div className="small muted">
                              {v.rollout.succeeded} succeeded, {v.rollout.failed} failed, {v.rollout.devices} on it
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
                        {v.rollout?.status === 'halted' && (
                          <Button kind="link" onClick={() => void resume(v)} aria-label={`Resume the rollout of ${v.component} ${v.version}`}>
                            Resume
                          </Button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            {list.data && <Pager pagination={list.data.pagination} onPage={setPage} />}
          </>
        )}
      </QueryState>
      {promote && <PromoteDialog v={promote} onClose={() => setPromote(null)} onDone={done} />}
      {widen && <WidenDialog v={widen} onClose={() => setWiden(null)} onDone={done} />}
    </>
  );
}

function PromoteDialog({ v, onClose, onDone }: { v: AgentVersion; onClose: () => void; onDone: (m: string) => Promise<void> }) {
  const [percent, setPercent] = useState('100');
  const [downgrade, setDowngrade] = useState(false);
  const s = useSubmit(async () => {
    try {
      await api('POST', '/agent-versions/promote', { body: { version: v.version, component: v.component, rollout: { percent: Number(percent) }, allowDowngrade: downgrade } });
    } catch (err) {
      throw mfaExplained(err);
    }
    await onDone(`${v.component} ${v.version} is the fleet target for ${percent}% of devices.`);
  });
  return (
    <Dialog title={`Promote ${v.component} ${v.version}`} onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Promote">
        <Explained error={s.error} />
        <Field label="Offer to this share of devices (%)" type="number" min={1} max={100} required value={percent} onChange={(e) => setPercent(e.target.value)} error={s.fields['rollout.percent']} />
        <Checkbox label="Allow a version lower than the current target" checked={downgrade} onChange={setDowngrade} />
        <p className="hint">Needs a session signed in with a second factor.</p>
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
    try {
      await api('POST', '/agent-versions/rollout', { body: { component: v.component, percent: Number(percent) } });
    } catch (err) {
      throw mfaExplained(err);
    }
    await onDone(`The ${v.component} rollout of ${v.version} now reaches ${percent}% of devices.`);
  });
  return (
    <Dialog title={`Widen the rollout of ${v.component} ${v.version}`} onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Widen the rollout">
        <Explained error={s.error} />
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

// ---- update windows ----

const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
const DAY_NAMES: Record<(typeof DAYS)[number], string> = { mon: 'Monday', tue: 'Tuesday', wed: 'Wednesday', thu: 'Thursday', fri: 'Friday', sat: 'Saturday', sun: 'Sunday' };

interface UpdateSettings {
  maintenanceWindow: { days: string[]; start: string; end: string } | null;
  pinnedVersions: { agent?: string; helper?: string; watchdog?: string } | null;
}

export function UpdateWindows() {
  const { me, can } = useAuth();
  return (
    <Gate allow={!!me && me.scope !== null && can('devices', 'read')} what="Update windows">
      <NeedsTenant>
        <UpdateWindowsPage />
      </NeedsTenant>
    </Gate>
  );
}

function UpdateWindowsPage() {
  const t = useTenant();
  const path = t.orgId ? `/orgs/${t.orgId}/agent-update-settings` : t.partnerId ? `/partners/${t.partnerId}/agent-update-settings` : null;
  const settings = useQuery({ queryKey: ['agent-update-settings', path], enabled: !!path, queryFn: () => api<UpdateSettings>('GET', path ?? '') });
  if (!path) return <Alert kind="info">Pick an organisation at the top of the page.</Alert>;
  return (
    <>
      <PageHeader title="Update windows" />
      <p className="muted">
        {t.orgId
          ? "When this organisation's devices take updates (UTC), and versions they stay on. The organisation's window replaces the partner's."
          : "The partner's default window and pins, for organisations that set none of their own."}
      </p>
      <QueryState query={settings}>{() => (settings.data ? <SettingsForm key={path} path={path} value={settings.data} /> : null)}</QueryState>
    </>
  );
}

function SettingsForm({ path, value }: { path: string; value: UpdateSettings }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const writable = can('devices', 'write');
  const w = value.maintenanceWindow;
  const [hasWindow, setHasWindow] = useState(!!w);
  const [days, setDays] = useState<Set<string>>(new Set(w?.days ?? ['sat', 'sun']));
  const [start, setStart] = useState(w?.start ?? '22:00');
  const [end, setEnd] = useState(w?.end ?? '04:00');
  const [pins, setPins] = useState<Record<Component, string>>({ agent: value.pinnedVersions?.agent ?? '', helper: value.pinnedVersions?.helper ?? '', watchdog: value.pinnedVersions?.watchdog ?? '' });
  const [saved, setSaved] = useState(false);
  const s = useSubmit(async () => {
    setSaved(false);
    const pinned: Record<string, string> = {};
    for (const [k, v] of Object.entries(pins)) if (v.trim()) pinned[k] = v.trim();
    await api('PUT', path, {
      body: {
        maintenanceWindow: hasWindow ? { days: DAYS.filter((d) => days.has(d)), start, end } : null,
        pinnedVersions: Object.keys(pinned).length ? pinned : null,
      },
    });
    setSaved(true);
    await qc.invalidateQueries({ queryKey: ['agent-update-settings', path] });
  });
  return (
    <Card title="Window and pins">
      <form onSubmit={s.submit} aria-label="Update window">
        <fieldset disabled={!writable}>
          <legend>Maintenance window (UTC)</legend>
          <Checkbox label="Updates only inside a window" checked={hasWindow} onChange={setHasWindow} />
          {hasWindow && (
            <>
              <div className="row" role="group" aria-label="Days the window starts on">
                {DAYS.map((d) => (
                  <Checkbox
                    key={d}
                    label={DAY_NAMES[d]}
                    checked={days.has(d)}
                    onChange={(on) => {
                      const next = new Set(days);
                      if (on) next.add(d);
                      else next.delete(d);
                      setDays(next);
                    }}
                  />
                ))}
              </div>
              {s.fields['maintenanceWindow.days'] && <div className="field-error">{s.fields['maintenanceWindow.days']}</div>}
              <div className="filters">
                <Field label="Starts at" type="time" required value={start} onChange={(e) => setStart(e.target.value)} error={s.fields['maintenanceWindow.start']} />
                <Field label="Ends at" type="time" required value={end} onChange={(e) => setEnd(e.target.value)} error={s.fields['maintenanceWindow.end']} hint="At or before the start: the window crosses midnight." />
              </div>
            </>
          )}
        </fieldset>
        <fieldset disabled={!writable}>
          <legend>Pinned versions</legend>
          <p className="hint">A pinned component stays on (or moves to) that version whatever the fleet target is. Empty: follow the target.</p>
          <div className="filters">
            {(['agent', 'helper', 'watchdog'] as const).map((c) => (
              <Field key={c} label={`Pinned ${c} version`} maxLength={64} pattern="[0-9A-Za-z][0-9A-Za-z.+\-]*" value={pins[c]} onChange={(e) => setPins({ ...pins, [c]: e.target.value })} error={s.fields[`pinnedVersions.${c}`]} />
            ))}
          </div>
        </fieldset>
        <ErrorAlert error={s.error} />
        {saved && <Alert kind="success">Saved.</Alert>}
        {writable ? (
          <Button type="submit" busy={s.busy} disabled={hasWindow && days.size === 0}>
            Save
          </Button>
        ) : (
          <p className="muted small">Changing these needs the devices:write permission.</p>
        )}
      </form>
    </Card>
  );
}
