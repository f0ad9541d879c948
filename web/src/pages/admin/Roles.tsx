// Roles: the list, the builder (parent role, Force MFA, a permission grid from the catalog),
// effective permissions with the role each inherited one comes from, clone and delete.
import { useMemo, useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { api, dataOf, client, type Permission } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, PageHeader, QueryState, Select, TableFrame, useSubmit } from '../../ui';
import { permissionPage } from '../../permission';
import { useRoles, type Role } from './common';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type CatalogEntry = Schema<'CatalogEntry'>;

type Effective = Schema<'EffectivePermissions'>;

const CANONICAL = ['read', 'write', 'delete', 'execute'];
const key = (p: Permission) => `${p.resource}:${p.action}`;

export const Roles = permissionPage(RolesPage, '/admin/roles', { context: 'tenant' });

function RolesPage() {
  const { can } = useAuth();
  const roles = useRoles('roles');
  const [building, setBuilding] = useState(false);
  const byId = (id: string | null) => roles.data?.data.find((r) => r.id === id)?.name;
  return (
    <>
      <PageHeader title="Roles">{can('users', 'write') && !building && <Button onClick={() => setBuilding(true)}>New role</Button>}</PageHeader>
      {building && <RoleBuilder onDone={() => setBuilding(false)} />}
      <QueryState query={roles}>
        {() => (
          <TableFrame label="Roles">
            <thead>
              <tr>
                <th>Name</th>
                <th>Kind</th>
                <th>Parent</th>
                <th>Force MFA</th>
                <th>Users</th>
              </tr>
            </thead>
            <tbody>
              {roles.data?.data.map((r) => (
                <tr key={r.id}>
                  <td>
                    <Link href={`/admin/roles/${r.id}`}>{r.name}</Link>
                  </td>
                  <td>{r.isSystem ? 'built in' : 'custom'} · {r.scope}</td>
                  <td>{byId(r.parentRoleId) ?? '—'}</td>
                  <td>{r.forceMfa ? 'yes' : 'no'}</td>
                  <td>{r.userCount}</td>
                </tr>
              ))}
            </tbody>
          </TableFrame>
        )}
      </QueryState>
    </>
  );
}

function useCatalog() {
  return useQuery({ queryKey: keys.catalog.all, staleTime: Infinity, queryFn: async () => dataOf(await client.GET('/api/v1/permissions/catalog', { params: { query: { limit: 100 } } })) });
}

/** Checkboxes for every catalog pair, a row per resource; wildcard pairs are kept as they are. */
export function PermissionGrid({ value, onChange, inherited, disabled }: { value: Set<string>; onChange: (v: Set<string>) => void; inherited?: Set<string>; disabled?: boolean }) {
  const catalog = useCatalog();
  const rows = useMemo(() => {
    const m = new Map<string, CatalogEntry[]>();
    for (const e of catalog.data?.data ?? []) m.set(e.resource, [...(m.get(e.resource) ?? []), e]);
    return [...m.entries()];
  }, [catalog.data]);
  const toggle = (k: string, on: boolean) => {
    const next = new Set(value);
    if (on) next.add(k);
    else next.delete(k);
    onChange(next);
  };
  return (
    <QueryState query={catalog}>
      {() => (
        <TableFrame label="Permissions" className="perm-grid">
          <thead>
            <tr>
              <th>Resource</th>
              {CANONICAL.map((a) => (
                <th key={a}>{a}</th>
              ))}
              <th>other</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(([resource, entries]) => (
              <tr key={resource}>
                <td>{resource}</td>
                {CANONICAL.map((a) => {
                  const entry = entries.find((e) => e.action === a);
                  const k = `${resource}:${a}`;
                  return (
                    <td key={a}>
                      {entry && (
                        <input
                          type="checkbox"
                          aria-label={entry.description}
                          title={inherited?.has(k) ? 'Also inherited from the parent role' : entry.description}
                          checked={value.has(k)}
                          disabled={disabled}
                          onChange={(e) => toggle(k, e.target.checked)}
                        />
                      )}
                      {inherited?.has(k) && !value.has(k) && <span className="small muted"> inherited</span>}
                    </td>
                  );
                })}
                <td>
                  {entries
                    .filter((e) => !CANONICAL.includes(e.action))
                    .map((e) => (
                      <label key={e.action} className="checkbox small">
                        <input type="checkbox" checked={value.has(key(e))} disabled={disabled} onChange={(ev) => toggle(key(e), ev.target.checked)} /> {e.action}
                      </label>
                    ))}
                </td>
              </tr>
            ))}
          </tbody>
        </TableFrame>
      )}
    </QueryState>
  );
}

