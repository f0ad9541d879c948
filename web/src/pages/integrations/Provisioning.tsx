// SCIM provisioning of the organisation in context (README "SCIM provisioning"): the base URL a
// directory is given, its tokens (made here, shown once; revoked here), when a directory last
// called, the role of new people and the group mappings, and the accounts the directory manages.
// Writes need a session with a second factor.
import { useEffect, useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, PageHeader, PagedTable, QueryState, Select, TableFrame, useSubmit, when } from '../../ui';
import { permissionPage } from '../../permission';
import { useRoles } from '../admin/common';
import { CopyValue } from './Sso';
import { keys } from '../../api/keys';
import { GroupRoleMappings } from './GroupRoleMappings';
import type { Schema } from '../../api/types';

type Token = Schema<'ScimToken'>;
type Created = Schema<'ScimTokenCreated'>;
type Settings = Schema<'ScimSettings'>;
type Managed = Schema<'ScimManagedUser'>;

/** The SCIM base URL a directory is given: this console's origin (Keel serves both) and `/scim/v2`. */
export const scimBaseUrl = () => `${window.location.origin}/scim/v2`;

export const Provisioning = permissionPage(ProvisioningPage, '/integrations/provisioning', { context: 'org', mfa: 'SCIM provisioning' });

function ProvisioningPage() {
  const { can } = useAuth();
  const t = useTenant();
  const orgId = t.orgId ?? '';
  const writable = can('users', 'write');
  return (
    <>
      <PageHeader title="Provisioning" />
      <p className="muted">Your directory (Microsoft Entra ID, Okta, JumpCloud, OneLogin…) creates, changes and disables the organisation’s people in Keel over SCIM 2.0.</p>
      <Card title="Connection">
        <dl className="facts">
          <dt>SCIM base URL (tenant URL)</dt>
          <dd>
            <CopyValue label="SCIM base URL" value={scimBaseUrl()} />
          </dd>
        </dl>
      </Card>
      <Tokens orgId={orgId} writable={writable} />
      <RoleSettings orgId={orgId} writable={writable} />
      <ManagedUsers orgId={orgId} />
    </>
  );
}

