// Single sign-on providers of the organisation in context: list, create from a preset, edit (OIDC
// or SAML fields, attribute mapping, group-to-role mappings), status, the discovery or certificate
// test with its report, and the SAML metadata link. Writes need a session with a second factor.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { API, api, type Page } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, MfaNote, PageHeader, Pager, QueryState, Select, TableFrame, TextArea, useSubmit, when } from '../../ui';
import { permissionPage } from '../../permission';
import { useRoles } from '../admin/common';

type SsoStatus = 'inactive' | 'testing' | 'active';

interface AttributeMapping {
  email: string;
  name: string;
  firstName?: string;
  lastName?: string;
  groups?: string;
}

interface Provider {
  id: string;
  orgId: string;
  name: string;
  type: 'oidc' | 'saml';
  status: SsoStatus;
  preset: string | null;
  issuer: string | null;
  clientId: string | null;
  hasClientSecret: boolean;
  authorizationUrl: string | null;
  tokenUrl: string | null;
  userInfoUrl: string | null;
  jwksUrl: string | null;
  scopes: string;
  attributeMapping: AttributeMapping;
  autoProvision: boolean;
  defaultRoleId: string | null;
  allowedDomains: string;
  enforceSSO: boolean;
  entityId: string | null;
  ssoUrl: string | null;
  certificate: string | null;
  groupRoleMappings: { group: string; roleId: string }[];
  createdAt: string;
  updatedAt: string;
}

interface Preset {
  id: string;
  type: 'oidc' | 'saml';
  name: string;
  scopes: string | null;
  groupRoleMappingsSupported: boolean;
}

interface TestReport {
  ok: boolean;
  type: 'oidc' | 'saml';
  message: string;
  discovered: { issuer: string; authorizationUrl: string | null; tokenUrl: string | null; userInfoUrl: string | null; jwksUrl: string | null } | null;
  certificate: { subject: string; issuer: string; validFrom: string; validTo: string; expired: boolean; daysLeft: number } | null;
}

const STATUS_TEXT: Record<SsoStatus, string> = {
  inactive: 'Inactive: not used for sign-in',
  testing: 'Testing: set up, not yet offered at sign-in',
  active: 'Active: offered at sign-in (one per organisation)',
};

const MFA_SUBJECT = 'Single sign-on settings';

export const SsoProviders = permissionPage(ProviderList, '/integrations/sso', { context: 'org', mfa: MFA_SUBJECT });

function ProviderList() {
  const { can } = useAuth();
  const t = useTenant();
  const [page, setPage] = useState(1);
  const [creating, setCreating] = useState(false);
  const list = useQuery({
    queryKey: ['sso-providers', t.orgId, page],
    queryFn: () => api<Page<Provider>>('GET', '/sso/providers', { query: { ...t.query, page, limit: 25 } }),
  });
  return (
    <>
      <PageHeader title="Single sign-on">{can('organizations', 'write') && !creating && <Button onClick={() => setCreating(true)}>New provider</Button>}</PageHeader>
      <p className="muted">Users of the organisation sign in through its identity provider. One provider can be active at a time; set one to testing while you check it.</p>
      {creating && <CreateProvider onCancel={() => setCreating(false)} />}
      <QueryState query={list}>
        {() => (
          <>
            <TableFrame label="Providers">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>Protocol</th>
                  <th>Preset</th>
                  <th>Status</th>
                  <th>Password sign-in</th>
                  <th>Changed</th>
                </tr>
              </thead>
              <tbody>
                {list.data?.data.length === 0 && (
                  <tr>
                    <td colSpan={6} className="muted">
                      No providers yet.
                    </td>
                  </tr>
                )}
                {list.data?.data.map((p) => (
                  <tr key={p.id}>
                    <td>
                      <Link href={`/integrations/sso/${p.id}`}>{p.name}</Link>
                    </td>
                    <td>{p.type.toUpperCase()}</td>
                    <td>{p.preset ?? '—'}</td>
                    <td>
                      <span className={`badge ${p.status === 'active' ? 'badge-ok' : 'badge-warn'}`}>{p.status}</span>
                    </td>
                    <td>{p.enforceSSO ? 'turned off (SSO enforced)' : 'allowed'}</td>
                    <td>{when(p.updatedAt)}</td>
                  </tr>
                ))}
              </tbody>
            </TableFrame>
            {list.data && <Pager pagination={list.data.pagination} onPage={setPage} />}
          </>
        )}
      </QueryState>
    </>
  );
}