function RoleBuilder({ role, onDone }: { role?: Role; onDone: (r?: Role) => void }) {
  const t = useTenant();
  const qc = useQueryClient();
  const roles = useRoles('roles');
  const [name, setName] = useState(role?.name ?? '');
  const [description, setDescription] = useState(role?.description ?? '');
  const [parentRoleId, setParent] = useState(role?.parentRoleId ?? '');
  const [forceMfa, setForceMfa] = useState(role?.forceMfa ?? false);
  const [perms, setPerms] = useState(() => new Set((role?.permissions ?? []).map(key)));
  const parent = roles.data?.data.find((r) => r.id === parentRoleId);
  const parentPerms = useQuery({
    queryKey: keys.roles.effective(parentRoleId, t.query),
    enabled: !!parentRoleId,
    queryFn: () => api<Effective>('GET', `/roles/${parentRoleId}/effective-permissions`, { query: t.query }),
  });
  const inherited = new Set([...(parentPerms.data?.direct ?? []), ...(parentPerms.data?.inherited ?? [])].map(key));
  const s = useSubmit(async () => {
    const body = {
      name: name.trim(),
      description: description.trim() || null,
      parentRoleId: parentRoleId || null,
      forceMfa,
      permissions: [...perms].map((k) => {
        const i = k.lastIndexOf(':');
        return { resource: k.slice(0, i), action: k.slice(i + 1) };
      }),
    };
    const saved = role ? await api<Role>('PATCH', `/roles/${role.id}`, { query: t.query, body }) : await api<Role>('POST', '/roles', { query: t.query, body: { ...body, ...t.query } });
    await qc.invalidateQueries({ queryKey: keys.roles.all });
    await qc.invalidateQueries({ queryKey: keys.roles.detail(saved.id) });
    await qc.invalidateQueries({ queryKey: keys.roles.effectiveAll() });
    onDone(saved);
  });
  return (
    <Card title={role ? `Edit ${role.name}` : 'New role'}>
      <form onSubmit={s.submit} aria-label={role ? 'Edit role' : 'New role'}>
        <ErrorAlert error={s.error} />
        <Field label="Role name" required maxLength={100} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} />
        <Field label="Description" maxLength={500} value={description} onChange={(e) => setDescription(e.target.value)} error={s.fields.description} />
        <Select label="Parent role (its permissions are inherited)" value={parentRoleId} onChange={(e) => setParent(e.target.value)} error={s.fields.parentRoleId}>
          <option value="">No parent</option>
          {roles.data?.data
            .filter((r) => r.id !== role?.id)
            .map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
        </Select>
        {parent && <p className="small muted">Inherits {inherited.size} permission(s) from {parent.name}; they are marked “inherited” below.</p>}
        <Checkbox label="Force MFA: holders must enrol a second factor" checked={forceMfa} onChange={setForceMfa} />
        <h3>Permissions</h3>
        {s.fields.permissions && <div className="field-error">{s.fields.permissions}</div>}
        <PermissionGrid value={perms} onChange={setPerms} inherited={inherited} />
        <div className="row">
          <Button type="submit" busy={s.busy}>
            {role ? 'Save role' : 'Create role'}
          </Button>
          <Button type="button" kind="link" onClick={() => onDone()}>
            Cancel
          </Button>
        </div>
      </form>
    </Card>
  );
}

