import { useEffect, useState, type ReactNode } from 'react';
import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import { Link, Redirect, Route, Switch, useLocation } from 'wouter';
import { api, ApiError, on, type Page } from './api';
import { AuthProvider, useAuth } from './auth';
import { NAV } from './nav';
import { TenantPicker, TenantProvider } from './tenant';
import { Alert, Button, Card, Loading, PageHeader } from './ui';
import { AcceptInvite } from './pages/AcceptInvite';
import { ForgotPassword, Login, ResetPassword } from './pages/Login';
import { PartnerLogin } from './pages/PartnerLogin';
import { Profile, Security, Sessions } from './pages/Account';
import { Users } from './pages/admin/Users';
import { Orgs, OrgDetail, Partners } from './pages/admin/Tenancy';
import { RoleDetail, Roles } from './pages/admin/Roles';
import { ApiKeys } from './pages/admin/ApiKeys';
import { Audit } from './pages/admin/Audit';
import { WebhookDetail, Webhooks } from './pages/integrations/Webhooks';
import { SsoProviderDetail, SsoProviders } from './pages/integrations/Sso';
import { Provisioning } from './pages/integrations/Provisioning';
import { DeviceDetail, Devices } from './pages/devices/Devices';
import { AgentVersions } from './pages/devices/AgentVersions';
import { InstallAgent } from './pages/devices/InstallAgent';
import { UpdateWindows } from './pages/devices/UpdateWindows';
import { keys } from './api/keys';

const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      // A 4xx will not change by asking again; a network blip might.
      retry: (count, err) => count < 2 && !(err instanceof ApiError && err.status >= 400 && err.status < 500),
      refetchOnWindowFocus: false,
      staleTime: 10_000,
    },
  },
});

export function App() {
  return (
    <QueryClientProvider client={queryClient}>
      <AuthProvider>
        <TenantProvider>
          <Routes />
        </TenantProvider>
      </AuthProvider>
    </QueryClientProvider>
  );
}

function Routes() {
  return (
    <Switch>
      <Route path="/login" component={Login} />
      <Route path="/login/:slug">{(p) => <PartnerLogin slug={p.slug} />}</Route>
      <Route path="/forgot-password" component={ForgotPassword} />
      <Route path="/reset-password" component={ResetPassword} />
      <Route path="/accept-invite" component={AcceptInvite} />
      <Route>
        <SignedIn>
          <Shell>
            <Switch>
              <Route path="/" component={Home} />
              <Route path="/account" component={Profile} />
              <Route path="/account/security" component={Security} />
              <Route path="/account/sessions" component={Sessions} />
              <Route path="/admin/partners" component={Partners} />
              <Route path="/admin/orgs" component={Orgs} />
              <Route path="/admin/orgs/:id">{(p) => <OrgDetail id={p.id} />}</Route>
              <Route path="/admin/users" component={Users} />
              <Route path="/admin/roles" component={Roles} />
              <Route path="/admin/roles/:id">{(p) => <RoleDetail id={p.id} />}</Route>
              <Route path="/admin/api-keys" component={ApiKeys} />
              <Route path="/admin/audit" component={Audit} />
              <Route path="/integrations/webhooks" component={Webhooks} />
              <Route path="/integrations/webhooks/:id">{(p) => <WebhookDetail id={p.id} />}</Route>
              <Route path="/integrations/sso" component={SsoProviders} />
              <Route path="/integrations/provisioning" component={Provisioning} />
              <Route path="/integrations/sso/:id">{(p) => <SsoProviderDetail id={p.id} />}</Route>
              <Route path="/devices" component={Devices} />
              <Route path="/devices/agent-versions" component={AgentVersions} />
              <Route path="/devices/update-windows" component={UpdateWindows} />
              <Route path="/devices/install" component={InstallAgent} />
              <Route path="/devices/:id">{(p) => <DeviceDetail id={p.id} />}</Route>
              <Route>
                <PageHeader title="Not found" />
                <p>
                  There is no page here. <Link href="/">Go to the start page</Link>
                </p>
              </Route>
            </Switch>
          </Shell>
        </SignedIn>
      </Route>
    </Switch>
  );
}

