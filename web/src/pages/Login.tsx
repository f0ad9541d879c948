// Sign-in: the email first, then what sign-in discovery answers for its domain (single sign-on or the
// password, docs/decisions.md "Sign-in options"), then the second factor; a passkey signs in alone (the
// button, or the browser's autofill on the email field); single sign-on for an organisation
// (`/login?org=<orgId>`), the `/login?error=<code>` answers of the SSO callback in plain words.
import { useEffect, useState } from 'react';
import { browserSupportsWebAuthnAutofill, startAuthentication, WebAuthnAbortService } from '@simplewebauthn/browser';
import { useQuery } from '@tanstack/react-query';
import { Link, Redirect, useLocation, useSearch } from 'wouter';
import { api, ApiError, isMfaChallenge, passkeyError, type MfaChallenge, type TokenAnswer } from '../api';
import { useAuth } from '../auth';
import { Alert, Button, ErrorAlert, Field, Loading, useSubmit } from '../ui';
import { SecondFactor } from './SecondFactor';
import { hasCode } from '../api/errors';
import { keys } from '../api/keys';
import type { Schema } from '../api/types';

/** docs/specification.md "Single sign-on: the login flow": the codes the SSO callback redirects with. */
export const SSO_ERRORS: Record<string, string> = {
  session_expired: 'The single sign-on attempt took too long or was started in another browser. Start it again.',
  provider_not_found: 'Single sign-on is not set up for this organisation.',
  domain_not_allowed: 'Your email domain is not allowed to sign in to this organisation.',
  user_not_found: 'There is no account for you in this organisation. Ask an administrator to invite you.',
  default_role_required: 'Your account could not be created: the organisation’s single sign-on has no default role. Ask an administrator.',
  no_org_access: 'Your account has no access to this organisation.',
  sso_error: 'The identity provider’s answer could not be verified. Try again, or ask an administrator to check the single sign-on settings.',
  provider_testing: 'This organisation’s single sign-on is still being tested: only its single sign-on administrators can sign in through it for now. Sign in with your password, or ask an administrator.',
};

type SsoCheck = Schema<'SsoCheck'>;
type Discovery = Schema<'SignInDiscovery'>;
type PasskeyOptions = Schema<'PasskeySignInOptions'>;

/** A passkey sign-in: the challenge, the browser's ceremony (a dialog, or the autofill), the verification. */
async function passkeySignIn(autofill: boolean): Promise<TokenAnswer> {
  const { options, challengeId } = await api<PasskeyOptions>('POST', '/auth/passkey/options');
  let response;
  try {
    response = await startAuthentication({ optionsJSON: options, useBrowserAutofill: autofill });
  } catch (err) {
    throw passkeyError(err);
  }
  return api<TokenAnswer>('POST', '/auth/passkey/verify', { body: { challengeId, response } });
}

/** Where to go after signing in: `next` if it is a path of this console, else the start page. */
function safeNext(next: string | null): string {
  return next && next.startsWith('/') && !next.startsWith('//') ? next : '/';
}