function CreateProvider({ onCancel }: { onCancel: () => void }) {
  const t = useTenant();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const presets = useQuery({ queryKey: ['sso-presets'], queryFn: () => api<{ data: Preset[] }>('GET', '/sso/presets') });
  const [preset, setPreset] = useState('');
  const [customType, setCustomType] = useState<'oidc' | 'saml'>('oidc');
  const [name, setName] = useState('');
  const chosen = presets.data?.data.find((p) => p.id === preset);
  const s = useSubmit(async () => {
    const body: Record<string, unknown> = { name: name.trim(), type: chosen?.type ?? customType };
    if (chosen) body.preset = chosen.id;
    if (t.query.orgId) body.orgId = t.query.orgId;
    const p = await api<Provider>('POST', '/sso/providers', { body });
    await qc.invalidateQueries({ queryKey: ['sso-providers'] });
    navigate(`/integrations/sso/${p.id}`);
  });
  return (
    <Card title="New provider">
      <form onSubmit={s.submit} aria-label="New provider">
        <ErrorAlert error={s.error} />
        <MfaNote />
        <Select label="Preset" value={preset} onChange={(e) => setPreset(e.target.value)} error={s.fields.preset}>
          <option value="">None: set every field myself</option>
          {presets.data?.data.map((p) => (
            <option key={p.id} value={p.id}>
              {p.name} ({p.type.toUpperCase()})
            </option>
          ))}
        </Select>
        {!chosen && (
          <Select label="Protocol" value={customType} onChange={(e) => setCustomType(e.target.value as 'oidc' | 'saml')}>
            <option value="oidc">OpenID Connect</option>
            <option value="saml">SAML 2.0</option>
          </Select>
        )}
        {chosen && <p className="hint">Pre-fills the scopes{chosen.type === 'saml' ? ' and SAML attribute names' : ''} and the attribute mapping{chosen.groupRoleMappingsSupported ? '; its groups claim can decide roles' : ''}.</p>}
        <Field label="Name" required maxLength={255} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} hint="What users see on the sign-in button: Sign in with …" />
        <div className="row">
          <Button type="submit" busy={s.busy}>
            Create provider
          </Button>
          <Button type="button" kind="link" onClick={onCancel}>
            Cancel
          </Button>
        </div>
        <p className="hint">The provider starts inactive; fill in its settings on the next page, test it, then activate it.</p>
      </form>
    </Card>
  );
}

export const SsoProviderDetail = permissionPage(ProviderPage, '/integrations/sso', { mfa: MFA_SUBJECT });

function ProviderPage({ id }: { id: string }) {
  const { can } = useAuth();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const writable = can('organizations', 'write');
  const [report, setReport] = useState<TestReport | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [saved, setSaved] = useState(false);
  const provider = useQuery({ queryKey: ['sso-provider', id], queryFn: () => api<Provider>('GET', `/sso/providers/${id}`) });
  const act = async (what: string, fn: () => Promise<void>) => {
    setError(null);
    setSaved(false);
    setBusy(what);
    try {
      await fn();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
    }
  };
  const setStatus = (status: SsoStatus) =>
    act('status', async () => {
      await api('POST', `/sso/providers/${id}/status`, { body: { status } });
      await qc.invalidateQueries({ queryKey: ['sso-provider', id] });
      await qc.invalidateQueries({ queryKey: ['sso-providers'] });
    });
  const test = () =>
    act('test', async () => {
      setReport(await api<TestReport>('POST', `/sso/providers/${id}/test`));
    });
  const remove = () =>
    act('delete', async () => {
      if (!window.confirm('Delete this provider? Its users can no longer sign in through it.')) return;
      await api('DELETE', `/sso/providers/${id}`);
      await qc.invalidateQueries({ queryKey: ['sso-providers'] });
      navigate('/integrations/sso');
    });
  return (
    <QueryState query={provider}>
      {() => {
        const p = provider.data;
        if (!p) return null;
        return (
          <>
            <PageHeader title={`Provider ${p.name}`}>
              {writable && (
                <>
                  <Button kind="secondary" busy={busy === 'test'} onClick={() => void test()}>
                    {p.type === 'oidc' ? 'Test discovery' : 'Test certificate'}
                  </Button>
                  <Button kind="danger" busy={busy === 'delete'} onClick={() => void remove()}>
                    Delete
                  </Button>
                </>
              )}
            </PageHeader>
            <p>
              <Link href="/integrations/sso">All providers</Link>
            </p>
            <ErrorAlert error={error} />
            {report && <Report report={report} />}
            <Card title="Status">
              <p>
                <span className={`badge ${p.status === 'active' ? 'badge-ok' : 'badge-warn'}`}>{p.status}</span> {STATUS_TEXT[p.status]}
              </p>
              {writable && (
                <div className="row" role="group" aria-label="Set the status">
                  {(['inactive', 'testing', 'active'] as const)
                    .filter((s) => s !== p.status)
                    .map((s) => (
                      <Button key={s} kind={s === 'active' ? 'primary' : 'secondary'} busy={busy === 'status'} onClick={() => void setStatus(s)}>
                        {s === 'active' ? 'Activate' : s === 'testing' ? 'Set to testing' : 'Deactivate'}
                      </Button>
                    ))}
                </div>
              )}
              {p.type === 'saml' && (
                <p>
                  Service-provider metadata for the identity provider: <a href={`${API}/sso/saml/metadata/${p.id}`}>{`${window.location.origin}${API}/sso/saml/metadata/${p.id}`}</a>
                </p>
              )}
              {p.type === 'oidc' && (
                <p className="small">
                  Redirect URI to register at the identity provider: <code>{`${window.location.origin}${API}/sso/callback`}</code>
                </p>
              )}
            </Card>
            <ProviderForm key={p.updatedAt} provider={p} writable={writable} saved={saved} onSaved={() => setSaved(true)} />
          </>
        );
      }}
    </QueryState>
  );
}