export const RoleDetail = permissionPage(RolePage, '/admin/roles');

function RolePage({ id }: { id: string }) {
  const { can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const [editing, setEditing] = useState(false);
  const [cloneName, setCloneName] = useState('');
  const role = useQuery({ queryKey: keys.roles.detail(id, t.query), queryFn: async () => dataOf(await client.GET('/api/v1/roles/{id}', { params: { path: { id }, query: t.query } })) });
  const effective = useQuery({ queryKey: keys.roles.effective(id, t.query), queryFn: async () => dataOf(await client.GET('/api/v1/roles/{id}/effective-permissions', { params: { path: { id }, query: t.query } })) });
  const clone = useSubmit(async () => {
    const r = await api<Role>('POST', `/roles/${id}/clone`, { query: t.query, body: { name: cloneName.trim(), ...t.query } });
    await qc.invalidateQueries({ queryKey: keys.roles.all });
    setCloneName('');
    navigate(`/admin/roles/${r.id}`);
  });
  const remove = useSubmit(async () => {
    if (!window.confirm('Delete this role?')) return;
    await api('DELETE', `/roles/${id}`, { query: t.query });
    // Leave first: the deleted one's page must not refetch itself into a 404.
    navigate('/admin/roles');
    await qc.invalidateQueries({ queryKey: keys.roles.all });
  });
  const r = role.data;
  return (
    <QueryState query={role}>
      {() =>
        r && (
          <>
            <PageHeader title={r.name}>
              <Link href="/admin/roles">All roles</Link>
            </PageHeader>
            <p className="muted">
              {r.isSystem ? 'Built-in role (read only: clone it to change it)' : 'Custom role'} · {r.scope} · {r.userCount} user(s){r.forceMfa ? ' · Force MFA' : ''}
            </p>
            {editing ? (
              <RoleBuilder role={r} onDone={() => setEditing(false)} />
            ) : (
              !r.isSystem &&
              can('users', 'write') && (
                <p>
                  <Button onClick={() => setEditing(true)}>Edit role</Button>
                </p>
              )
            )}
            <Card title="Effective permissions">
              <QueryState query={effective}>
                {() => (
                  <TableFrame label="Effective permissions">
                    <thead>
                      <tr>
                        <th>Permission</th>
                        <th>From</th>
                      </tr>
                    </thead>
                    <tbody>
                      {effective.data?.direct.map((p) => (
                        <tr key={`d-${key(p)}`}>
                          <td>
                            <code>{key(p)}</code>
                          </td>
                          <td>this role</td>
                        </tr>
                      ))}
                      {effective.data?.inherited.map((p) => (
                        <tr key={`i-${key(p)}-${p.sourceRoleId}`}>
                          <td>
                            <code>{key(p)}</code>
                          </td>
                          <td>
                            inherited from <Link href={`/admin/roles/${p.sourceRoleId}`}>{p.sourceRoleName}</Link>
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </TableFrame>
                )}
              </QueryState>
            </Card>
            {can('users', 'write') && (
              <Card title="Clone">
                <form onSubmit={clone.submit} className="row">
                  <ErrorAlert error={clone.error} />
                  <Field label="Name of the copy" required maxLength={100} value={cloneName} onChange={(e) => setCloneName(e.target.value)} error={clone.fields.name} />
                  <Button type="submit" busy={clone.busy}>
                    Clone role
                  </Button>
                </form>
              </Card>
            )}
            {!r.isSystem && can('users', 'delete') && (
              <Card title="Delete">
                <ErrorAlert error={remove.error} />
                {r.userCount > 0 && <Alert kind="info">A role can be deleted only when no user holds it and no role inherits from it.</Alert>}
                <Button kind="danger" busy={remove.busy} onClick={() => remove.submit()}>
                  Delete role
                </Button>
              </Card>
            )}
          </>
        )
      }
    </QueryState>
  );
}