export function Login() {
  const params = new URLSearchParams(useSearch());
  const [, navigate] = useLocation();
  const { signIn, notice, status } = useAuth();
  const org = params.get('org');
  const errorCode = params.get('error');
  const next = safeNext(params.get('next'));
  const [challenge, setChallenge] = useState<MfaChallenge | null>(null);
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  // Email first (no ?org=): the discovery answer for the typed address, once asked.
  const [route, setRoute] = useState<Discovery | null>(null);

  const sso = useQuery({
    queryKey: keys.ssoCheck(org),
    enabled: !!org,
    retry: false,
    queryFn: async () => {
      try {
        return await api<SsoCheck>('GET', `/sso/check/${encodeURIComponent(org ?? '')}`);
      } catch (err) {
        // No SSO for this organisation (or no SSO in this Keel): the password form stays.
        if (err instanceof ApiError && (err.status === 404 || err.status === 400)) return null;
        throw err;
      }
    },
  });

  const done = (t: TokenAnswer) => {
    signIn(t);
    navigate(next, { replace: true });
  };

  const discover = useSubmit(async () => {
    setRoute(await api<Discovery>('POST', '/auth/discover', { body: { email: email.trim() } }));
  });
  const withPasskey = useSubmit(async () => done(await passkeySignIn(false)));

  // The browser's autofill of passkeys on the email field (conditional mediation), while the email step shows.
  const emailStep = !org && !route && !challenge && status !== 'signedIn';
  useEffect(() => {
    if (!emailStep) return;
    const state = { live: true };
    void (async () => {
      if (!(await browserSupportsWebAuthnAutofill())) return;
      try {
        const answer = await passkeySignIn(true);
        if (state.live) done(answer);
      } catch {
        // Dismissed, replaced by another ceremony, or passkeys are off here: the form stays as it is.
      }
    })();
    return () => {
      state.live = false;
      WebAuthnAbortService.cancelCeremony();
    };
  }, [emailStep]);

  const login = useSubmit(async () => {
    const r = await api<TokenAnswer | MfaChallenge>('POST', '/auth/login', { body: { email: email.trim(), password } });
    if (isMfaChallenge(r)) setChallenge(r);
    else done(r);
  });

  const enforced = !!sso.data?.ssoEnabled && sso.data.enforceSSO;
  const ssoRequired = hasCode(login.error, 'sso_required');
  // 403 sso_required names where the account signs in (details.loginUrl, docs/decisions.md "SSO that explains itself").
  const requiredUrl = ssoRequired && login.error instanceof ApiError && typeof login.error.details?.loginUrl === 'string' ? login.error.details.loginUrl : null;
  const loginError = ssoRequired ? 'Your organisation signs in with single sign-on.' : null;

  // Already signed in (a bookmarked /login, the back button): straight on.
  if (status === 'signedIn' && !challenge) return <Redirect to={next} replace />;

  return (
    <main className="auth-page">
      <div className="auth-card">
        <h1 className="brand-title">Keel</h1>
        {errorCode && <Alert>{SSO_ERRORS[errorCode] ?? 'Single sign-on did not complete. Try again.'}</Alert>}
        {notice && <Alert kind="warning">{notice}</Alert>}
        {challenge ? (
          <SecondFactor challenge={challenge} onDone={done} onCancel={() => setChallenge(null)} />
        ) : (
          <>
            <h2>Sign in</h2>
            {org && sso.isPending && <Loading label="Checking single sign-on…" />}
            {sso.error && <ErrorAlert error={sso.error} />}
            {sso.data?.ssoEnabled && sso.data.loginUrl && (
              <div className="sso">
                <a className="btn btn-primary block" href={sso.data.loginUrl}>
                  Sign in with {sso.data.provider?.name ?? 'single sign-on'}
                </a>
                {enforced && <p className="muted">This organisation signs in only through single sign-on.</p>}
              </div>
            )}
            {!org && !route && (
              <form onSubmit={discover.submit} aria-label="Sign in">
                <ErrorAlert error={discover.error} />
                <Field label="Email" type="email" name="email" autoComplete="username webauthn" required value={email} onChange={(e) => setEmail(e.target.value)} error={discover.fields.email} />
                <Button type="submit" busy={discover.busy} className="block">
                  Continue
                </Button>
                <p className="small">
                  <Link href="/forgot-password">Forgot your password?</Link>
                </p>
              </form>
            )}
            {!org && route?.method === 'sso' && (
              <div className="sso">
                <p>
                  <strong>{email.trim()}</strong> signs in with your organisation’s single sign-on.
                </p>
                <a className="btn btn-primary block" href={route.loginUrl}>
                  Continue with single sign-on
                </a>
                {!route.passwordAllowed && <p className="muted">Your organisation signs in only through single sign-on.</p>}
              </div>
            )}
            {!enforced && (org || route?.passwordAllowed) && (
              <form onSubmit={login.submit} aria-label="Sign in with email and password">
                {loginError ? (
                  <Alert>
                    {loginError}{' '}
                    {requiredUrl ? <a href={requiredUrl}>Sign in with single sign-on</a> : 'Use the link your administrator gave you (it ends in ?org=…).'}
                  </Alert>
                ) : (
                  <ErrorAlert error={login.error} />
                )}
                <Field label="Email" type="email" name="email" autoComplete="username" required value={email} onChange={(e) => setEmail(e.target.value)} error={login.fields.email} />
                <Field label="Password" type="password" name="password" autoComplete="current-password" required autoFocus={!org} value={password} onChange={(e) => setPassword(e.target.value)} error={login.fields.password} />
                <Button type="submit" busy={login.busy} className="block">
                  Sign in
                </Button>
                <p className="small">
                  <Link href="/forgot-password">Forgot your password?</Link>
                </p>
              </form>
            )}
            {!org && route && (
              <p className="small">
                <Button
                  kind="link"
                  type="button"
                  onClick={() => {
                    setRoute(null);
                    setPassword('');
                  }}
                >
                  Use another email
                </Button>
              </p>
            )}
            {!enforced && (
              <div className="passkey-sign-in">
                <ErrorAlert error={withPasskey.error} />
                <Button kind="secondary" type="button" className="block" busy={withPasskey.busy} onClick={() => withPasskey.submit()}>
                  Sign in with a passkey
                </Button>
              </div>
            )}
          </>
        )}
      </div>
    </main>
  );
}

