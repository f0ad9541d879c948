// A device's update decision (what its next heartbeat would be offered, per component, and why) and
// one "Update pins" panel for the levels that hold it: the device, its device group, its site
// (precedence device > group > site > organisation > partner > fleet target; docs/decisions.md
// "Agent pins and distribution"). And the distribution of versions, for the Agent versions page.
import { useMemo, useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link } from 'wouter';
import { api, client, dataOf } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, QueryState, Select, TableFrame, useSubmit } from '../../ui';
import { keys } from '../../api/keys';
import { Chart } from '../../components/Chart';
import type { Schema } from '../../api/types';

type Decision = Schema<'UpdateDecisionEntry'>;
type Pins = Schema<'AgentPins'>;
type Distribution = Schema<'AgentVersionDistribution'>;
const COMPONENTS = ['agent', 'helper', 'watchdog'] as const;

const RULE_LABEL: Record<Decision['rule'], string> = {
  pinned_device: 'pinned by the device',
  pinned_group: 'pinned by its device group',
  pinned_site: 'pinned by its site',
  pinned_org: 'pinned by the organisation',
  pinned_partner: 'pinned by the partner',
  rollout: 'fleet target',
  ring_waiting: 'waiting for its ring',
  outside_window: 'outside the window',
  halted: 'rollout halted',
  blocked: 'failed before',
  no_build: 'no build',
  up_to_date: 'up to date',
  auto_update_off: 'auto-update off',
  not_reported: 'not reported',
};

export function UpdateDecision({ id }: { id: string }) {
  const decision = useQuery({
    queryKey: keys.devices.decision(id),
    queryFn: async () => dataOf(await client.GET('/api/v1/devices/{id}/update-decision', { params: { path: { id } } })),
  });
  return (
    <Card title="Update decision">
      <p className="muted small">What the device&apos;s next heartbeat would be offered, and why.</p>
      <QueryState query={decision}>
        {() => (
          <TableFrame label="Update decision per component">
            <thead>
              <tr>
                <th scope="col">Component</th>
                <th scope="col">Offered</th>
                <th scope="col">Rule</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {(decision.data?.data ?? []).map((r) => (
                <tr key={r.component}>
                  <td>{r.component}</td>
                  <td>{r.offer ?? '—'}</td>
                  <td>{RULE_LABEL[r.rule]}</td>
                  <td className="small">{r.detail}</td>
                </tr>
              ))}
            </tbody>
          </TableFrame>
        )}
      </QueryState>
    </Card>
  );
}

/** One panel: pick the level (this device, its group, its site), set its pins per component. */
export function UpdatePins({ device }: { device: { id: string; deviceGroupId: string | null; siteId: string | null } }) {
  const levels = [
    { label: 'This device', path: `/devices/${device.id}/agent-update-settings` },
    ...(device.deviceGroupId ? [{ label: 'Its device group', path: `/device-groups/${device.deviceGroupId}/agent-update-settings` }] : []),
    ...(device.siteId ? [{ label: 'Its site', path: `/sites/${device.siteId}/agent-update-settings` }] : []),
  ];
  const [path, setPath] = useState(levels[0]?.path ?? '');
  const pins = useQuery({ queryKey: keys.agentUpdateSettings.of(path), queryFn: () => api<Pins>('GET', path) });
  return (
    <Card title="Update pins">
      <p className="muted small">
        A pin keeps a component on a version whatever the fleet target is. The device&apos;s own pin wins over its group&apos;s, the group&apos;s over its
        site&apos;s, the site&apos;s over the organisation&apos;s and the partner&apos;s.
      </p>
      <Select label="Pins of" value={path} onChange={(e) => setPath(e.target.value)}>
        {levels.map((l) => (
          <option key={l.path} value={l.path}>
            {l.label}
          </option>
        ))}
      </Select>
      <QueryState query={pins}>{() => (pins.data ? <PinsForm key={path} path={path} deviceId={device.id} value={pins.data} /> : null)}</QueryState>
    </Card>
  );
}

function PinsForm({ path, deviceId, value }: { path: string; deviceId: string; value: Pins }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const writable = can('devices', 'write');
  const [pins, setPins] = useState<Record<(typeof COMPONENTS)[number], string>>({
    agent: value.pinnedVersions?.agent ?? '', helper: value.pinnedVersions?.helper ?? '', watchdog: value.pinnedVersions?.watchdog ?? '',
  });
  const [saved, setSaved] = useState(false);
  const s = useSubmit(async () => {
    setSaved(false);
    const pinned: Record<string, string> = {};
    for (const [k, v] of Object.entries(pins)) if (v.trim()) pinned[k] = v.trim();
    await api('PUT', path, { body: { pinnedVersions: Object.keys(pinned).length ? pinned : null } });
    setSaved(true);
    await qc.invalidateQueries({ queryKey: keys.agentUpdateSettings.of(path) });
    await qc.invalidateQueries({ queryKey: keys.devices.decision(deviceId) });
  });
  return (
    <form onSubmit={s.submit} aria-label="Update pins">
      <fieldset disabled={!writable}>
        <legend>Pinned versions (empty: not pinned here)</legend>
        <div className="filters">
          {COMPONENTS.map((c) => (
            <Field key={c} label={`Pinned ${c} version`} maxLength={64} pattern="[0-9A-Za-z][0-9A-Za-z.+\-]*" value={pins[c]} onChange={(e) => setPins({ ...pins, [c]: e.target.value })} error={s.fields[`pinnedVersions.${c}`]} />
          ))}
        </div>
      </fieldset>
      <ErrorAlert error={s.error} />
      {saved && <Alert kind="success">Pins saved.</Alert>}
      {writable ? (
        <Button type="submit" busy={s.busy}>
          Save pins
        </Button>
      ) : (
        <p className="muted small">Changing pins needs the devices:write permission.</p>
      )}
    </form>
  );
}

