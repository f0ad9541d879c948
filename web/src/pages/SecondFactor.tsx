// The second step of a sign-in (and of accepting an invitation into an account with MFA): TOTP,
// SMS (send, then verify), passkey (WebAuthn in this browser) or a recovery code.
import { useState } from 'react';
import { startAuthentication, type PublicKeyCredentialRequestOptionsJSON } from '@simplewebauthn/browser';
import { api, passkeyError, type MfaChallenge, type MfaMethod, type TokenAnswer } from '../api';
import { Alert, Button, ErrorAlert, Field, useSubmit } from '../ui';

type Tab = MfaMethod | 'recovery';

const LABELS: Record<Tab, string> = {
  totp: 'Authenticator app',
  sms: 'Text message',
  passkey: 'Passkey',
  recovery: 'Recovery code',
};

export function SecondFactor({ challenge, onDone, onCancel }: { challenge: MfaChallenge; onDone: (t: TokenAnswer) => void; onCancel: () => void }) {
  const tabs: Tab[] = [...challenge.availableMethods, 'recovery'];
  const first: Tab = challenge.availableMethods.includes(challenge.mfaMethod) ? challenge.mfaMethod : (tabs[0] ?? 'recovery');
  const [tab, setTab] = useState<Tab>(first);
  return (
    <div className="second-factor">
      <h2>Second step</h2>
      {challenge.availableMethods.length === 0 && (
        <Alert kind="warning">Your organisation does not allow the second factor you enrolled. Use a recovery code, or ask an administrator to reset it.</Alert>
      )}
      {tabs.length > 1 && (
        <div
          className="tabs"
          role="tablist"
          aria-label="Second factor"
          onKeyDown={(e) => {
            // The tab pattern's keys: arrows move between methods, Home and End to the ends.
            const i = tabs.indexOf(tab);
            const next = { ArrowRight: i + 1, ArrowLeft: i - 1 + tabs.length, Home: 0, End: tabs.length - 1 }[e.key];
            if (next === undefined) return;
            e.preventDefault();
            const to = tabs[next % tabs.length] ?? tab;
            setTab(to);
            document.getElementById(`mfa-tab-${to}`)?.focus();
          }}
        >
          {tabs.map((t) => (
            <button
              key={t}
              id={`mfa-tab-${t}`}
              role="tab"
              type="button"
              aria-selected={tab === t}
              tabIndex={tab === t ? 0 : -1}
              className={tab === t ? 'tab active' : 'tab'}
              onClick={() => setTab(t)}
            >
              {LABELS[t]}
            </button>
          ))}
        </div>
      )}
      <div role="tabpanel" aria-label={LABELS[tab]}>
        {tab === 'totp' && <CodeForm challenge={challenge} onDone={onDone} label="6-digit code from your authenticator app" pattern="[0-9]{6}" />}
        {tab === 'recovery' && <CodeForm challenge={challenge} onDone={onDone} label="Recovery code (XXXX-XXXX)" pattern="[A-Za-z0-9]{4}-?[A-Za-z0-9]{4}" />}
        {tab === 'sms' && <SmsForm challenge={challenge} onDone={onDone} />}
        {tab === 'passkey' && <PasskeyForm challenge={challenge} onDone={onDone} />}
      </div>
      <p>
        <Button kind="link" type="button" onClick={onCancel}>
          Start over
        </Button>
      </p>
    </div>
  );
}

function CodeForm({ challenge, onDone, label, pattern }: { challenge: MfaChallenge; onDone: (t: TokenAnswer) => void; label: string; pattern: string }) {
  const [code, setCode] = useState('');
  const s = useSubmit(async () => onDone(await api<TokenAnswer>('POST', '/auth/mfa/verify', { body: { tempToken: challenge.tempToken, code: code.trim() } })));
  return (
    <form onSubmit={s.submit} noValidate={false}>
      <ErrorAlert error={s.error} />
      <Field label={label} name="code" value={code} onChange={(e) => setCode(e.target.value)} required autoFocus autoComplete="one-time-code" pattern={pattern} error={s.fields.code} />
      <Button type="submit" busy={s.busy}>
        Verify
      </Button>
    </form>
  );
}

function SmsForm({ challenge, onDone }: { challenge: MfaChallenge; onDone: (t: TokenAnswer) => void }) {
  const [sentTo, setSentTo] = useState<string | null>(null);
  const send = useSubmit(async () => {
    const r = await api<{ phoneNumberMasked: string | null }>('POST', '/auth/mfa/sms/send', { body: { tempToken: challenge.tempToken } });
    setSentTo(r.phoneNumberMasked ?? 'your phone');
  });
  return (
    <div>
      <ErrorAlert error={send.error} />
      {sentTo ? <Alert kind="info">A code was sent to {sentTo}.</Alert> : <p>We will text a code to your verified phone.</p>}
      <Button type="button" kind={sentTo ? 'secondary' : 'primary'} busy={send.busy} onClick={() => send.submit()}>
        {sentTo ? 'Send another code' : 'Send code'}
      </Button>
      {sentTo && <CodeForm challenge={challenge} onDone={onDone} label="6-digit code from the text message" pattern="[0-9]{6}" />}
    </div>
  );
}

function PasskeyForm({ challenge, onDone }: { challenge: MfaChallenge; onDone: (t: TokenAnswer) => void }) {
  const s = useSubmit(async () => {
    const optionsJSON = await api<PublicKeyCredentialRequestOptionsJSON>('POST', '/auth/mfa/passkey/options', { body: { tempToken: challenge.tempToken } });
    let credential;
    try {
      credential = await startAuthentication({ optionsJSON });
    } catch (err) {
      throw passkeyError(err);
    }
    onDone(await api<TokenAnswer>('POST', '/auth/mfa/passkey/verify', { body: { tempToken: challenge.tempToken, credential } }));
  });
  return (
    <div>
      <ErrorAlert error={s.error} />
      <p>Use the passkey saved on this device or a security key.</p>
      <Button type="button" busy={s.busy} onClick={() => s.submit()}>
        Use a passkey
      </Button>
    </div>
  );
}
