// The signed-in user's own account: profile, password, second factors (authenticator app with its
// QR code, text messages, passkeys), recovery codes and sessions.
import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { useSearch } from 'wouter';
import { startAuthentication, startRegistration, type PublicKeyCredentialCreationOptionsJSON, type PublicKeyCredentialRequestOptionsJSON } from '@simplewebauthn/browser';
import { api, dataOf, client, passkeyError, saveBlob, type SelfProfile } from '../api';
import { useAuth } from '../auth';
import { Alert, Button, Card, Checkbox, ErrorAlert, Field, PageHeader, QueryState, TableFrame, useSubmit, when } from '../ui';
import { keys } from '../api/keys';
import type { Schema } from '../api/types';

export function Profile() {
  const { me, reloadMe } = useAuth();
  const [name, setName] = useState(me?.name ?? '');
  const [saved, setSaved] = useState(false);
  const s = useSubmit(async () => {
    await api<SelfProfile>('PATCH', '/users/me', { body: { name: name.trim() } });
    await reloadMe();
    setSaved(true);
  });
  if (!me) return null;
  return (
    <>
      <PageHeader title="Profile" />
      <Card title="You">
        <dl className="facts">
          <dt>Email</dt>
          <dd>{me.email}</dd>
          <dt>Access</dt>
          <dd>{me.isPlatformAdmin ? 'Platform administrator' : (me.scope ?? 'no partner or organisation yet')}</dd>
          <dt>Second factor</dt>
          <dd>{me.mfaEnabled ? (me.mfaMethod ?? 'on') : me.passkeyCount > 0 ? 'passkey' : 'none'}</dd>
          <dt>Last sign-in</dt>
          <dd>{when(me.lastLoginAt)}</dd>
        </dl>
        <form onSubmit={s.submit} className="inline-form">
          <ErrorAlert error={s.error} />
          {saved && <Alert kind="success">Saved.</Alert>}
          <Field label="Name" required maxLength={200} value={name} onChange={(e) => { setName(e.target.value); setSaved(false); }} error={s.fields.name} />
          <Button type="submit" busy={s.busy}>
            Save
          </Button>
        </form>
      </Card>
      <ChangePassword />
    </>
  );
}

function ChangePassword() {
  const { signOut } = useAuth();
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const s = useSubmit(async () => {
    await api('POST', '/auth/change-password', { body: { currentPassword: current, newPassword: next } });
    // Every session ends with a password change: sign in again with the new one.
    await signOut();
  });
  return (
    <Card title="Change password">
      <p className="muted">Changing the password signs out every session, this one too.</p>
      <form onSubmit={s.submit}>
        <ErrorAlert error={s.error} shown={['currentPassword', 'newPassword']} />
        <Field label="Current password" type="password" autoComplete="current-password" required value={current} onChange={(e) => setCurrent(e.target.value)} error={s.fields.currentPassword} />
        <Field label="New password" type="password" autoComplete="new-password" required minLength={8} maxLength={128} value={next} onChange={(e) => setNext(e.target.value)} error={s.fields.newPassword} />
        <Button type="submit" busy={s.busy}>
          Change password
        </Button>
      </form>
    </Card>
  );
}

/** Recovery codes shown once, with copy and download. */
function RecoveryCodes({ codes }: { codes: string[] }) {
  const [copied, setCopied] = useState(false);
  return (
    <Alert kind="warning">
      <p>
        <strong>Save these recovery codes now.</strong> Each signs you in once if you lose your second factor; they are not shown again.
      </p>
      <ul className="codes" aria-label="Recovery codes">
        {codes.map((c) => (
          <li key={c}>
            <code>{c}</code>
          </li>
        ))}
      </ul>
      <div className="row">
        <Button
          kind="secondary"
          type="button"
          onClick={() =>
            void navigator.clipboard.writeText(codes.join('\n')).then(
              () => setCopied(true),
              () => setCopied(false),
            )
          }
        >
          {copied ? 'Copied' : 'Copy'}
        </Button>
        <Button kind="secondary" type="button" onClick={() => saveBlob(new Blob([`${codes.join('\n')}\n`], { type: 'text/plain' }), 'keel-recovery-codes.txt')}>
          Download
        </Button>
      </div>
    </Alert>
  );
}

type TotpSetup = Schema<'MfaSetup'>;