/** The reasons for being behind, as the distribution and the Devices page's filter name them. */
export const REASON_LABEL: Record<Distribution['behind'][number]['reason'], string> = {
  auto_update_off: 'Automatic updates off',
  pinned: 'Pinned to another version',
  no_build: 'No build for their platform',
  rolled_back: 'Failed or rolled back the target',
  halted: 'Rollout halted',
  offline: 'Offline',
  updating: 'Updating now',
  outside_window: 'Waiting for their maintenance window',
  rollout: 'Offered, or not yet in the staged rollout',
};

/**
 * The distribution of the tenant picked at the top (an organisation, the partner, or the whole
 * fleet for platform administrators): two tables, devices per version and devices behind per reason.
 * Their rows are the API's answer as is (`versions`, `behind`), for a chart to draw from.
 */
/**
 * The distribution as two bar charts (the console's one chart component: a picture with its numbers
 * as a table); the tables below keep each reason a link to its devices.
 */
function DistributionCharts({ dist, scope }: { dist: Distribution; scope: string }) {
  const versions = useMemo(
    () => ({ labels: dist.versions.map((v) => `${v.component} ${v.version}`), series: [{ name: 'Devices', values: dist.versions.map((v) => v.devices), tone: 'accent' as const }] }),
    [dist.versions],
  );
  const behind = useMemo(
    () => ({ labels: dist.behind.map((b) => REASON_LABEL[b.reason]), series: [{ name: 'Devices', values: dist.behind.map((b) => b.devices), tone: 'warn' as const }] }),
    [dist.behind],
  );
  const total = dist.versions.reduce((n, v) => n + v.devices, 0);
  const late = dist.behind.reduce((n, b) => n + b.devices, 0);
  if (dist.versions.length === 0) return null;
  return (
    <div className="chart-pair">
      <Chart
        kind="bar"
        title={`Devices per version (${scope})`}
        summary={`${total} component installations over ${dist.versions.length} versions.`}
        labels={versions.labels}
        series={versions.series}
        labelHeading="Component and version"
      />
      {dist.behind.length > 0 && (
        <Chart
          kind="bar"
          title={`Devices behind the target, per reason (${scope})`}
          summary={`${late} devices behind the fleet target.`}
          labels={behind.labels}
          series={behind.series}
          labelHeading="Reason"
        />
      )}
    </div>
  );
}

export function VersionDistribution() {
  const t = useTenant();
  const query = t.orgId ? { orgId: t.orgId } : t.partnerId ? { partnerId: t.partnerId } : {};
  const scope = t.orgId ? 'this organisation' : t.partnerId ? 'the partner' : 'the whole fleet';
  // The Devices page of the same selection, filtered by the reason (`GET /devices?behind=`: the devices counted).
  const scopeParam = t.orgId ? `orgId=${t.orgId}&` : t.partnerId ? `partnerId=${t.partnerId}&` : '';
  const devicesHref = (reason: string) => `/devices?${scopeParam}behind=${reason}`;
  const dist = useQuery({
    queryKey: keys.agentVersions.distribution(query),
    queryFn: async () => dataOf(await client.GET('/api/v1/agent-versions/distribution', { params: { query } })),
  });
  return (
    <Card title="Distribution">
      <p className="muted small">Devices of {scope} per installed version, and why those behind the fleet target are behind (each device counted once).</p>
      <QueryState query={dist}>
        {() => (
          <>
            {dist.data && <DistributionCharts dist={dist.data} scope={scope} />}
            <TableFrame label={`Devices per version (${scope})`}>
              <thead>
                <tr>
                  <th scope="col">Component</th>
                  <th scope="col">Version</th>
                  <th scope="col">Devices</th>
                </tr>
              </thead>
              <tbody>
                {(dist.data?.versions ?? []).map((v) => (
                  <tr key={`${v.component}:${v.version}`}>
                    <td>{v.component}</td>
                    <td>{v.version}</td>
                    <td>{v.devices}</td>
                  </tr>
                ))}
                {dist.data?.versions.length === 0 && (
                  <tr>
                    <td colSpan={3}>No devices yet.</td>
                  </tr>
                )}
              </tbody>
            </TableFrame>
            <TableFrame label={`Devices behind the target, per reason (${scope})`}>
              <thead>
                <tr>
                  <th scope="col">Reason</th>
                  <th scope="col">Devices</th>
                </tr>
              </thead>
              <tbody>
                {(dist.data?.behind ?? []).map((b) => (
                  <tr key={b.reason}>
                    <td>
                      <Link href={devicesHref(b.reason)}>{REASON_LABEL[b.reason]}</Link>
                    </td>
                    <td>{b.devices}</td>
                  </tr>
                ))}
                {dist.data?.behind.length === 0 && (
                  <tr>
                    <td colSpan={2}>No device is behind the target.</td>
                  </tr>
                )}
              </tbody>
            </TableFrame>
          </>
        )}
      </QueryState>
    </Card>
  );
}