export function ForgotPassword() {
  const [email, setEmail] = useState('');
  const [sent, setSent] = useState(false);
  const s = useSubmit(async () => {
    await api('POST', '/auth/forgot-password', { body: { email: email.trim() } });
    setSent(true);
  });
  return (
    <main className="auth-page">
      <div className="auth-card">
        <h1 className="brand-title">Keel</h1>
        <h2>Reset your password</h2>
        {sent ? (
          <Alert kind="success">If an account exists for {email}, an email with a reset link is on its way.</Alert>
        ) : (
          <form onSubmit={s.submit}>
            <ErrorAlert error={s.error} />
            <Field label="Email" type="email" required value={email} onChange={(e) => setEmail(e.target.value)} error={s.fields.email} autoComplete="username" />
            <Button type="submit" busy={s.busy}>
              Email me a link
            </Button>
          </form>
        )}
        <p className="small">
          <Link href="/login">Back to sign in</Link>
        </p>
      </div>
    </main>
  );
}

export function ResetPassword() {
  const token = new URLSearchParams(useSearch()).get('token') ?? '';
  const [password, setPassword] = useState('');
  const [confirm, setConfirm] = useState('');
  const [done, setDone] = useState(false);
  const s = useSubmit(async () => {
    await api('POST', '/auth/reset-password', { body: { token, password } });
    setDone(true);
  });
  const mismatch = confirm !== '' && confirm !== password;
  return (
    <main className="auth-page">
      <div className="auth-card">
        <h1 className="brand-title">Keel</h1>
        <h2>Choose a new password</h2>
        {!token && <Alert>This link has no reset token. Open the link from the email again, or ask for a new one.</Alert>}
        {done ? (
          <Alert kind="success">
            Your password is changed and every session was signed out. <Link href="/login">Sign in</Link>
          </Alert>
        ) : (
          <form onSubmit={(e) => (mismatch ? e.preventDefault() : s.submit(e))}>
            <ErrorAlert error={s.error} shown={['password']} />
            <Field label="New password" type="password" autoComplete="new-password" required minLength={8} maxLength={128} value={password} onChange={(e) => setPassword(e.target.value)} error={s.fields.password} />
            <Field label="Repeat the new password" type="password" autoComplete="new-password" required value={confirm} onChange={(e) => setConfirm(e.target.value)} error={mismatch ? 'The two passwords differ' : undefined} />
            <Button type="submit" busy={s.busy} disabled={!token}>
              Set password
            </Button>
          </form>
        )}
      </div>
    </main>
  );
}