function Report({ report }: { report: TestReport }) {
  return (
    <Alert kind={report.ok ? 'success' : 'error'}>
      <p>
        <strong>{report.ok ? 'Test passed.' : 'Test failed.'}</strong> {report.message}
      </p>
      {report.discovered && (
        <dl className="facts small">
          <dt>Issuer</dt>
          <dd>{report.discovered.issuer}</dd>
          <dt>Authorization</dt>
          <dd>{report.discovered.authorizationUrl ?? '—'}</dd>
          <dt>Token</dt>
          <dd>{report.discovered.tokenUrl ?? '—'}</dd>
          <dt>UserInfo</dt>
          <dd>{report.discovered.userInfoUrl ?? '—'}</dd>
          <dt>JWKS</dt>
          <dd>{report.discovered.jwksUrl ?? '—'}</dd>
        </dl>
      )}
      {report.certificate && (
        <dl className="facts small">
          <dt>Subject</dt>
          <dd>{report.certificate.subject}</dd>
          <dt>Issuer</dt>
          <dd>{report.certificate.issuer}</dd>
          <dt>Valid</dt>
          <dd>
            {when(report.certificate.validFrom)} to {when(report.certificate.validTo)}
          </dd>
          <dt>Days left</dt>
          <dd>{report.certificate.expired ? 'expired' : report.certificate.daysLeft}</dd>
        </dl>
      )}
    </Alert>
  );
}

const OIDC_URLS = [
  ['issuer', 'Issuer URL', 'Discovery fills the four endpoints below (endpoints you set win).'],
  ['authorizationUrl', 'Authorization endpoint', undefined],
  ['tokenUrl', 'Token endpoint', undefined],
  ['userInfoUrl', 'UserInfo endpoint', undefined],
  ['jwksUrl', 'JWKS endpoint', 'Needed to check ID-token signatures (discovered or set).'],
] as const;

type Draft = Record<string, string>;

/**
 * Said before sending: text that is neither a PEM certificate nor bare base64 (the two forms the
 * API takes). Whether it parses as X.509 is the API's to say (`details.fields.certificate`).
 */
function certificateProblem(text: string | undefined): string | null {
  const t = (text ?? '').trim();
  if (!t) return null;
  if (/^-----BEGIN CERTIFICATE-----[\s\S]+-----END CERTIFICATE-----$/.test(t)) return null;
  // A bare body: base64 only, and long enough to hold one (an X.509 certificate is hundreds of bytes).
  if (!t.includes('-----') && /^[A-Za-z0-9+/=\s]+$/.test(t) && t.replace(/\s+/g, '').length >= 100) return null;
  return 'is not a certificate: paste the PEM text (-----BEGIN CERTIFICATE----- …) or its base64 body';
}

