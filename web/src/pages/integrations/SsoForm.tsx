// A single sign-on provider's settings form: OIDC client and endpoints or SAML entity id, sign-in
// URL and signing certificate (checked for shape before sending; whether it parses is the API's to
// say, shown beside the field), attribute mapping, provisioning and group-to-role mappings. Sends
// only what changed (docs/decisions.md "Web console": a discovered endpoint sent back would become a hand-set one).
import { useState } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { api } from '../../api';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, MfaNote, Select, TextArea, useSubmit } from '../../ui';
import { useRoles } from '../admin/common';
import type { Provider } from './Sso';
import { keys } from '../../api/keys';
import { GroupRoleMappings } from './GroupRoleMappings';
import { usePartnerScope } from './PartnerSso';

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

export function ProviderForm({ provider: p, writable, saved, onSaved }: { provider: Provider; writable: boolean; saved: boolean; onSaved: () => void }) {
  const qc = useQueryClient();
  const roles = useRoles('users');
  // A partner's provider grants the partner's roles and organisations (docs/decisions.md "Partner-level SSO").
  const partner = usePartnerScope(p.partnerId);
  const orgRoles = p.partnerId ? partner.roles : (roles.data?.data ?? []).filter((r) => r.scope === 'organization' && (r.orgId === null || r.orgId === p.orgId));
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
  const [orgAccess, setOrgAccess] = useState(p.orgAccess);
  const [orgIds, setOrgIds] = useState(p.orgIds);
  const [breakGlass, setBreakGlass] = useState(p.breakGlassUserIds);
  const toggle = (list: string[], id: string, on: boolean) => (on ? [...list, id] : list.filter((x) => x !== id));
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
      groupRoleMappings: mappings.filter((m) => m.group.trim() && m.roleId).map(({ orgIds: named, ...m }) => (p.partnerId && named?.length ? { ...m, orgIds: named } : m)),
    };
    if (p.partnerId) {
      body.orgAccess = orgAccess;
      body.orgIds = orgAccess === 'selected' ? orgIds : [];
      body.breakGlassUserIds = breakGlass;
    }
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
    await qc.invalidateQueries({ queryKey: keys.ssoProviders.detail(p.id) });
    await qc.invalidateQueries({ queryKey: keys.ssoProviders.all });
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
          <Select label={p.partnerId ? 'Partner role of new technicians' : 'Role of new users'} value={d.defaultRoleId} onChange={set('defaultRoleId')} error={f.defaultRoleId}>
            <option value="">— none —</option>
            {orgRoles.map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
          </Select>
          <Field label="Allowed email domains" value={d.allowedDomains} onChange={set('allowedDomains')} error={f.allowedDomains} hint="Comma-separated, e.g. example.com, example.org; empty allows any." />
          {p.partnerId && (
            <>
              <Select label="Organisations new technicians reach" value={orgAccess} onChange={(e) => setOrgAccess(e.target.value as typeof orgAccess)} error={f.orgAccess}>
                <option value="all">All organisations of the partner</option>
                <option value="selected">Only the organisations ticked below</option>
                {orgAccess === 'none' && <option value="none">None (the partner’s own records only)</option>}
              </Select>
              {orgAccess === 'selected' && (
                <fieldset>
                  <legend>Organisations new technicians reach</legend>
                  {partner.orgs.map((o) => (
                    <Checkbox key={o.id} label={o.name} checked={orgIds.includes(o.id)} onChange={(on) => setOrgIds(toggle(orgIds, o.id, on))} />
                  ))}
                  {f.orgIds && <div className="field-error">{f.orgIds}</div>}
                </fieldset>
              )}
            </>
          )}
          <Checkbox
            label={p.partnerId ? "Enforce single sign-on (turn off password sign-in for the partner's technicians)" : "Enforce single sign-on (turn off password sign-in for the organisation's users)"}
            checked={enforce}
            onChange={setEnforce}
          />
          {p.partnerId && (
            <fieldset>
              <legend>Break-glass members (may still sign in with a password, audited; at most 10)</legend>
              {partner.members.map((u) => (
                <Checkbox key={u.id} label={u.name} checked={breakGlass.includes(u.id)} onChange={(on) => setBreakGlass(toggle(breakGlass, u.id, on))} />
              ))}
              {f.breakGlassUserIds && <div className="field-error">{f.breakGlassUserIds}</div>}
            </fieldset>
          )}
          <strong>Group-to-role mappings</strong>
          <p className="hint">
            At each sign-in, of the mappings whose group the user has, the role with the most permissions decides (roles that may change something before read-only ones; on a tie, the earlier mapping). The groups are read from the {p.type === 'oidc' ? 'claim' : 'attribute'} named in “Groups from” above{d['map.groups']?.trim() ? '' : ', which is empty: name it before adding mappings'}.
          </p>
          {f.groupRoleMappings && <div className="field-error">{f.groupRoleMappings}</div>}
          <GroupRoleMappings mappings={mappings} onChange={setMappings} roles={orgRoles} errors={f} {...(p.partnerId ? { orgs: partner.orgs } : {})} />
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
