import type { AppError } from '../../platform/http/errors.js';
import { userRequired, type Principal } from '../identity/principal.js';
import { mfaRequired } from '../mfa/policy.js';

/**
 * THE rule of the release channel (docs/security.md "Update channel: release writes and signatures";
 * the middleware is `releaseWriter` in release-routes.ts): every write that changes what devices are offered (register, upload, sync-remote, promote, rollout
 * changes) needs a platform administrator's own session verified with a second factor (`mfa: true`),
 * whatever ENABLE_2FA says. API keys are refused (403 `user_required`) whatever their permissions:
 * a key is a standing credential, and a build reaches every device of every tenant.
 */
export type ReleaseRefusal = 'user_required' | 'mfa_required';

/** The 403 of a refusal: `user_required` (API keys) or `mfa_required` (no second factor). */
export function releaseRefused(refusal: ReleaseRefusal): AppError {
  return refusal === 'user_required' ? userRequired() : mfaRequired();
}

/** Why this principal may not write releases, or null when it may (the scope is checked by requireScope). */
export function releaseRefusal(p: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>): ReleaseRefusal | null {
  if (p.kind !== 'user' || p.sessionId === null) return 'user_required';
  if (!p.mfa) return 'mfa_required';
  return null;
}
