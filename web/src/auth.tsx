// Who is signed in: boots from an `#ssoCode` fragment or the refresh cookie, keeps the self-profile
// (with its effective permissions) and says what the caller may do.
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { useLocation } from 'wouter';
import { api, grants, hasSessionCookie, on, refresh, setTokens, type SelfProfile, type TokenAnswer } from './api';

type Status = 'loading' | 'signedOut' | 'signedIn';

interface AuthValue {
  status: Status;
  me: SelfProfile | null;
  /** A message for the sign-in page (a failed SSO code exchange, a session that ended), or for a signed-in person (an SSO link not used). */
  notice: string | null;
  signIn: (t: TokenAnswer) => void;
  signOut: () => Promise<void>;
  reloadMe: () => Promise<void>;
  can: (resource: string, action: string) => boolean;
}

const AuthContext = createContext<AuthValue | null>(null);

export function useAuth(): AuthValue {
  const v = useContext(AuthContext);
  if (!v) throw new Error('useAuth outside AuthProvider');
  return v;
}

/** The SSO exchange code in the URL fragment (`#ssoCode=…`), removed from the address bar at once. */
function takeSsoCode(): string | null {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ''));
  const code = params.get('ssoCode');
  if (!code) return null;
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  return code;
}

type Booted = (TokenAnswer & { notice?: string }) | { error: string } | null;
let booted: Promise<Booted> | null = null;

/**
 * Runs once per page load (a second mount reuses it): an exchange code is single use. A code in the
 * address never replaces the session of a person already signed in here (login CSRF: a link can carry
 * someone else's code): the code is dropped unused and the person told, naming their account.
 */
function boot(): Promise<Booted> {
  booted ??= (async () => {
    const code = takeSsoCode();
    if (code && hasSessionCookie()) {
      const current = await refresh();
      if (current) {
        return {
          ...current,
          notice: `You are signed in as ${current.user.email}. The single sign-on link you opened was not used: to sign in as another account, sign out first and sign in again.`,
        };
      }
    }
    if (code) {
      try {
        return await api<TokenAnswer>('POST', '/sso/exchange', { body: { code } });
      } catch {
        return { error: 'That single sign-on link is invalid or has expired. Sign in again.' };
      }
    }
    return hasSessionCookie() ? refresh() : null;
  })();
  return booted;
}

export function AuthProvider({ children }: { children: ReactNode }) {
  const [status, setStatus] = useState<Status>('loading');
  const [me, setMe] = useState<SelfProfile | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [, navigate] = useLocation();
  // Cached answers belong to one session: a sign-in or sign-out starts from an empty cache.
  const queryClient = useQueryClient();

  const signIn = useCallback((t: TokenAnswer) => {
    queryClient.clear();
    setTokens(t);
    setMe(t.user);
    setNotice(null);
    setStatus('signedIn');
  }, [queryClient]);

  useEffect(() => {
    void boot().then((r) => {
      if (r && 'accessToken' in r) {
        signIn(r);
        if (r.notice) setNotice(r.notice);
      } else {
        if (r && 'error' in r) setNotice(r.error);
        setStatus('signedOut');
      }
    });
    const offOut = on('signedOut', () => {
      queryClient.clear();
      setMe(null);
      setNotice('Your session has ended. Sign in again.');
      setStatus('signedOut');
    });
    const offRefresh = on('refreshed', (t) => setMe(t.user));
    return () => {
      offOut();
      offRefresh();
    };
  }, [signIn, queryClient]);

  const signOut = useCallback(async () => {
    try {
      await api('POST', '/auth/logout');
    } catch {
      // signed out locally either way
    }
    setTokens(null);
    queryClient.clear();
    // The partner / organisation choice is remembered per user (tenant.tsx): the next person on this
    // browser starts from their own.
    // To the sign-in page itself, not back to this page after the next sign-in.
    navigate('/login', { replace: true });
    setMe(null);
    setNotice(null);
    setStatus('signedOut');
  }, [navigate, queryClient]);

  const reloadMe = useCallback(async () => {
    setMe(await api<SelfProfile>('GET', '/auth/me'));
  }, []);

  const value = useMemo<AuthValue>(
    () => ({
      status,
      me,
      notice,
      signIn,
      signOut,
      reloadMe,
      can: (resource, action) => !!me && (me.isPlatformAdmin || grants(me.permissions, resource, action)),
    }),
    [status, me, notice, signIn, signOut, reloadMe],
  );
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>;
}
