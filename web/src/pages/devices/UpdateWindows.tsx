// Update windows and version pins, at partner level (the default of the partner's organisations)
// or organisation level (the picker at the top says which). A device takes its organisation's
// window when it has one, else its partner's; pins merge, the organisation's winning per component
// (src/modules/agents/heartbeat.ts). Each level's window is said in words, and at organisation level
// a partner user also sees the partner's default it replaces.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, PageHeader, QueryState, useSubmit } from '../../ui';
import { permissionPage } from '../../permission';
import type { Component } from './AgentVersions';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
const DAY_NAMES: Record<string, string> = { mon: 'Monday', tue: 'Tuesday', wed: 'Wednesday', thu: 'Thursday', fri: 'Friday', sat: 'Saturday', sun: 'Sunday' };

type MaintenanceWindow = Schema<'MaintenanceWindow'>;

type UpdateSettings = Schema<'AgentUpdateSettings'>;

/** The IANA time zones this browser knows, for the time-zone field's suggestions (the API checks the name). */
const ZONES: string[] = (() => {
  try {
    return (Intl as unknown as { supportedValuesOf?: (k: string) => string[] }).supportedValuesOf?.('timeZone') ?? [];
  } catch {
    return [];
  }
})();

/** Whether the browser knows the zone (the API decides; this only says so at the field before sending). */
function knownZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** "Friday and Sunday, 23:00 to 03:30 Europe/London time (ends the next day)". */
function windowInWords(w: MaintenanceWindow | null): string {
  if (!w) return 'no window: updates at any time';
  const names = w.days.map((d) => DAY_NAMES[d] ?? d);
  const days = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1) ?? ''}` : (names[0] ?? '');
  const zone = w.timeZone && w.timeZone !== 'UTC' ? `${w.timeZone} time` : 'UTC';
  return `${days}, ${w.start} to ${w.end} ${zone}${w.end <= w.start ? ' (ends the next day)' : ''}`;
}

function pinsInWords(p: UpdateSettings['pinnedVersions']): string {
  const list = Object.entries(p ?? {}).map(([c, v]) => `${c} ${v}`);
  return list.length ? list.join(', ') : 'none';
}

const settingsQuery = (path: string | null) => ({
  queryKey: keys.agentUpdateSettings.of(path),
  enabled: !!path,
  queryFn: () => api<UpdateSettings>('GET', path ?? ''),
});

export const UpdateWindows = permissionPage(UpdateWindowsPage, '/devices/update-windows', { context: 'tenant' });

function UpdateWindowsPage() {
  const { me } = useAuth();
  const t = useTenant();
  const orgPath = t.orgId ? `/orgs/${t.orgId}/agent-update-settings` : null;
  // Organisation users do not reach their partner's settings (the API answers 404).
  const partnerPath = t.partnerId && me?.scope !== 'organization' ? `/partners/${t.partnerId}/agent-update-settings` : null;
  const path = orgPath ?? partnerPath;
  const settings = useQuery(settingsQuery(path));
  const partner = useQuery(settingsQuery(orgPath ? partnerPath : null));
  if (!path) return <Alert kind="info">Pick an organisation at the top of the page.</Alert>;
  const own = settings.data?.maintenanceWindow ?? null;
  return (
    <>
      <PageHeader title="Update windows" />
      <p className="muted">
        {orgPath
          ? "Organisation level: when this organisation's devices take updates (in the window's time zone), and versions they stay on. Its window replaces the partner's; its pins win over the partner's, component by component."
          : "Partner level: the default window and pins of the partner's organisations, for those that set none of their own. Pick an organisation at the top to set one of its own."}
      </p>
      {orgPath && partner.data && (
        <Alert kind="info">
          <p>
            Partner default window: {windowInWords(partner.data.maintenanceWindow)}; pinned: {pinsInWords(partner.data.pinnedVersions)}.
          </p>
          {partner.data.maintenanceWindow && (own ? "This organisation's own window below replaces it." : 'It applies to this organisation, which sets no window of its own.')}
        </Alert>
      )}
      <QueryState query={settings}>{() => (settings.data ? <SettingsForm key={path} path={path} level={orgPath ? 'organisation' : 'partner'} value={settings.data} /> : null)}</QueryState>
    </>
  );
}

function SettingsForm({ path, level, value }: { path: string; level: 'organisation' | 'partner'; value: UpdateSettings }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const writable = can('devices', 'write');
  const w = value.maintenanceWindow;
  const [hasWindow, setHasWindow] = useState(!!w);
  const [days, setDays] = useState<Set<string>>(new Set(w?.days ?? ['sat', 'sun']));
  const [start, setStart] = useState(w?.start ?? '22:00');
  const [end, setEnd] = useState(w?.end ?? '04:00');
  const [timeZone, setTimeZone] = useState(w?.timeZone ?? 'UTC');
  const [pins, setPins] = useState<Record<Component, string>>({ agent: value.pinnedVersions?.agent ?? '', helper: value.pinnedVersions?.helper ?? '', watchdog: value.pinnedVersions?.watchdog ?? '' });
  const [saved, setSaved] = useState(false);
  const s = useSubmit(
    async () => {
      setSaved(false);
      const pinned: Record<string, string> = {};
      for (const [k, v] of Object.entries(pins)) if (v.trim()) pinned[k] = v.trim();
      await api('PUT', path, {
        body: {
          // UTC is the API's default: a window in UTC is stored without a zone, as before zones existed.
          maintenanceWindow: hasWindow ? { days: DAYS.filter((d) => days.has(d)), start, end, ...(timeZone.trim() === 'UTC' ? {} : { timeZone: timeZone.trim() }) } : null,
          pinnedVersions: Object.keys(pinned).length ? pinned : null,
        },
      });
      setSaved(true);
      await qc.invalidateQueries({ queryKey: keys.agentUpdateSettings.of(path) });
    },
    () => ({
      'maintenanceWindow.days': hasWindow && days.size === 0 && 'Pick at least one day.',
      'maintenanceWindow.timeZone': hasWindow && !knownZone(timeZone.trim()) && 'Time zone is not a time zone name (IANA, e.g. Europe/London or UTC).',
    }),
  );
  return (
    <Card title={level === 'partner' ? "The partner's default window and pins" : "This organisation's window and pins"}>
      <p>
        <strong>Now:</strong> {windowInWords(w)}; pinned: {pinsInWords(value.pinnedVersions)}.
      </p>
      <form onSubmit={s.submit} aria-label="Update window">
        <fieldset disabled={!writable}>
          <legend>Maintenance window</legend>
          <Checkbox label="Updates only inside a window" checked={hasWindow} onChange={setHasWindow} />
          {hasWindow && (
            <>
              <div className="row" role="group" aria-label="Days the window starts on" aria-describedby={s.fields['maintenanceWindow.days'] ? 'window-days-error' : undefined}>
                {DAYS.map((d) => (
                  <Checkbox
                    key={d}
                    label={DAY_NAMES[d] ?? d}
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
              {s.fields['maintenanceWindow.days'] && (
                <div className="field-error" id="window-days-error">
                  {s.fields['maintenanceWindow.days']}
                </div>
              )}
              <div className="filters">
                <Field label="Starts at" type="time" required value={start} onChange={(e) => setStart(e.target.value)} error={s.fields['maintenanceWindow.start']} />
                <Field label="Ends at" type="time" required value={end} onChange={(e) => setEnd(e.target.value)} error={s.fields['maintenanceWindow.end']} hint="At or before the start: the window crosses midnight." />
                <Field
                  label="Time zone"
                  required
                  list="time-zones"
                  maxLength={64}
                  value={timeZone}
                  onChange={(e) => setTimeZone(e.target.value)}
                  error={s.fields['maintenanceWindow.timeZone']}
                  hint="IANA name, e.g. Europe/London; the window follows its daylight saving."
                />
                <datalist id="time-zones">
                  {ZONES.map((z) => (
                    <option key={z} value={z} />
                  ))}
                </datalist>
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
          <Button type="submit" busy={s.busy}>
            Save
          </Button>
        ) : (
          <p className="muted small">Changing these needs the devices:write permission.</p>
        )}
      </form>
    </Card>
  );
}