function ProviderForm({ provider: p, writable, saved, onSaved }: { provider: Provider; writable: boolean; saved: boolean; onSaved: () => void }) {
  const qc = useQueryClient();
  const roles = useRoles('users');
  const orgRoles = (roles.data?.data ?? []).filter((r) => r.scope === 'organization' && (r.orgId === null || r.orgId === p.orgId));
  const [d, setD] = useState<Draft>(() => ({
    name: p.name,
    issuer: p.issuer ?? '',
    clientId: p.clientId ?? '',
    clientSecret: '',
    authorizationUrl: p.authorizationUrl ?? '',
    tokenUrl: p.tokenUrl ?? '',
    userInfoUrl: p.userInfoUrl ?? '',
    jwksUrl: p.jwksUrl ?? '',
    scopes: p.scopes,
    entityId: p.entityId ?? '',
    ssoUrl: p.ssoUrl ?? '',
    certificate: p.certificate ?? '',
    'map.email': p.attributeMapping.email,
    'map.name': p.attributeMapping.name,
    'map.firstName': p.attributeMapping.firstName ?? '',
    'map.lastName': p.attributeMapping.lastName ?? '',
    'map.groups': p.attributeMapping.groups ?? '',
    defaultRoleId: p.defaultRoleId ?? '',
    allowedDomains: p.allowedDomains,
  }));
  const [autoProvision, setAutoProvision] = useState(p.autoProvision);
  const [enforce, setEnforce] = useState(p.enforceSSO);
  const [mappings, setMappings] = useState(p.groupRoleMappings);
  const set = (k: string) => (e: { target: { value: string } }) => setD({ ...d, [k]: e.target.value });
  const orNull = (v: string | undefined) => (v && v.trim() ? v.trim() : null);
  const s = useSubmit(async () => {
    const attributeMapping: Record<string, string> = { email: d['map.email']?.trim() ?? '', name: d['map.name']?.trim() ?? '' };
    for (const k of ['firstName', 'lastName', 'groups']) if (d[`map.${k}`]?.trim()) attributeMapping[k] = d[`map.${k}`]?.trim() ?? '';
    const body: Record<string, unknown> = {
      name: d.name?.trim(),
      attributeMapping,
      autoProvision,
      defaultRoleId: orNull(d.defaultRoleId),
      allowedDomains: d.allowedDomains?.trim() ?? '',
      enforceSSO: enforce,
      groupRoleMappings: mappings.filter((m) => m.group.trim() && m.roleId),
    };
    // Only what changed: an endpoint left as it was stays the discovered one.
    const was: Record<string, string | null> = { ...p, attributeMapping: null, groupRoleMappings: null } as unknown as Record<string, string | null>;
    const fields = p.type === 'oidc' ? [...OIDC_URLS.map(([k]) => k), 'clientId'] : ['entityId', 'ssoUrl', 'certificate'];
    for (const k of fields) if (orNull(d[k]) !== (was[k] ?? null)) body[k] = orNull(d[k]);
    if (p.type === 'oidc') {
      if (d.clientSecret) body.clientSecret = d.clientSecret;
      if (d.scopes?.trim() !== p.scopes) body.scopes = d.scopes?.trim();
    }
    await api('PATCH', `/sso/providers/${p.id}`, { body });
    onSaved();
    await qc.invalidateQueries({ queryKey: ['sso-provider', p.id] });
    await qc.invalidateQueries({ queryKey: ['sso-providers'] });
  }, () => ({ certificate: p.type === 'saml' && certificateProblem(d.certificate) }));
  const f = s.fields;
  return (
    <Card title="Settings">
      <form onSubmit={s.submit} aria-label="Provider settings">
        <fieldset disabled={!writable}>
          <legend>{p.type === 'oidc' ? 'OpenID Connect' : 'SAML 2.0'}</legend>
          <Field label="Name" required maxLength={255} value={d.name} onChange={set('name')} error={f.name} />
          {p.type === 'oidc' ? (
            <>
              <Field label="Client id" maxLength={255} value={d.clientId} onChange={set('clientId')} error={f.clientId} />
              <Field
                label="Client secret"
                type="password"
                autoComplete="new-password"
                maxLength={2000}
                value={d.clientSecret}
                onChange={set('clientSecret')}
                error={f.clientSecret}
                hint={p.hasClientSecret ? 'A secret is stored (never shown). Type a new one to replace it.' : 'None stored yet.'}
              />
              {OIDC_URLS.map(([k, label, hint]) => (
                <Field key={k} label={label} type="url" maxLength={500} value={d[k]} onChange={set(k)} error={f[k]} hint={hint} />
              ))}
              <Field label="Scopes" required maxLength={500} value={d.scopes} onChange={set('scopes')} error={f.scopes} hint="Space-separated; openid is needed." />
            </>
          ) : (
            <>
              <Field label="IdP entity id" maxLength={500} value={d.entityId} onChange={set('entityId')} error={f.entityId} hint="When set, the assertion's issuer must equal it." />
              <Field label="IdP sign-in URL" type="url" maxLength={500} value={d.ssoUrl} onChange={set('ssoUrl')} error={f.ssoUrl} />
              <TextArea
                label="IdP signing certificate"
                rows={6}
                maxLength={20000}
                value={d.certificate}
                onChange={set('certificate')}
                error={f.certificate}
                placeholder="-----BEGIN CERTIFICATE-----"
                hint="From the identity provider's metadata or its signing-certificate download: PEM, or the base64 body alone."
              />
            </>
          )}
        </fieldset>
        <fieldset disabled={!writable}>
          <legend>Attribute mapping</legend>
          <p className="hint">The {p.type === 'oidc' ? 'claim' : 'attribute'} that fills each profile field.</p>
          <div className="filters">
            <Field label="Email from" required value={d['map.email']} onChange={set('map.email')} error={f['attributeMapping.email']} />
            <Field label="Name from" required value={d['map.name']} onChange={set('map.name')} error={f['attributeMapping.name']} />
            <Field label="First name from" value={d['map.firstName']} onChange={set('map.firstName')} error={f['attributeMapping.firstName']} />
            <Field label="Last name from" value={d['map.lastName']} onChange={set('map.lastName')} error={f['attributeMapping.lastName']} />
            <Field label="Groups from" value={d['map.groups']} onChange={set('map.groups')} error={f['attributeMapping.groups']} />
          </div>
        </fieldset>
        <fieldset disabled={!writable}>
          <legend>Users and roles</legend>
          <Checkbox label="Create accounts for new users at their first sign-in" checked={autoProvision} onChange={setAutoProvision} />
          <Select label="Role of new users" value={d.defaultRoleId} onChange={set('defaultRoleId')} error={f.defaultRoleId}>
            <option value="">— none —</option>
            {orgRoles.map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
          </Select>
          <Field label="Allowed email domains" value={d.allowedDomains} onChange={set('allowedDomains')} error={f.allowedDomains} hint="Comma-separated, e.g. example.com, example.org; empty allows any." />
          <Checkbox label="Enforce single sign-on (turn off password sign-in for the organisation's users)" checked={enforce} onChange={setEnforce} />
          <strong>Group-to-role mappings</strong>
          <p className="hint">At each sign-in the first mapping (in this order) whose group the user has decides the role.</p>
          {f.groupRoleMappings && <div className="field-error">{f.groupRoleMappings}</div>}
          {mappings.map((m, i) => (
            <div className="kv-row" key={i}>
              <Field label={`Group ${i + 1}`} value={m.group} maxLength={255} onChange={(e) => setMappings(mappings.map((x, j) => (j === i ? { ...x, group: e.target.value } : x)))} error={f[`groupRoleMappings.${i}.group`]} />
              <Select label={`Role for group ${i + 1}`} value={m.roleId} onChange={(e) => setMappings(mappings.map((x, j) => (j === i ? { ...x, roleId: e.target.value } : x)))} error={f[`groupRoleMappings.${i}.roleId`]}>
                <option value="">— pick a role —</option>
                {orgRoles.map((r) => (
                  <option key={r.id} value={r.id}>
                    {r.name}
                  </option>
                ))}
              </Select>
              <Button type="button" kind="link" onClick={() => setMappings(mappings.filter((_, j) => j !== i))} aria-label={`Remove mapping ${i + 1}`}>
                Remove
              </Button>
            </div>
          ))}
          <Button type="button" kind="secondary" onClick={() => setMappings([...mappings, { group: '', roleId: '' }])}>
            Add a mapping
          </Button>
        </fieldset>
        {writable && (
          <>
            <ErrorAlert error={s.error} />
            {saved && <Alert kind="success">Saved.</Alert>}
            <MfaNote />
            <Button type="submit" busy={s.busy}>
              Save settings
            </Button>
          </>
        )}
      </form>
    </Card>
  );
}
