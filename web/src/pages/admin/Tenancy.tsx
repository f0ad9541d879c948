// Partners (platform administrators: name, sign-in address, security settings), organisations with
// their security settings, sites and device groups.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { api, dataOf, client, type Page } from '../../api';
import { useAuth } from '../../auth';
import { securityOf, useTenant, type Org, type SecuritySettings } from '../../tenant';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, PageHeader, Pager, QueryState, Select, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { useDeviceGroups, useSites } from './common';
import { keys } from '../../api/keys';
import { PartnerSlugForm } from '../integrations/PartnerSso';

/** settings.security: require MFA, and which methods are allowed (the stricter of partner and organisation wins). */
function SecurityEditor({ value, canEdit, save }: { value: SecuritySettings | undefined; canEdit: boolean; save: (s: SecuritySettings) => Promise<unknown> }) {
  const [requireMfa, setRequireMfa] = useState(value?.requireMfa ?? false);
  const [methods, setMethods] = useState({ totp: true, sms: true, passkey: true, ...(value?.allowedMfaMethods ?? {}) });
  const [saved, setSaved] = useState(false);
  const s = useSubmit(async () => {
    await save({ requireMfa, allowedMfaMethods: methods });
    setSaved(true);
  });
  const none = !methods.totp && !methods.sms && !methods.passkey;
  return (
    <form onSubmit={s.submit} aria-label="Security settings">
      <ErrorAlert error={s.error} />
      {saved && <Alert kind="success">Security settings saved.</Alert>}
      <Checkbox label="Require a second factor to sign in" checked={requireMfa} disabled={!canEdit} onChange={(v) => { setRequireMfa(v); setSaved(false); }} />
      <fieldset>
        <legend>Allowed second factors</legend>
        {(['totp', 'sms', 'passkey'] as const).map((m) => (
          <Checkbox key={m} label={{ totp: 'Authenticator app', sms: 'Text message', passkey: 'Passkey' }[m]} checked={methods[m]} disabled={!canEdit} onChange={(v) => { setMethods({ ...methods, [m]: v }); setSaved(false); }} />
        ))}
        {none && <div className="field-error">Allow at least one method.</div>}
      </fieldset>
      {canEdit && (
        <Button type="submit" busy={s.busy} disabled={none}>
          Save security settings
        </Button>
      )}
    </form>
  );
}

export const Partners = permissionPage(PartnersPage, '/admin/partners');

