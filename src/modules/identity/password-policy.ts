import type { Keel } from '../../keel.js';
import type { users } from './schema.js';
import { identityError } from './errors.js';

type User = typeof users.$inferSelect;

/** Where a password is about to be used: a sign-in, or a reset link about to be sent. */
export type PasswordUse = 'login' | 'reset';

/**
 * A higher module's say on password use (the SSO module's enforced SSO): `refuse` stops it (a sign-in
 * answers `error`; a reset link is not sent), `audit` records an allowed use worth noting (a
 * break-glass sign-in). null: no opinion.
 */
export interface PasswordPolicyVerdict {
  refuse: boolean;
  /** The refusal answered to a sign-in. */
  error?: Error;
  audit?: { action: string; orgId: string | null; partnerId?: string | null; details: Record<string, unknown> };
}

export type PasswordPolicy = (user: User, use: PasswordUse) => Promise<PasswordPolicyVerdict | null>;

/**
 * The port through which modules above identity (SSO) take part in password sign-in and reset,
 * registered when they are installed (src/compose.ts), so identity never imports them. The list is
 * part of identity's handle.
 */
export function registerPasswordPolicy(keel: Keel, policy: PasswordPolicy): void {
  keel.modules.get('identity').passwordPolicies.push(policy);
}

/** Every registered policy's verdict, in order; the first refusal wins. */
export async function passwordPolicyVerdicts(keel: Keel, user: User, use: PasswordUse): Promise<PasswordPolicyVerdict[]> {
  const out: PasswordPolicyVerdict[] = [];
  for (const policy of keel.modules.get('identity').passwordPolicies) {
    const v = await policy(user, use);
    if (!v) continue;
    out.push(v);
    if (v.refuse) break;
  }
  return out;
}

/**
 * The sign-in policy every session but an SSO one passes (`signIn` asks it; password login asks it
 * before the second-factor challenge): the first refusal's error (403 `sso_required` under enforced
 * SSO), or null. Audits nothing: a break-glass sign-in is recorded once, by the password check.
 */
export async function signInRefusal(keel: Keel, user: User): Promise<Error | null> {
  const refusal = (await passwordPolicyVerdicts(keel, user, 'login')).find((v) => v.refuse);
  return refusal ? (refusal.error ?? identityError('password_login_refused')) : null;
}