type MfaEnabled = Schema<'MfaEnabled'>;

export function Security() {
  const { me } = useAuth();
  const enrol = new URLSearchParams(useSearch()).get('enrol') === '1';
  const [codes, setCodes] = useState<string[] | null>(null);
  if (!me) return null;
  const hasFactor = me.mfaEnabled || me.passkeyCount > 0;
  return (
    <>
      <PageHeader title="Sign-in and security" />
      {enrol && !hasFactor && (
        <Alert kind="warning">Your role requires a second factor before you can continue. Set up an authenticator app below (or a phone, or a passkey where your organisation allows it).</Alert>
      )}
      {codes && <RecoveryCodes codes={codes} />}
      <TotpCard onCodes={setCodes} />
      <SmsCard onCodes={setCodes} />
      <PasskeysCard onCodes={setCodes} />
      {me.mfaEnabled && (me.mfaMethod === 'totp' || me.mfaMethod === 'sms') && <ManageMfa onCodes={setCodes} />}
    </>
  );
}

function TotpCard({ onCodes }: { onCodes: (c: string[]) => void }) {
  const { me, signIn } = useAuth();
  const [setup, setSetup] = useState<TotpSetup | null>(null);
  const [code, setCode] = useState('');
  const start = useSubmit(async () => setSetup(await api<TotpSetup>('POST', '/auth/mfa/setup')));
  const confirm = useSubmit(async () => {
    const r = await api<MfaEnabled>('POST', '/auth/mfa/enable', { body: { code: code.trim() } });
    signIn(r);
    onCodes(r.recoveryCodes);
    setSetup(null);
    setCode('');
  });
  const on = me?.mfaEnabled && me.mfaMethod === 'totp';
  return (
    <Card title="Authenticator app">
      {on ? (
        <p>
          <span className="badge badge-ok">On</span> Sign-ins ask for a code from your authenticator app.
        </p>
      ) : setup ? (
        <div className="totp-setup">
          <ErrorAlert error={confirm.error} />
          <ol>
            <li>Scan this QR code with your authenticator app (or enter the key by hand).</li>
            <li>Enter the 6-digit code it shows.</li>
          </ol>
          <img src={setup.qrCodeDataUrl} alt="QR code for your authenticator app" width={200} height={200} className="qr" />
          <p className="small">
            Key: <code className="secret">{setup.secret}</code>
          </p>
          <form onSubmit={confirm.submit} className="inline-form">
            <Field label="Code from the app" inputMode="numeric" autoComplete="one-time-code" required pattern="[0-9]{6}" value={code} onChange={(e) => setCode(e.target.value)} error={confirm.fields.code} />
            <Button type="submit" busy={confirm.busy}>
              Turn on
            </Button>
          </form>
        </div>
      ) : (
        <>
          <ErrorAlert error={start.error} />
          <p>Use an app such as 1Password, Authy or Google Authenticator for a 6-digit code at each sign-in.</p>
          <Button type="button" busy={start.busy} onClick={() => start.submit()}>
            Set up an authenticator app
          </Button>
        </>
      )}
    </Card>
  );
}

