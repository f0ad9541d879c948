// A partner's own sign-in page, `/login/<partner-slug>` (docs/decisions.md "Partner-level SSO"): the
// partner's name and "Sign in with <provider>" for its technicians; the `?error=<code>` answers of
// the SSO callback in plain words; the ordinary sign-in a link away.
import { useQuery } from '@tanstack/react-query';
import { Link, Redirect, useSearch } from 'wouter';
import { api, ApiError } from '../api';
import { useAuth } from '../auth';
import { Alert, ErrorAlert, Loading } from '../ui';
import { SSO_ERRORS } from './Login';
import type { Schema } from '../api/types';

type PartnerCheck = Schema<'SsoPartnerCheck'>;

export function PartnerLogin({ slug }: { slug: string }) {
  const params = new URLSearchParams(useSearch());
  const errorCode = params.get('error');
  const { status } = useAuth();
  const page = useQuery({
    queryKey: ['sso-partner-check', slug],
    retry: false,
    queryFn: async () => {
      try {
        return await api<PartnerCheck>('GET', `/sso/check/partner/${encodeURIComponent(slug)}`);
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return null;
        throw err;
      }
    },
  });
  if (status === 'signedIn') return <Redirect to="/" replace />;
  const partner = page.data;
  return (
    <main className="auth-page">
      <div className="auth-card">
        <h1 className="brand-title">Keel</h1>
        {errorCode && <Alert>{SSO_ERRORS[errorCode] ?? 'Single sign-on did not complete. Try again.'}</Alert>}
        {page.isPending && <Loading label="Loading the sign-in page…" />}
        {page.error && <ErrorAlert error={page.error} />}
        {partner === null && <Alert kind="warning">There is no sign-in page at this address.</Alert>}
        {partner && (
          <>
            <h2>Sign in to {partner.name}</h2>
            {partner.ssoEnabled ? (
              <div className="sso">
                <a className="btn btn-primary block" href={`/api/v1/sso/login/partner/${encodeURIComponent(slug)}`}>
                  Sign in with {partner.providerName ?? 'single sign-on'}
                </a>
              </div>
            ) : (
              <p className="muted">{partner.name} has no single sign-on yet.</p>
            )}
          </>
        )}
        <p className="small">
          <Link href="/login">Sign in with your email instead</Link>
        </p>
      </div>
    </main>
  );
}
