// Single sign-on providers of the organisation in context: list, create from a preset, edit (OIDC
// or SAML fields, attribute mapping, group-to-role mappings), status, the discovery or certificate
// test with its report, and the SAML metadata link. Writes need a session with a second factor.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useLocation } from 'wouter';
import { API, dataOf, client, api } from '../../api';
import { useAuth } from '../../auth';
import { useTenant } from '../../tenant';
import { Alert, Button, Card, ErrorAlert, Field, MfaNote, PageHeader, QueryState, Select, useSubmit, when, PagedTable } from '../../ui';
import { permissionPage } from '../../permission';
import { ProviderForm } from './SsoForm';
import { VerifiedDomains, orgDomains } from './Domains';
import { PartnerSsoProviders, partnerLoginLink } from './PartnerSso';
import { keys } from '../../api/keys';
import type { Schema } from '../../api/types';

type SsoStatus = Schema<'SsoProvider'>['status'];

export type Provider = Schema<'SsoProvider'>;

/** A provider in a list (the organisation's, with its preset; the partner's): name linking to its page, protocol, status, password sign-in, last change. */
export function ProviderRow({ provider: p, preset = false }: { provider: Provider; preset?: boolean }) {
  return (
    <tr>
      <td>
        <Link href={`/integrations/sso/${p.id}`}>{p.name}</Link>
      </td>
      <td>{p.type.toUpperCase()}</td>
      {preset && <td>{p.preset ?? '—'}</td>}
      <td>
        <span className={`badge ${p.status === 'active' ? 'badge-ok' : 'badge-warn'}`}>{p.status}</span>
      </td>
      <td>{p.enforceSSO ? 'turned off (SSO enforced)' : 'allowed'}</td>
      <td>{when(p.updatedAt)}</td>
    </tr>
  );
}

type TestReport = Schema<'SsoProviderTest'>;

const STATUS_TEXT: Record<SsoStatus, string> = {
  inactive: 'not used for sign-in',
  testing: 'while no provider is active, the sign-in link starts a trial that only the organisation’s single sign-on administrators can complete (each attempt is in the audit log)',
  active: 'offered at sign-in (one per organisation)',
};

const PARTNER_STATUS_TEXT: Record<SsoStatus, string> = {
  inactive: 'not used for sign-in',
  testing: 'while no provider is active, the partner’s sign-in page starts a trial that only the partner’s single sign-on administrators can complete (each attempt is in the audit log)',
  active: 'offered at the partner’s sign-in page (one per partner)',
};

/** The organisation's SSO sign-in link (`GET /api/v1/sso/login/<orgId>`) as people open it. */
export const ssoLoginLink = (orgId: string) => `${window.location.origin}${API}/sso/login/${orgId}`;

/** A value with a Copy button that says whether the copy worked. */
export function CopyValue({ label, value }: { label: string; value: string }) {
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null);
  return (
    <div className="row">
      <code>{value}</code>
      <Button kind="secondary" aria-label={`${copied === 'yes' ? 'Copied' : 'Copy'} ${label}`} onClick={() => void navigator.clipboard.writeText(value).then(() => setCopied('yes'), () => setCopied('no'))}>
        {copied === 'yes' ? 'Copied' : 'Copy'}
      </Button>
      {copied === 'no' && <span className="small">Copying was refused by the browser: select the text instead.</span>}
    </div>
  );
}

/** Where the organisation's people sign in (docs/decisions.md "SSO that explains itself"): the link and the organisation's id. */
function SignInLink({ orgId }: { orgId: string }) {
  return (
    <Card title="Sign-in link">
      <p>Give this link to the organisation’s people, or open it yourself to try a provider in testing. It starts single sign-on with the active provider (else the one in testing).</p>
      <dl className="facts">
        <dt>Single sign-on link</dt>
        <dd>
          <CopyValue label="sign-in link" value={ssoLoginLink(orgId)} />
        </dd>
        <dt>Organisation id</dt>
        <dd>
          <CopyValue label="organisation id" value={orgId} />
        </dd>
      </dl>
    </Card>
  );
}

const MFA_SUBJECT = 'Single sign-on settings';

export const SsoProviders = permissionPage(ProviderList, '/integrations/sso', { context: 'org', mfa: MFA_SUBJECT });