function SmsCard({ onCodes }: { onCodes: (c: string[]) => void }) {
  const { me, reloadMe, signIn } = useAuth();
  const [phone, setPhone] = useState('');
  const [sentTo, setSentTo] = useState<string | null>(null);
  const [code, setCode] = useState('');
  const send = useSubmit(async () => {
    const r = await api<{ phoneNumberMasked: string | null }>('POST', '/auth/phone/verify', { body: { phoneNumber: phone.trim() } });
    setSentTo(r.phoneNumberMasked ?? phone);
  });
  const confirm = useSubmit(async () => {
    await api('POST', '/auth/phone/confirm', { body: { code: code.trim() } });
    setSentTo(null);
    setCode('');
    await reloadMe();
  });
  const enable = useSubmit(async () => {
    const r = await api<MfaEnabled>('POST', '/auth/mfa/sms/enable', { body: {} });
    signIn(r);
    onCodes(r.recoveryCodes);
  });
  if (!me) return null;
  return (
    <Card title="Text messages (SMS)">
      {me.phoneVerified && <p>Verified phone: {me.phoneNumberMasked}</p>}
      {me.phoneVerified && !(me.mfaEnabled && me.mfaMethod === 'sms') && (
        <>
          <ErrorAlert error={enable.error} />
          <Button type="button" busy={enable.busy} onClick={() => enable.submit()}>
            Use text messages as my second factor
          </Button>
        </>
      )}
      {me.mfaEnabled && me.mfaMethod === 'sms' && (
        <p>
          <span className="badge badge-ok">On</span> Sign-ins text a code to this phone.
        </p>
      )}
      {sentTo ? (
        <form onSubmit={confirm.submit} className="inline-form">
          <ErrorAlert error={confirm.error} />
          <p>A code was sent to {sentTo}.</p>
          <Field label="Code from the text message" inputMode="numeric" autoComplete="one-time-code" required pattern="[0-9]{6}" value={code} onChange={(e) => setCode(e.target.value)} error={confirm.fields.code} />
          <Button type="submit" busy={confirm.busy}>
            Verify phone
          </Button>
        </form>
      ) : (
        <form onSubmit={send.submit} className="inline-form">
          <ErrorAlert error={send.error} />
          <Field label={me.phoneVerified ? 'Change phone number' : 'Phone number'} type="tel" autoComplete="tel" placeholder="+44 7700 900123" required value={phone} onChange={(e) => setPhone(e.target.value)} error={send.fields.phoneNumber} hint="With the country code (E.164)." />
          <Button type="submit" kind="secondary" busy={send.busy}>
            Send a code
          </Button>
        </form>
      )}
    </Card>
  );
}

type Passkey = Schema<'Passkey'>;

/**
 * What proves it is still you, for an account without a password: one of your passkeys, asked by
 * POST /auth/passkeys/reauth/options (docs/decisions.md "Passwordless accounts"), sent as `reauth`.
 */
async function passkeyReauth(): Promise<{ challengeId: string; response: unknown }> {
  const { options, challengeId } = await api<{ options: PublicKeyCredentialRequestOptionsJSON; challengeId: string }>('POST', '/auth/passkeys/reauth/options');
  try {
    return { challengeId, response: await startAuthentication({ optionsJSON: options }) };
  } catch (err) {
    throw passkeyError(err);
  }
}

/** `currentPassword` for an account with a password, else a passkey re-authentication. */
async function reentry(hasPassword: boolean, password: string): Promise<{ currentPassword: string } | { reauth: { challengeId: string; response: unknown } }> {
  return hasPassword ? { currentPassword: password } : { reauth: await passkeyReauth() };
}

