// Users of the partner or organisation in context: invite (role, and site/group or organisation
// restrictions), resend, change role, disable, remove; pending invitations.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant, type Org } from '../../tenant';
import { Alert, Button, Checkbox, Dialog, ErrorAlert, Field, PageHeader, Select, TableFrame, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { useDeviceGroups, useRoles, useSites } from './common';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type User = Schema<'User'>;

type Invitation = Schema<'Invitation'>;
type InvitationEmail = Schema<'InvitedUser'>['invitationEmail'];

/** What happened to the invitation email, as the API says (no "was sent" when Keel has no SMTP_URL). */
function invitationNotice(email: string, went: InvitationEmail): string {
  if (went === 'smtp') return `An invitation was sent to ${email}.`;
  if (went === 'log') return `${email} is invited. No email service is set up (SMTP_URL), so the invitation email, with its link, was written to Keel's server log.`;
  return `${email} is invited, but no email was sent: no email service is set up (SMTP_URL). Set one up, then use Resend.`;
}

export const Users = permissionPage(UsersPage, '/admin/users', { context: 'tenant' });

function UsersPage() {
  const { me, can } = useAuth();
  const t = useTenant();
  const qc = useQueryClient();
  const [page, setPage] = useState(1);
  const [search, setSearch] = useState('');
  const [status, setStatus] = useState('');
  const [inviting, setInviting] = useState(false);
  const [notice, setNotice] = useState<string | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const roles = useRoles();
  const users = useQuery({
    queryKey: keys.users.list(t.query, page, search, status),
    queryFn: () => api<Page<User>>('GET', '/users', { query: { ...t.query, page, limit: 25, search, status } }),
  });
  const invitations = useQuery({
    queryKey: keys.invitations.list(t.query),
    enabled: can('users', 'invite'),
    queryFn: () => api<Page<Invitation>>('GET', '/users/invitations', { query: { ...t.query, limit: 100 } }),
  });
  const roleName = (id: string | null) => roles.data?.data.find((r) => r.id === id)?.name ?? '—';
  const reload = () => Promise.all([qc.invalidateQueries({ queryKey: keys.users.all }), qc.invalidateQueries({ queryKey: keys.invitations.all })]);
  const act = async <R,>(fn: () => Promise<R>, done: string | ((r: R) => string)) => {
    setActionError(null);
    setNotice(null);
    try {
      const r = await fn();
      setNotice(typeof done === 'string' ? done : done(r));
      await reload();
    } catch (err) {
      setActionError(err);
    }
  };
  const body = (extra: Record<string, unknown> = {}) => ({ ...extra, ...t.query });

  return (
    <>
      <PageHeader title="Users">{can('users', 'invite') && <Button onClick={() => setInviting(true)}>Invite a user</Button>}</PageHeader>
      {notice && <Alert kind="success">{notice}</Alert>}
      <ErrorAlert error={actionError} />
      <form className="filters" onSubmit={(e) => { e.preventDefault(); setPage(1); }} role="search">
        <Field label="Search" type="search" value={search} onChange={(e) => { setSearch(e.target.value); setPage(1); }} placeholder="Name or email" />
        <Select label="Status" value={status} onChange={(e) => { setStatus(e.target.value); setPage(1); }}>
          <option value="">Any</option>
          <option value="active">Active</option>
          <option value="invited">Invited</option>
          <option value="disabled">Disabled</option>
        </Select>
      </form>
      <PagedTable
        query={users}
        label="Users"
        head={
          <tr>
            <th>Name</th>
            <th>Email</th>
            <th>Role</th>
            <th>Status</th>
            <th>MFA</th>
            <th>Last sign-in</th>
            <th>
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        }
        row={(u) => (
          <tr key={u.id}>
            <td>
              {u.name}
              {u.managedBy === 'scim' && (
                <>
                  {' '}
                  <span className="badge" title="The organisation's directory (SCIM) manages this account's email, name and status">
                    Managed by directory
                  </span>
                </>
              )}
            </td>
            <td>{u.email}</td>
            <td>
              {can('users', 'write') && u.id !== me?.id && roles.data ? (
                <select
                  aria-label={`Role of ${u.email}`}
                  value={u.roleId ?? ''}
                  onChange={(e) => void act(() => api('POST', `/users/${u.id}/role`, { query: t.query, body: body({ roleId: e.target.value }) }), `${u.email} now has the role ${roleName(e.target.value)}.`)}
                >
                  {roles.data.data.map((r) => (
                    <option key={r.id} value={r.id}>
                      {r.name}
                    </option>
                  ))}
                </select>
              ) : (
                roleName(u.roleId)
              )}
            </td>
            <td>{u.status}</td>
            <td>{u.mfaEnabled ? 'on' : 'off'}</td>
            <td>{when(u.lastLoginAt)}</td>
            <td>
              <div className="row">
              {u.status === 'invited' && can('users', 'invite') && (
                <Button kind="link" onClick={() => void act(() => api<{ message: string }>('POST', '/users/resend-invite', { query: t.query, body: body({ userId: u.id }) }), (r) => `${u.email}: ${r.message}.`)}>
                  Resend
                </Button>
              )}
              {u.id !== me?.id && u.status !== 'invited' && can('users', 'write') && (u.managedBy === null || me?.isPlatformAdmin) && (
                <Button
                  kind="link"
                  onClick={() =>
                    void act(
                      () => api('PATCH', `/users/${u.id}`, { query: t.query, body: body({ status: u.status === 'disabled' ? 'active' : 'disabled' }) }),
                      u.status === 'disabled' ? `${u.email} is enabled.` : `${u.email} is disabled and signed out everywhere.`,
                    )
                  }
                >
                  {u.status === 'disabled' ? 'Enable' : 'Disable'}
                </Button>
              )}
              {u.id !== me?.id && u.status !== 'invited' && can('users', 'write') && (
                <Button
                  kind="link"
                  onClick={() => {
                    if (!window.confirm(`Sign ${u.email} out of every session now? They can sign in again; API keys keep working.`)) return;
                    void act(
                      () => api<{ revoked: number }>('POST', `/users/${u.id}/sessions/revoke`, { query: t.query }),
                      (r) => `${u.email} is signed out everywhere (${r.revoked === 1 ? '1 session' : `${r.revoked} sessions`} ended).`,
                    );
                  }}
                >
                  End all sessions
                </Button>
              )}
              {u.id !== me?.id && u.status !== 'invited' && can('users', 'write') && (
                <Button
                  kind="link"
                  onClick={() => {
                    if (!window.confirm(`Reset the second factors of ${u.email}? Their authenticator app, phone and recovery codes are removed, they are signed out everywhere and told by email; they enrol again at their next sign-in.`)) return;
                    void act(() => api('POST', `/users/${u.id}/mfa/reset`, { query: t.query }), `The second factors of ${u.email} are reset; they are signed out everywhere and were told by email.`);
                  }}
                >
                  Reset MFA
                </Button>
              )}
              {u.id !== me?.id && can('users', 'delete') && (
                <Button
                  kind="link"
                  onClick={() => {
                    if (window.confirm(`Remove ${u.email} from this ${t.orgId ? 'organisation' : 'partner'}?`)) void act(() => api('DELETE', `/users/${u.id}`, { query: t.query }), `${u.email} was removed.`);
                  }}
                >
                  Remove
                </Button>
              )}
              </div>
            </td>
          </tr>
        )}
        onPage={setPage}
      />
      {can('users', 'invite') && invitations.data && invitations.data.data.length > 0 && (
        <>
          <h2>Pending invitations</h2>
          <TableFrame label="Pending invitations">
            <thead>
              <tr>
                <th>Email</th>
                <th>Role</th>
                <th>Status</th>
                <th>Expires</th>
                <th>
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {invitations.data.data.map((i) => (
                <tr key={i.id}>
                  <td>{i.email}</td>
                  <td>{roleName(i.roleId)}</td>
                  <td>{i.status}</td>
                  <td>{when(i.expiresAt)}</td>
                  <td>
                    <Button kind="link" onClick={() => void act(() => api('DELETE', `/users/invitations/${i.id}`, { query: t.query }), `The invitation to ${i.email} was revoked.`)}>
                      Revoke
                    </Button>
                  </td>
                </tr>
              ))}
            </tbody>
          </TableFrame>
        </>
      )}
      {inviting && (
        <InviteDialog
          onClose={() => setInviting(false)}
          onDone={(email, went) => {
            setInviting(false);
            setNotice(invitationNotice(email, went));
            void reload();
          }}
        />
      )}
    </>
  );
}

function InviteDialog({ onClose, onDone }: { onClose: () => void; onDone: (email: string, went: InvitationEmail) => void }) {
  const { me } = useAuth();
  const t = useTenant();
  const roles = useRoles();
  const sites = useSites(t.orgId);
  const groups = useDeviceGroups(t.orgId);
  const partnerLevel = !t.orgId && me?.scope !== 'organization';
  const orgs = useQuery({
    queryKey: keys.orgs.forInvite(t.query),
    enabled: partnerLevel,
    queryFn: () => api<Page<Org>>('GET', '/orgs', { query: { ...(t.partnerId && me?.scope === 'system' ? { partnerId: t.partnerId } : {}), limit: 100 } }),
  });
  const [email, setEmail] = useState('');
  const [name, setName] = useState('');
  const [roleId, setRoleId] = useState('');
  const [limitSites, setLimitSites] = useState(false);
  const [siteIds, setSiteIds] = useState<string[]>([]);
  const [limitGroups, setLimitGroups] = useState(false);
  const [groupIds, setGroupIds] = useState<string[]>([]);
  const [orgAccess, setOrgAccess] = useState<'all' | 'selected' | 'none'>('all');
  const [orgIds, setOrgIds] = useState<string[]>([]);
  const [localError, setLocalError] = useState<string | null>(null);
  const toggle = (list: string[], id: string, on: boolean) => (on ? [...list, id] : list.filter((x) => x !== id));

  const s = useSubmit(async () => {
    setLocalError(null);
    if (limitSites && siteIds.length === 0) return setLocalError('Pick at least one site, or allow every site.');
    if (limitGroups && groupIds.length === 0) return setLocalError('Pick at least one device group, or allow every group.');
    if (partnerLevel && orgAccess === 'selected' && orgIds.length === 0) return setLocalError('Pick at least one organisation.');
    const body: Record<string, unknown> = { email: email.trim(), name: name.trim(), roleId, ...t.query };
    if (!partnerLevel) {
      body.siteIds = limitSites ? siteIds : null;
      body.deviceGroupIds = limitGroups ? groupIds : null;
    } else {
      body.orgAccess = orgAccess;
      if (orgAccess === 'selected') body.orgIds = orgIds;
    }
    const invited = await api<{ invitationEmail: InvitationEmail }>('POST', '/users/invite', { query: t.query, body });
    onDone(email.trim(), invited.invitationEmail);
  });

  return (
    <Dialog title="Invite a user" onClose={onClose}>
      <form onSubmit={s.submit} aria-label="Invite a user">
        <ErrorAlert error={s.error} />
        {localError && <Alert>{localError}</Alert>}
        <Field label="Email" type="email" required value={email} onChange={(e) => setEmail(e.target.value)} error={s.fields.email} autoFocus />
        <Field label="Name" required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} />
        <Select label="Role" required value={roleId} onChange={(e) => setRoleId(e.target.value)} error={s.fields.roleId}>
          <option value="">Choose a role…</option>
          {roles.data?.data.map((r) => (
            <option key={r.id} value={r.id}>
              {r.name}
              {r.forceMfa ? ' (requires MFA)' : ''}
            </option>
          ))}
        </Select>
        {!partnerLevel && (
          <>
            <fieldset>
              <legend>Sites</legend>
              <Checkbox label="Only some sites" checked={limitSites} onChange={setLimitSites} />
              {limitSites && sites.data?.data.map((x) => <Checkbox key={x.id} label={x.name} checked={siteIds.includes(x.id)} onChange={(on) => setSiteIds(toggle(siteIds, x.id, on))} />)}
              {limitSites && sites.data?.data.length === 0 && <p className="muted small">This organisation has no sites yet.</p>}
              {s.fields.siteIds && <div className="field-error">{s.fields.siteIds}</div>}
            </fieldset>
            <fieldset>
              <legend>Device groups</legend>
              <Checkbox label="Only some device groups" checked={limitGroups} onChange={setLimitGroups} />
              {limitGroups && groups.data?.data.map((x) => <Checkbox key={x.id} label={x.name} checked={groupIds.includes(x.id)} onChange={(on) => setGroupIds(toggle(groupIds, x.id, on))} />)}
              {limitGroups && groups.data?.data.length === 0 && <p className="muted small">This organisation has no device groups yet.</p>}
              {s.fields.deviceGroupIds && <div className="field-error">{s.fields.deviceGroupIds}</div>}
            </fieldset>
          </>
        )}
        {partnerLevel && (
          <fieldset>
            <legend>Organisations this user reaches</legend>
            <Select label="Access" value={orgAccess} onChange={(e) => setOrgAccess(e.target.value as typeof orgAccess)} error={s.fields.orgAccess}>
              <option value="all">Every organisation of the partner</option>
              <option value="selected">Only the ones picked below</option>
              <option value="none">None (partner-level work only)</option>
            </Select>
            {orgAccess === 'selected' && orgs.data?.data.map((o) => <Checkbox key={o.id} label={o.name} checked={orgIds.includes(o.id)} onChange={(on) => setOrgIds(toggle(orgIds, o.id, on))} />)}
            {s.fields.orgIds && <div className="field-error">{s.fields.orgIds}</div>}
          </fieldset>
        )}
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Send invitation
          </Button>
          <Button type="button" kind="link" onClick={onClose}>
            Cancel
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
