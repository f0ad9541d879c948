// The invitation link (`/accept-invite?token=…`): a new account sets its name and password; an
// existing account proves itself with its password, then its second factor, then joins signed in.
import { useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { Link, useLocation, useSearch } from 'wouter';
import { api, isMfaChallenge, isTokenAnswer, setTokens, type MfaChallenge, type SelfProfile, type TokenAnswer } from '../api';
import { useAuth } from '../auth';
import { Alert, Button, ErrorAlert, Field, useSubmit } from '../ui';
import type { Schema } from '../api/types';
import { keys } from '../api/keys';
import { SecondFactor } from './SecondFactor';

export function AcceptInvite() {
  const token = new URLSearchParams(useSearch()).get('token') ?? '';
  const { signIn } = useAuth();
  const [, navigate] = useLocation();
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const [challenge, setChallenge] = useState<MfaChallenge | null>(null);
  // The organisation enforces single sign-on: accepted, no session; sign in through its provider.
  const [ssoOrg, setSsoOrg] = useState<string | null>(null);
  // Who is invited, and to what (the token in the body, never in a URL the API logs).
  const invitation = useQuery({
    queryKey: keys.invitations.preview(token),
    enabled: !!token,
    retry: false,
    queryFn: () => api<Schema<'InvitationPreview'>>('POST', '/auth/invitation', { body: { token } }),
  });
  const to = invitation.data?.invitedTo;

  const s = useSubmit(async () => {
    const body: Record<string, string> = { token, password };
    if (name.trim()) body.name = name.trim();
    const r = await api<TokenAnswer | MfaChallenge | { ssoRequired: true; user: SelfProfile }>('POST', '/auth/accept-invite', { body });
    if ('ssoRequired' in r) setSsoOrg(r.user.orgId ?? '');
    else if (isMfaChallenge(r)) setChallenge(r);
    else if (isTokenAnswer(r)) {
      signIn(r);
      navigate('/', { replace: true });
    }
  });

  // After the second factor: accept again as the signed-in account (no password, no new session).
  const [finishError, setFinishError] = useState<unknown>(null);
  const finish = async (t: TokenAnswer) => {
    setTokens(t);
    try {
      const r = await api<{ user: SelfProfile }>('POST', '/auth/accept-invite', { body: { token } });
      signIn({ ...t, user: r.user });
      navigate('/', { replace: true });
    } catch (err) {
      // Signed in, but not joined (e.g. the invitation was revoked meanwhile): say why.
      setTokens(null);
      setChallenge(null);
      setFinishError(err);
    }
  };

  return (
    <main className="auth-page">
      <div className="auth-card">
        <h1 className="brand-title">Keel</h1>
        <h2>Accept your invitation</h2>
        {!token && <Alert>This link has no invitation token. Open the link from the email again.</Alert>}
        {invitation.data && (
          <p>
            You are invited to join {to?.name ? <strong>{to.name}</strong> : <>a {to?.kind === 'partner' ? 'partner' : 'organisation'} that has since been deleted</>} on Keel as <strong>{invitation.data.email}</strong>.
          </p>
        )}
        <ErrorAlert error={invitation.error} />
        <ErrorAlert error={finishError} />
        {ssoOrg !== null ? (
          <Alert kind="success">
            Invitation accepted. Your organisation signs in with single sign-on: <Link href={ssoOrg ? `/login?org=${ssoOrg}` : '/login'}>sign in through your identity provider</Link>.
          </Alert>
        ) : challenge ? (
          <SecondFactor challenge={challenge} onDone={(t) => void finish(t)} onCancel={() => setChallenge(null)} />
        ) : (
          <form onSubmit={s.submit}>
            <ErrorAlert error={s.error} shown={['name', 'password']} />
            <p className="muted">New to Keel? Choose your name and a password. Already have an account? Enter its password to join.</p>
            <Field label="Your name (optional)" autoComplete="name" maxLength={200} value={name} onChange={(e) => setName(e.target.value)} error={s.fields.name} />
            <Field label="Password" type="password" autoComplete="new-password" required minLength={8} maxLength={128} value={password} onChange={(e) => setPassword(e.target.value)} error={s.fields.password} hint="8 to 128 characters; a weak password is refused with the reason." />
            <Button type="submit" busy={s.busy} disabled={!token || !!invitation.error}>
              Accept and sign in
            </Button>
          </form>
        )}
        <p className="small">
          <Link href="/login">Sign in instead</Link>
        </p>
      </div>
    </main>
  );
}