function Tokens({ orgId, writable }: { orgId: string; writable: boolean }) {
  const qc = useQueryClient();
  const base = `/orgs/${orgId}/scim-tokens`;
  const list = useQuery({ queryKey: keys.scimTokens.list(orgId), queryFn: () => api<Page<Token>>('GET', base, { query: { limit: 100 } }), enabled: Boolean(orgId) });
  const [name, setName] = useState('');
  const [made, setMade] = useState<Created | null>(null);
  const [error, setError] = useState<unknown>(null);
  const refresh = () => qc.invalidateQueries({ queryKey: keys.scimTokens.all });
  const create = useSubmit(async () => {
    setMade(await api<Created>('POST', base, { body: { name: name.trim() } }));
    setName('');
    await refresh();
  });
  const revoke = async (tk: Token) => {
    if (!window.confirm(`Revoke the token “${tk.name}”? The directory using it stops at its next request.`)) return;
    setError(null);
    try {
      await api('DELETE', `${base}/${tk.id}`);
      await refresh();
    } catch (err) {
      setError(err);
    }
  };
  const lastSync = (list.data?.data ?? []).map((tk) => tk.lastUsedAt).filter((v): v is string => v !== null).sort().at(-1) ?? null;
  return (
    <Card title="Tokens">
      <QueryState query={list}>
        {() => (
          <>
            <p>Last sync seen: {lastSync ? when(lastSync) : 'never (no directory has called yet)'}</p>
            <ErrorAlert error={error} />
            <TableFrame label="SCIM tokens">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>Starts with</th>
                  <th>Created</th>
                  <th>Last used</th>
                  <th>Expires</th>
                  {writable && (
                    <th>
                      <span className="sr-only">Actions</span>
                    </th>
                  )}
                </tr>
              </thead>
              <tbody>
                {list.data?.data.length === 0 && (
                  <tr>
                    <td colSpan={writable ? 6 : 5} className="muted">
                      No tokens yet.
                    </td>
                  </tr>
                )}
                {list.data?.data.map((tk) => (
                  <tr key={tk.id}>
                    <td>{tk.name}</td>
                    <td>
                      <code>{tk.prefix}…</code>
                    </td>
                    <td>{when(tk.createdAt)}</td>
                    <td>{tk.lastUsedAt ? when(tk.lastUsedAt) : 'never'}</td>
                    <td>{tk.expiresAt ? when(tk.expiresAt) : 'never'}</td>
                    {writable && (
                      <td>
                        <Button kind="danger" onClick={() => void revoke(tk)} aria-label={`Revoke ${tk.name}`}>
                          Revoke
                        </Button>
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </TableFrame>
          </>
        )}
      </QueryState>
      {made && (
        <Alert kind="success">
          <p>Token “{made.name}” made. Copy it now into your directory’s secret token field: it is not shown again.</p>
          <CopyValue label="new SCIM token" value={made.token} />
        </Alert>
      )}
      {writable && (
        <form onSubmit={create.submit} aria-label="Make a SCIM token">
          <ErrorAlert error={create.error} />
          <Field label="Token name" required maxLength={100} value={name} onChange={(e) => setName(e.target.value)} error={create.fields.name} hint="What the token is for, e.g. Entra ID provisioning." />
          <Button type="submit" busy={create.busy}>
            Make token
          </Button>
        </form>
      )}
    </Card>
  );
}

function RoleSettings({ orgId, writable }: { orgId: string; writable: boolean }) {
  const qc = useQueryClient();
  const path = `/orgs/${orgId}/scim-settings`;
  const settings = useQuery({ queryKey: keys.scimSettings.detail(orgId), queryFn: () => api<Settings>('GET', path), enabled: Boolean(orgId) });
  const roles = useRoles('users');
  const orgRoles = (roles.data?.data ?? []).filter((r) => r.scope === 'organization' && (r.orgId === null || r.orgId === orgId));
  const [defaultRoleId, setDefaultRoleId] = useState('');
  const [mappings, setMappings] = useState<Settings['groupRoleMappings']>([]);
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    if (!settings.data) return;
    setDefaultRoleId(settings.data.defaultRoleId);
    setMappings(settings.data.groupRoleMappings);
  }, [settings.data]);
  const save = useSubmit(async () => {
    setSaved(false);
    await api<Settings>('PUT', path, { body: { defaultRoleId, groupRoleMappings: mappings } });
    await qc.invalidateQueries({ queryKey: keys.scimSettings.all });
    setSaved(true);
  });
  const f = save.fields;
  return (
    <Card title="Roles">
      <QueryState query={settings}>
        {() => (
          <form onSubmit={save.submit} aria-label="Provisioning roles">
            <fieldset disabled={!writable}>
              <legend>Roles of provisioned people</legend>
              <Select label="Role of new people" value={defaultRoleId} onChange={(e) => setDefaultRoleId(e.target.value)} error={f.defaultRoleId}>
                {orgRoles.map((r) => (
                  <option key={r.id} value={r.id}>
                    {r.name}
                  </option>
                ))}
              </Select>
              <strong>Group-to-role mappings</strong>
              <p className="hint">
                When a person joins or leaves a directory group, their role becomes the one their groups give: of several, the role with the most permissions (roles that may change something before read-only ones; on a tie, the earlier mapping), never more than the token’s creator may grant; in no mapped group, the role of new people. Groups are named by their display name.
              </p>
              <GroupRoleMappings mappings={mappings} onChange={setMappings} roles={orgRoles} errors={f} />
            </fieldset>
            {writable && (
              <>
                <ErrorAlert error={save.error} />
                {saved && <Alert kind="success">Saved.</Alert>}
                <Button type="submit" busy={save.busy}>
                  Save roles
                </Button>
              </>
            )}
          </form>
        )}
      </QueryState>
    </Card>
  );
}

function ManagedUsers({ orgId }: { orgId: string }) {
  const [page, setPage] = useState(1);
  const list = useQuery({
    queryKey: keys.scimUsers.list(orgId, page),
    queryFn: () => api<Page<Managed>>('GET', `/orgs/${orgId}/scim-users`, { query: { page, limit: 25 } }),
    enabled: Boolean(orgId),
  });
  return (
    <Card title="Managed people">
      <PagedTable
        query={list}
        label="People the directory manages"
        columns={5}
        empty="The directory has not provisioned anyone yet."
        head={
          <tr>
            <th>Name</th>
            <th>Email (userName)</th>
            <th>Directory id</th>
            <th>Status</th>
            <th>Last change</th>
          </tr>
        }
        row={(u) => (
          <tr key={u.id}>
            <td>{u.name}</td>
            <td>{u.userName}</td>
            <td>{u.externalId ?? '—'}</td>
            <td>{u.active ? 'active' : 'disabled'}</td>
            <td>{when(u.lastModified)}</td>
          </tr>
        )}
        onPage={setPage}
      />
    </Card>
  );
}