function SignedIn({ children }: { children: ReactNode }) {
  const { status } = useAuth();
  const [location] = useLocation();
  if (status === 'loading') return <Loading label="Signing in…" />;
  if (status === 'signedOut') {
    const next = location === '/' ? '' : `?next=${encodeURIComponent(location + window.location.search)}`;
    return <Redirect to={`/login${next}`} replace />;
  }
  return <>{children}</>;
}

function Shell({ children }: { children: ReactNode }) {
  const { me, can, signOut, notice } = useAuth();
  const [location, navigate] = useLocation();
  const [menuOpen, setMenuOpen] = useState(false);
  // A 428 anywhere: the role needs a second factor first; straight to enrolment.
  useEffect(
    () =>
      on('enrolmentRequired', () => {
        if (window.location.pathname !== '/account/security') navigate('/account/security?enrol=1');
      }),
    [navigate],
  );
  useEffect(() => setMenuOpen(false), [location]);
  if (!me) return null;
  const sections = NAV.map((s) => ({ ...s, items: s.items.filter((i) => i.show(me, can)) })).filter((s) => s.items.length > 0);
  return (
    <div className="shell">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Button kind="link" className="menu-button" aria-expanded={menuOpen} aria-controls="nav" onClick={() => setMenuOpen(!menuOpen)}>
          Menu
        </Button>
        <Link href="/" className="brand">
          Keel
        </Link>
        <TenantPicker />
        <div className="user">
          <span className="user-name" title={me.email}>
            {me.name || me.email}
          </span>
          <Button kind="secondary" onClick={() => void signOut()}>
            Sign out
          </Button>
        </div>
      </header>
      <nav id="nav" className={menuOpen ? 'sidebar open' : 'sidebar'} aria-label="Console">
        {sections.map((s) => (
          <div key={s.title} className="nav-section">
            <h2>{s.title}</h2>
            <ul>
              {s.items.map((i) => (
                <li key={i.to}>
                  <Link href={i.to} className={location === i.to || (/^\/(admin|integrations)\//.test(i.to) && location.startsWith(`${i.to}/`)) ? 'active' : ''} aria-current={location === i.to ? 'page' : undefined}>
                    {i.label}
                  </Link>
                </li>
              ))}
            </ul>
          </div>
        ))}
      </nav>
      <main id="main" className="content" tabIndex={-1}>
        {notice && <Alert kind="warning">{notice}</Alert>}
        {children}
      </main>
    </div>
  );
}

function Home() {
  const { me, can } = useAuth();
  // Also the first protected call after sign-in: a role that forces MFA answers 428 here, which
  // opens enrolment at once.
  const sessions = useQuery({ queryKey: keys.sessions.all, queryFn: () => api<Page<unknown>>('GET', '/auth/sessions') });
  if (!me) return null;
  const items = NAV.flatMap((s) => s.items).filter((i) => i.show(me, can) && i.to !== '/');
  return (
    <>
      <PageHeader title={`Welcome, ${me.name || me.email}`} />
      {me.scope === null && !me.isPlatformAdmin && <Alert kind="info">Your account does not belong to a partner or an organisation yet. Accept an invitation to get access.</Alert>}
      {!me.mfaEnabled && me.passkeyCount === 0 && (
        <Alert kind="info">
          Protect your account with a second factor: <Link href="/account/security">set one up</Link>.
        </Alert>
      )}
      {sessions.data && (
        <p className="muted">
          {sessions.data.pagination.total === 1 ? 'This is your only active session.' : `You have ${sessions.data.pagination.total} active sessions.`}{' '}
          <Link href="/account/sessions">Review sessions</Link>
        </p>
      )}
      <div className="tiles">
        {items.map((i) => (
          <Link key={i.to} href={i.to} className="tile">
            <Card>{i.label}</Card>
          </Link>
        ))}
      </div>
    </>
  );
}