function PartnersPage() {
  const qc = useQueryClient();
  const t = useTenant();
  const [page, setPage] = useState(1);
  const [name, setName] = useState('');
  const [open, setOpen] = useState<string | null>(null);
  const [slugOpen, setSlugOpen] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const act = async (fn: () => Promise<unknown>, done: string) => {
    setError(null);
    setNotice(null);
    try {
      await fn();
      setNotice(done);
      await qc.invalidateQueries({ queryKey: keys.partners.all });
    } catch (err) {
      setError(err);
    }
  };
  const list = useQuery({ queryKey: keys.partners.list(page), queryFn: async () => dataOf(await client.GET('/api/v1/partners', { params: { query: { page, limit: 25 } } })) });
  const create = useSubmit(async () => {
    await api('POST', '/partners', { body: { name: name.trim() } });
    setName('');
    await qc.invalidateQueries({ queryKey: keys.partners.all });
  });
  return (
    <>
      <PageHeader title="Partners" />
      <Card title="New partner">
        <form onSubmit={create.submit} className="row">
          <ErrorAlert error={create.error} />
          <Field label="Partner name" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={create.fields.name} />
          <Button type="submit" busy={create.busy}>
            Create partner
          </Button>
        </form>
      </Card>
      {notice && <Alert kind="success">{notice}</Alert>}
      <ErrorAlert error={error} />
      <QueryState query={list}>
        {() => (
          <>
            <ul className="list card" aria-label="Partners">
              {list.data?.data.map((p) => (
                <li key={p.id}>
                  <div>
                    <strong>{p.name}</strong>
                    <div className="small muted">
                      Sign-in page /login/{p.slug} · created {when(p.createdAt)}
                    </div>
                  </div>
                  <div className="row">
                    <Button kind="link" onClick={() => t.setPartnerId(p.id)}>
                      {t.partnerId === p.id ? 'Working in this partner' : 'Work in this partner'}
                    </Button>
                    <Button kind="link" aria-expanded={open === p.id} onClick={() => setOpen(open === p.id ? null : p.id)}>
                      Security settings
                    </Button>
                    <Button kind="link" aria-label={`Sign-in address of partner ${p.name}`} aria-expanded={slugOpen === p.id} onClick={() => setSlugOpen(slugOpen === p.id ? null : p.id)}>
                      Sign-in address
                    </Button>
                    <Button
                      kind="link"
                      aria-label={`Rename partner ${p.name}`}
                      onClick={() => {
                        const next = window.prompt('New name of the partner', p.name);
                        if (next && next.trim() !== p.name) void act(() => api('PATCH', `/partners/${p.id}`, { body: { name: next.trim() } }), `The partner is now called ${next.trim()}.`);
                      }}
                    >
                      Rename
                    </Button>
                    <Button
                      kind="link"
                      aria-label={`Delete partner ${p.name}`}
                      onClick={() => {
                        if (!window.confirm(`Delete the partner ${p.name}? Its users lose their access to it (their accounts stay). A partner that still has organisations cannot be deleted.`)) return;
                        void act(async () => {
                          await api('DELETE', `/partners/${p.id}`);
                          if (t.partnerId === p.id) t.setPartnerId(null);
                        }, `The partner ${p.name} is deleted.`);
                      }}
                    >
                      Delete
                    </Button>
                  </div>
                  {slugOpen === p.id && (
                    <div className="block">
                      <PartnerSlugForm
                        partnerId={p.id}
                        slug={p.slug}
                        label={`Sign-in address of ${p.name}`}
                        onChanged={(slug) => {
                          setSlugOpen(null);
                          setError(null);
                          setNotice(`The sign-in page of ${p.name} is now /login/${slug}.`);
                        }}
                      />
                    </div>
                  )}
                  {open === p.id && (
                    <div className="block">
                      <SecurityEditor value={securityOf(p)} canEdit save={(security) => api('PATCH', `/partners/${p.id}`, { body: { settings: { security } } }).then(() => qc.invalidateQueries({ queryKey: keys.partners.all }))} />
                    </div>
                  )}
                </li>
              ))}
            </ul>
            {list.data && <Pager pagination={list.data.pagination} onPage={setPage} />}
          </>
        )}
      </QueryState>
    </>
  );
}

export const Orgs = permissionPage(OrgsPage, '/admin/orgs');

