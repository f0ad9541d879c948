// The one shell of a page that needs a permission: who may see it (the rule of its entry in
// nav.ts, so the navigation and the page never disagree), the tenant context it needs first, and
// which sentence explains a 403 `mfa_required` from its writes. A 428 is handled once, in the
// shell of App.tsx (straight to enrolment).
import type { ComponentType, ReactNode } from 'react';
import { useAuth } from './auth';
import { NAV } from './nav';
import { useTenant } from './tenant';
import { Alert, MfaSubject, PageHeader } from './ui';

const PAGES = new Map(NAV.flatMap((s) => s.items).map((i) => [i.to, i]));

export interface PermissionPageProps {
  /** The page's navigation entry (a detail page names its list's). */
  page: string;
  /**
   * `tenant`: a platform administrator picks a partner (or an organisation) first; `org`: partner
   * users and platform administrators pick one organisation first (webhooks, SSO).
   */
  context?: 'tenant' | 'org';
  /** What the page's writes change, for the second-factor sentences ("Single sign-on settings"). */
  mfa?: string;
  children: ReactNode;
}

export function PermissionPage({ page, context, mfa, children }: PermissionPageProps) {
  const { me, can } = useAuth();
  const t = useTenant();
  const entry = PAGES.get(page);
  if (!entry) throw new Error(`PermissionPage: no navigation entry ${page}`);
  if (!me || !entry.show(me, can)) {
    return (
      <>
        <PageHeader title={entry.label} />
        <Alert>You do not have permission to see {entry.label.toLowerCase()}. Ask an administrator if you need it.</Alert>
      </>
    );
  }
  const pick =
    context === 'tenant' && me.scope === 'system' && !t.partnerId && !t.orgId
      ? 'Pick a partner (and optionally an organisation) at the top of the page to manage it.'
      : context === 'org' && me.scope !== 'organization' && !t.orgId
        ? 'Pick an organisation at the top of the page: this page manages one organisation at a time.'
        : null;
  if (pick) {
    return (
      <>
        <PageHeader title={entry.label} />
        <Alert kind="info">{pick}</Alert>
      </>
    );
  }
  return <MfaSubject.Provider value={mfa ?? null}>{children}</MfaSubject.Provider>;
}

/**
 * A page component behind PermissionPage: `export const Webhooks = permissionPage(WebhookList, '/integrations/webhooks', { context: 'org' })`.
 * The inner component mounts only when the caller may use the page, so its queries never run for a caller who may not.
 */
export function permissionPage<P extends object>(Inner: ComponentType<P>, page: string, options: Omit<PermissionPageProps, 'page' | 'children'> = {}): (props: P) => ReactNode {
  const Gated = (props: P) => (
    <PermissionPage page={page} {...options}>
      <Inner {...props} />
    </PermissionPage>
  );
  Gated.displayName = `PermissionPage(${Inner.displayName ?? Inner.name})`;
  return Gated;
}