function PasskeysCard({ onCodes }: { onCodes: (c: string[]) => void }) {
  const { me, reloadMe } = useAuth();
  const hasPassword = me?.hasPassword ?? true;
  const qc = useQueryClient();
  const list = useQuery({ queryKey: keys.passkeys.all, queryFn: async () => dataOf(await client.GET('/api/v1/auth/passkeys')) });
  const [adding, setAdding] = useState(false);
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const [signIn, setSignIn] = useState(false);
  const [removing, setRemoving] = useState<Passkey | null>(null);
  const [renaming, setRenaming] = useState<{ id: string; name: string } | null>(null);
  const refreshAll = async () => {
    await qc.invalidateQueries({ queryKey: keys.passkeys.all });
    await reloadMe();
  };
  const add = useSubmit(async () => {
    const optionsJSON = await api<PublicKeyCredentialCreationOptionsJSON>('POST', '/auth/passkeys/register/options', { body: { ...(await reentry(hasPassword, password)), name: name.trim(), signIn } });
    let credential;
    try {
      credential = await startRegistration({ optionsJSON });
    } catch (err) {
      throw passkeyError(err);
    }
    const r = await api<Passkey & { recoveryCodes?: string[] }>('POST', '/auth/passkeys/register/verify', { body: { credential } });
    if (r.recoveryCodes?.length) onCodes(r.recoveryCodes);
    setAdding(false);
    setName('');
    setPassword('');
    await refreshAll();
  });
  const remove = useSubmit(async () => {
    if (!removing) return;
    await api('DELETE', `/auth/passkeys/${removing.id}`, { body: await reentry(hasPassword, password) });
    setRemoving(null);
    setPassword('');
    await refreshAll();
  });
  const rename = useSubmit(async () => {
    if (!renaming) return;
    await api('PATCH', `/auth/passkeys/${renaming.id}`, { body: { name: renaming.name.trim() } });
    setRenaming(null);
    await refreshAll();
  });
  return (
    <Card title="Passkeys" actions={!adding && <Button kind="secondary" onClick={() => setAdding(true)}>Add a passkey</Button>}>
      <p className="muted">A passkey signs you in with this device’s screen lock or a security key, and counts as a second factor.</p>
      <QueryState query={list}>
        {() =>
          list.data && list.data.data.length > 0 ? (
            <ul className="list">
              {list.data.data.map((p) => (
                <li key={p.id}>
                  {renaming?.id === p.id ? (
                    <form onSubmit={rename.submit} className="inline-form">
                      <ErrorAlert error={rename.error} />
                      <Field label="Passkey name" required maxLength={100} value={renaming.name} onChange={(e) => setRenaming({ id: p.id, name: e.target.value })} error={rename.fields.name} />
                      <Button type="submit" busy={rename.busy}>Save</Button>
                      <Button type="button" kind="link" onClick={() => setRenaming(null)}>Cancel</Button>
                    </form>
                  ) : (
                    <>
                      <div>
                        <strong>{p.name}</strong>
                        {p.signIn && <span className="badge">Signs in</span>}
                        <div className="small muted">
                          Added {when(p.createdAt)} · last used {when(p.lastUsedAt)}
                        </div>
                      </div>
                      <div className="row">
                        <Button kind="link" onClick={() => setRenaming({ id: p.id, name: p.name })} aria-label={`Rename ${p.name}`}>Rename</Button>
                        <Button kind="link" onClick={() => { setRemoving(p); setPassword(''); }} aria-label={`Remove ${p.name}`}>Remove</Button>
                      </div>
                    </>
                  )}
                </li>
              ))}
            </ul>
          ) : (
            <p>No passkeys yet.</p>
          )
        }
      </QueryState>
      {removing && (
        <form onSubmit={remove.submit} className="inline-form">
          <ErrorAlert error={remove.error} />
          <p>Remove “{removing.name}”? {hasPassword ? 'Enter your password to confirm.' : 'Confirm with one of your passkeys (your account has no password).'}</p>
          {hasPassword && <Field label="Current password" type="password" autoComplete="current-password" required value={password} onChange={(e) => setPassword(e.target.value)} error={remove.fields.currentPassword} />}
          <Button type="submit" kind="danger" busy={remove.busy}>Remove passkey</Button>
          <Button type="button" kind="link" onClick={() => setRemoving(null)}>Cancel</Button>
        </form>
      )}
      <RemovePassword signInKeys={list.data?.data.filter((p) => p.signIn).length ?? 0} onDone={refreshAll} />
      {adding && (
        <form onSubmit={add.submit} className="inline-form" aria-label="Add a passkey">
          <ErrorAlert error={add.error} />
          <Field label="Name for this passkey" required maxLength={100} placeholder="Work laptop" value={name} onChange={(e) => setName(e.target.value)} error={add.fields.name} />
          {hasPassword ? (
            <Field label="Current password" type="password" autoComplete="current-password" required value={password} onChange={(e) => setPassword(e.target.value)} error={add.fields.currentPassword} />
          ) : (
            <p className="small">Your account has no password: you confirm with one of your passkeys first, then create the new one.</p>
          )}
          <Checkbox label="Sign in with it alone, without a password" checked={signIn} onChange={setSignIn} />
          <Button type="submit" busy={add.busy}>Create passkey</Button>
          <Button type="button" kind="link" onClick={() => setAdding(false)}>Cancel</Button>
        </form>
      )}
    </Card>
  );
}

/** Removing the password (DELETE /auth/password), offered once two sign-in passkeys exist. */
function RemovePassword({ signInKeys, onDone }: { signInKeys: number; onDone: () => Promise<void> }) {
  const { me } = useAuth();
  const [open, setOpen] = useState(false);
  const [password, setPassword] = useState('');
  const remove = useSubmit(async () => {
    await api('DELETE', '/auth/password', { body: { currentPassword: password } });
    setOpen(false);
    setPassword('');
    await onDone();
  });
  if (!me) return null;
  if (!me.hasPassword) return <p className="small">You sign in with your passkeys only: this account has no password. A reset link from the sign-in page sets one again.</p>;
  if (signInKeys < 2) return <p className="small muted">With two sign-in passkeys you may remove your password.</p>;
  return open ? (
    <form onSubmit={remove.submit} className="inline-form" aria-label="Remove your password">
      <ErrorAlert error={remove.error} />
      <p>After this, only your sign-in passkeys sign you in (a reset link sets a password again).</p>
      <Field label="Current password" type="password" autoComplete="current-password" required value={password} onChange={(e) => setPassword(e.target.value)} error={remove.fields.currentPassword} />
      <Button type="submit" kind="danger" busy={remove.busy}>Remove password</Button>
      <Button type="button" kind="link" onClick={() => setOpen(false)}>Cancel</Button>
    </form>
  ) : (
    <p>
      <Button kind="secondary" onClick={() => setOpen(true)}>Remove your password</Button>
    </p>
  );
}