function ProviderList() {
  const { can } = useAuth();
  const t = useTenant();
  const [page, setPage] = useState(1);
  const [creating, setCreating] = useState(false);
  const list = useQuery({
    queryKey: keys.ssoProviders.list(t.orgId, page),
    queryFn: async () => dataOf(await client.GET('/api/v1/sso/providers', { params: { query: { ...t.query, page, limit: 25 } } })),
  });
  return (
    <>
      <PageHeader title="Single sign-on">{can('organizations', 'write') && !creating && <Button onClick={() => setCreating(true)}>New provider</Button>}</PageHeader>
      <p className="muted">Users of the organisation sign in through its identity provider. One provider can be active at a time; set one to testing while you check it.</p>
      {creating && <CreateProvider onCancel={() => setCreating(false)} />}
      {t.orgId && <SignInLink orgId={t.orgId} />}
      <PagedTable
        query={list}
        label="Providers"
        columns={6}
        head={
          <tr>
            <th>Name</th>
            <th>Protocol</th>
            <th>Preset</th>
            <th>Status</th>
            <th>Password sign-in</th>
            <th>Changed</th>
          </tr>
        }
        empty={<>No providers yet.</>}
        row={(p) => <ProviderRow key={p.id} provider={p} preset />}
        onPage={setPage}
      />
      <VerifiedDomains scope={orgDomains(t.orgId)} />
      <PartnerSsoProviders />
    </>
  );
}

function CreateProvider({ onCancel }: { onCancel: () => void }) {
  const t = useTenant();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const presets = useQuery({ queryKey: keys.ssoPresets.all, queryFn: async () => dataOf(await client.GET('/api/v1/sso/presets')) });
  const [preset, setPreset] = useState('');
  const [customType, setCustomType] = useState<'oidc' | 'saml'>('oidc');
  const [name, setName] = useState('');
  const chosen = presets.data?.data.find((p) => p.id === preset);
  const s = useSubmit(async () => {
    const body: Record<string, unknown> = { name: name.trim(), type: chosen?.type ?? customType };
    if (chosen) body.preset = chosen.id;
    if (t.query.orgId) body.orgId = t.query.orgId;
    const p = await api<Provider>('POST', '/sso/providers', { body });
    await qc.invalidateQueries({ queryKey: keys.ssoProviders.all });
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
              {p.name}
            </option>
          ))}
        </Select>
        {!chosen && (
          <Select label="Protocol" value={customType} onChange={(e) => setCustomType(e.target.value as 'oidc' | 'saml')}>
            <option value="oidc">OpenID Connect</option>
            <option value="saml">SAML 2.0</option>
          </Select>
        )}
        {chosen && (
          <p className="hint">
            Pre-fills the scopes{chosen.type === 'saml' ? ' and SAML attribute names' : ''} and the attribute mapping
            {chosen.groupRoleMappingsSupported ? '; its groups claim can decide roles' : '; this identity provider sends no groups claim, so name one under “Groups from” before mapping groups to roles'}.
          </p>
        )}
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
  const provider = useQuery({ queryKey: keys.ssoProviders.detail(id), queryFn: async () => dataOf(await client.GET('/api/v1/sso/providers/{id}', { params: { path: { id } } })) });
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
      await qc.invalidateQueries({ queryKey: keys.ssoProviders.detail(id) });
      await qc.invalidateQueries({ queryKey: keys.ssoProviders.all });
    });
  const test = () =>
    act('test', async () => {
      setReport(await api<TestReport>('POST', `/sso/providers/${id}/test`));
    });
  const remove = () =>
    act('delete', async () => {
      if (!window.confirm('Delete this provider? Its users can no longer sign in through it.')) return;
      await api('DELETE', `/sso/providers/${id}`);
      // Leave first: the deleted one's page must not refetch itself into a 404.
      navigate('/integrations/sso');
      await qc.invalidateQueries({ queryKey: keys.ssoProviders.all });
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
                    {p.type === 'oidc' ? 'Test discovery and credentials' : 'Test certificate'}
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
                <span className={`badge ${p.status === 'active' ? 'badge-ok' : 'badge-warn'}`}>{p.status}</span>: {(p.partnerId ? PARTNER_STATUS_TEXT : STATUS_TEXT)[p.status]}
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
              {p.status === 'testing' && p.partnerId && <PartnerTrialLink partnerId={p.partnerId} />}
              {p.status === 'testing' && !p.partnerId && (
                <p>
                  Try it: open <a href={ssoLoginLink(p.orgId ?? '')}>{ssoLoginLink(p.orgId ?? '')}</a> and sign in at the identity provider as yourself. Only people who may manage this organisation’s single sign-on get through; nobody is created and no role changes.
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

/** A partner provider in testing is tried from the partner's sign-in page. */
function PartnerTrialLink({ partnerId }: { partnerId: string }) {
  const partner = useQuery({ queryKey: keys.partners.detail(partnerId), queryFn: async () => dataOf(await client.GET('/api/v1/partners/{id}', { params: { path: { id: partnerId } } })) });
  if (!partner.data) return null;
  const link = partnerLoginLink(partner.data.slug);
  return (
    <p>
      Try it: open <a href={link}>{link}</a> and sign in at the identity provider as yourself. Only people who may manage the partner’s single sign-on get through; nobody is created and no role changes.
    </p>
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
      {report.credentials && (
        <p>
          Client id and secret:{' '}
          <strong>{report.credentials.result === 'accepted' ? 'accepted' : report.credentials.result === 'rejected' ? 'refused' : 'not confirmed'}</strong>.
        </p>
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