function OrgsPage() {
  const { me, can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [name, setName] = useState('');
  const query = me?.scope === 'system' && t.partnerId ? { partnerId: t.partnerId } : {};
  const list = useQuery({ queryKey: keys.orgs.list(query, page), queryFn: () => api<Page<Org>>('GET', '/orgs', { query: { ...query, page, limit: 25 } }) });
  const canCreate = can('organizations', 'write') && (me?.scope === 'partner' || (me?.scope === 'system' && !!t.partnerId));
  const create = useSubmit(async () => {
    await api('POST', '/orgs', { body: { name: name.trim(), ...(me?.scope === 'system' && t.partnerId ? { partnerId: t.partnerId } : {}) } });
    setName('');
    await qc.invalidateQueries({ queryKey: keys.orgs.all });
  });
  return (
    <>
      <PageHeader title="Organisations" />
      {canCreate && (
        <Card title="New organisation">
          <form onSubmit={create.submit} className="row">
            <ErrorAlert error={create.error} />
            <Field label="Organisation name" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={create.fields.name} />
            <Button type="submit" busy={create.busy}>
              Create organisation
            </Button>
          </form>
        </Card>
      )}
      <PagedTable
        query={list}
        label="Organisations"
        head={
          <tr>
            <th>Name</th>
            <th>Requires MFA</th>
            <th>Created</th>
          </tr>
        }
        row={(o) => (
          <tr key={o.id}>
            <td>
              <Link href={`/admin/orgs/${o.id}`}>{o.name}</Link>
            </td>
            <td>{securityOf(o)?.requireMfa ? 'yes' : 'no'}</td>
            <td>{when(o.createdAt)}</td>
          </tr>
        )}
        onPage={setPage}
      />
    </>
  );
}

export const OrgDetail = permissionPage(OrgPage, '/admin/orgs');

function OrgPage({ id }: { id: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const org = useQuery({ queryKey: keys.orgs.detail(id), queryFn: async () => dataOf(await client.GET('/api/v1/orgs/{id}', { params: { path: { id } } })) });
  const [name, setName] = useState<string | null>(null);
  const rename = useSubmit(async () => {
    await api('PATCH', `/orgs/${id}`, { body: { name: (name ?? '').trim() } });
    setName(null);
    await qc.invalidateQueries({ queryKey: keys.orgs.detail(id) });
  });
  const remove = useSubmit(async () => {
    if (!window.confirm(`Delete ${org.data?.name ?? 'this organisation'} with its sites, groups, users' memberships and devices? This cannot be undone.`)) return;
    await api('DELETE', `/orgs/${id}`);
    // Leave first: the deleted one's page must not refetch itself into a 404.
    navigate('/admin/orgs');
    await qc.invalidateQueries({ queryKey: keys.orgs.all });
  });
  return (
    <QueryState query={org}>
      {() =>
        org.data && (
          <>
            <PageHeader title={org.data.name}>
              {can('devices', 'read') && <Link href={`/devices/install?orgId=${id}`}>Install agent</Link>}
              <Link href="/admin/orgs">All organisations</Link>
            </PageHeader>
            {can('organizations', 'write') && (
              <Card title="Name">
                <form onSubmit={rename.submit} className="row">
                  <ErrorAlert error={rename.error} />
                  <Field label="Organisation name" required maxLength={200} value={name ?? org.data.name} onChange={(e) => setName(e.target.value)} error={rename.fields.name} />
                  <Button type="submit" busy={rename.busy} disabled={name === null}>
                    Rename
                  </Button>
                </form>
              </Card>
            )}
            <Card title="Security">
              <SecurityEditor
                key={id}
                value={securityOf(org.data)}
                canEdit={can('organizations', 'write')}
                save={(security) => api('PATCH', `/orgs/${id}`, { body: { settings: { security } } }).then(() => qc.invalidateQueries({ queryKey: keys.orgs.detail(id) }))}
              />
            </Card>
            {can('sites', 'read') && <Sites orgId={id} />}
            {can('devices', 'read') && <DeviceGroups orgId={id} />}
            {can('organizations', 'delete') && (
              <Card title="Delete organisation">
                <ErrorAlert error={remove.error} />
                <Button kind="danger" busy={remove.busy} onClick={() => remove.submit()}>
                  Delete this organisation
                </Button>
              </Card>
            )}
          </>
        )
      }
    </QueryState>
  );
}

function Sites({ orgId }: { orgId: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const sites = useSites(orgId);
  const [name, setName] = useState('');
  const [error, setError] = useState<unknown>(null);
  const reload = () => qc.invalidateQueries({ queryKey: keys.sites.ofOrg(orgId) });
  const add = useSubmit(async () => {
    await api('POST', `/orgs/${orgId}/sites`, { body: { name: name.trim() } });
    setName('');
    await reload();
  });
  const act = async (fn: () => Promise<unknown>) => {
    setError(null);
    try {
      await fn();
      await reload();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <Card title="Sites">
      <ErrorAlert error={error} />
      <QueryState query={sites}>
        {() => (
          <ul className="list">
            {sites.data?.data.length === 0 && <li className="muted">No sites yet.</li>}
            {sites.data?.data.map((s) => (
              <li key={s.id}>
                <span>{s.name}</span>
                <div className="row">
                  {can('devices', 'read') && (
                    <Link href={`/devices/install?orgId=${orgId}&siteId=${s.id}`} aria-label={`Install agent for site ${s.name}`}>
                      Install agent
                    </Link>
                  )}
                  {can('sites', 'write') && (
                    <Button
                      kind="link"
                      aria-label={`Rename site ${s.name}`}
                      onClick={() => {
                        const next = window.prompt('New name of the site', s.name);
                        if (next && next.trim() !== s.name) void act(() => api('PATCH', `/sites/${s.id}`, { body: { name: next.trim() } }));
                      }}
                    >
                      Rename
                    </Button>
                  )}
                  {can('sites', 'delete') && (
                    <Button kind="link" aria-label={`Delete site ${s.name}`} onClick={() => window.confirm(`Delete the site ${s.name}? Its devices and groups stay, without a site.`) && void act(() => api('DELETE', `/sites/${s.id}`))}>
                      Delete
                    </Button>
                  )}
                </div>
              </li>
            ))}
          </ul>
        )}
      </QueryState>
      {can('sites', 'write') && (
        <form onSubmit={add.submit} className="row inline-form">
          <ErrorAlert error={add.error} />
          <Field label="New site" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={add.fields.name} />
          <Button type="submit" busy={add.busy}>
            Add site
          </Button>
        </form>
      )}
    </Card>
  );
}

function DeviceGroups({ orgId }: { orgId: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const groups = useDeviceGroups(orgId);
  const sites = useSites(orgId);
  const [name, setName] = useState('');
  const [siteId, setSiteId] = useState('');
  const [error, setError] = useState<unknown>(null);
  const reload = () => qc.invalidateQueries({ queryKey: keys.deviceGroups.ofOrg(orgId) });
  const add = useSubmit(async () => {
    await api('POST', `/orgs/${orgId}/device-groups`, { body: { name: name.trim(), siteId: siteId || null } });
    setName('');
    await reload();
  });
  const act = async (fn: () => Promise<unknown>) => {
    setError(null);
    try {
      await fn();
      await reload();
    } catch (err) {
      setError(err);
    }
  };
  const siteName = (id: string | null) => (id ? (sites.data?.data.find((s) => s.id === id)?.name ?? 'a site') : 'no site');
  return (
    <Card title="Device groups">
      <ErrorAlert error={error} />
      <QueryState query={groups}>
        {() => (
          <ul className="list">
            {groups.data?.data.length === 0 && <li className="muted">No device groups yet.</li>}
            {groups.data?.data.map((g) => (
              <li key={g.id}>
                <span>
                  <bdi>{g.name}</bdi> <span className="small muted">({siteName(g.siteId)})</span>
                </span>
                <div className="row">
                  {can('devices', 'read') && (
                    <Link href={`/devices/install?orgId=${orgId}&deviceGroupId=${g.id}`} aria-label={`Install agent for group ${g.name}`}>
                      Install agent
                    </Link>
                  )}
                  {can('devices', 'write') && (
                    <Button
                      kind="link"
                      aria-label={`Rename group ${g.name}`}
                      onClick={() => {
                        const next = window.prompt('New name of the device group', g.name);
                        if (next && next.trim() !== g.name) void act(() => api('PATCH', `/device-groups/${g.id}`, { body: { name: next.trim() } }));
                      }}
                    >
                      Rename
                    </Button>
                  )}
                  {can('devices', 'write') && (
                    <select aria-label={`Site of ${g.name}`} value={g.siteId ?? ''} onChange={(e) => void act(() => api('PATCH', `/device-groups/${g.id}`, { body: { siteId: e.target.value || null } }))}>
                      <option value="">No site</option>
                      {sites.data?.data.map((s) => (
                        <option key={s.id} value={s.id}>
                          {s.name}
                        </option>
                      ))}
                    </select>
                  )}
                  {can('devices', 'delete') && (
                    <Button kind="link" aria-label={`Delete group ${g.name}`} onClick={() => window.confirm(`Delete the group ${g.name}? Its devices stay, ungrouped.`) && void act(() => api('DELETE', `/device-groups/${g.id}`))}>
                      Delete
                    </Button>
                  )}
                </div>
              </li>
            ))}
          </ul>
        )}
      </QueryState>
      {can('devices', 'write') && (
        <form onSubmit={add.submit} className="row inline-form">
          <ErrorAlert error={add.error} />
          <Field label="New device group" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={add.fields.name} />
          <Select label="In site" value={siteId} onChange={(e) => setSiteId(e.target.value)}>
            <option value="">No site</option>
            {sites.data?.data.map((s) => (
              <option key={s.id} value={s.id}>
                {s.name}
              </option>
            ))}
          </Select>
          <Button type="submit" busy={add.busy}>
            Add group
          </Button>
        </form>
      )}
    </Card>
  );
}