function ManageMfa({ onCodes }: { onCodes: (c: string[]) => void }) {
  const { me, reloadMe } = useAuth();
  const [code, setCode] = useState('');
  const [sent, setSent] = useState(false);
  const regen = useSubmit(async () => {
    const r = await api<{ recoveryCodes: string[] }>('POST', '/auth/mfa/recovery-codes', { body: { code: code.trim() } });
    onCodes(r.recoveryCodes);
    setCode('');
  });
  const disable = useSubmit(async () => {
    await api('POST', '/auth/mfa/disable', { body: { code: code.trim() } });
    setCode('');
    await reloadMe();
  });
  const sms = useSubmit(async () => {
    await api('POST', '/auth/mfa/sms/send', { body: {} });
    setSent(true);
  });
  return (
    <Card title="Recovery codes and turning MFA off">
      <p className="muted">Both need a current code from your {me?.mfaMethod === 'sms' ? 'phone' : 'authenticator app'}.</p>
      <ErrorAlert error={regen.error ?? disable.error ?? sms.error} />
      {me?.mfaMethod === 'sms' && (
        <Button kind="secondary" type="button" busy={sms.busy} onClick={() => sms.submit()}>
          {sent ? 'Text another code' : 'Text me a code'}
        </Button>
      )}
      <form onSubmit={regen.submit} className="inline-form">
        <Field label="Current code" inputMode="numeric" autoComplete="one-time-code" required pattern="[0-9]{6}" value={code} onChange={(e) => setCode(e.target.value)} error={regen.fields.code ?? disable.fields.code} />
        <div className="row">
          <Button type="submit" busy={regen.busy}>New recovery codes</Button>
          <Button type="button" kind="danger" busy={disable.busy} onClick={() => disable.submit()} disabled={!/^[0-9]{6}$/.test(code.trim())}>
            Turn off authenticator and SMS
          </Button>
        </div>
      </form>
    </Card>
  );
}

type Session = Schema<'Session'>;

export function Sessions() {
  const { signOut } = useAuth();
  const qc = useQueryClient();
  const list = useQuery({ queryKey: keys.sessions.all, queryFn: async () => dataOf(await client.GET('/api/v1/auth/sessions')) });
  const [error, setError] = useState<unknown>(null);
  const end = async (s: Session) => {
    setError(null);
    try {
      await api('DELETE', `/auth/sessions/${s.id}`);
      if (s.current) await signOut();
      else await qc.invalidateQueries({ queryKey: keys.sessions.all });
    } catch (err) {
      setError(err);
    }
  };
  return (
    <>
      <PageHeader title="Active sessions" />
      <ErrorAlert error={error} />
      <QueryState query={list}>
        {() => (
          <TableFrame label="Active sessions">
            <thead>
              <tr>
                <th>Device</th>
                <th>Address</th>
                <th>Second factor</th>
                <th>Signed in</th>
                <th>Last used</th>
                <th>
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.data?.data.map((s) => (
                <tr key={s.id}>
                  <td>
                    {s.userAgent ?? 'unknown'} {s.current && <span className="badge">this one</span>}
                  </td>
                  <td>{s.ipAddress ?? '—'}</td>
                  <td>{s.mfa ? 'yes' : 'no'}</td>
                  <td>{when(s.createdAt)}</td>
                  <td>{when(s.lastUsedAt)}</td>
                  <td>
                    <Button kind="link" onClick={() => void end(s)}>
                      {s.current ? 'End this session' : 'Revoke'}
                    </Button>
                  </td>
                </tr>
              ))}
            </tbody>
          </TableFrame>
        )}
      </QueryState>
    </>
  );
}
