import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../../app-env.js';
import type { Keel } from '../../keel.js';
import { documentAccess } from '../../platform/http/route-docs.js';
import { authenticate } from '../../http/authenticate.js';
import { writeAudit } from '../audit/service.js';
import { requestInfo } from '../identity/http.js';
import { userRequired, type Principal } from '../identity/principal.js';
import { mfaRequired } from '../mfa/policy.js';
import { requireScope } from '../access/scope.js';

/**
 * THE rule of the release channel (docs/security.md "Update channel: release writes and signatures"):
 * every write that changes what devices are offered (register, upload, sync-remote, promote, rollout
 * changes) needs a platform administrator's own session verified with a second factor (`mfa: true`),
 * whatever ENABLE_2FA says. API keys are refused (403 `user_required`) whatever their permissions:
 * a key is a standing credential, and a build reaches every device of every tenant.
 */
export type ReleaseRefusal = 'user_required' | 'mfa_required';

/** Why this principal may not write releases, or null when it may (the scope is checked by requireScope). */
export function releaseRefusal(p: Pick<Principal, 'kind' | 'sessionId' | 'mfa'>): ReleaseRefusal | null {
  if (p.kind !== 'user' || p.sessionId === null) return 'user_required';
  if (!p.mfa) return 'mfa_required';
  return null;
}

/** The middleware chain of a release write: authenticate, this rule (refusals audited), platform scope. */
export function releaseWriter(keel: Keel): MiddlewareHandler<AppEnv>[] {
  const check = documentAccess<MiddlewareHandler<AppEnv>>(
    async (c, next) => {
      const refusal = releaseRefusal(c.get('principal'));
      if (refusal) {
        await writeAudit(keel.db, requestInfo(c), { action: 'agent.release.refused', result: 'failure', details: { reason: refusal, route: `${c.req.method} ${c.req.path}` } });
        throw refusal === 'user_required' ? userRequired() : mfaRequired();
      }
      await next();
    },
    { releaseWriter: true },
  );
  return [authenticate(keel), check, requireScope(keel, { scopes: ['system'] })];
}
