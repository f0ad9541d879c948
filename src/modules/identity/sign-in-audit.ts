import { eq, sql } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { clock } from '../../platform/clock.js';
import { loggableError } from '../../platform/safe-error.js';
import { recordSecurityEvent } from '../audit/security-events.js';
import type { AuditRequestInfo } from '../audit/service.js';
import { identityOf } from './context.js';
import { identityPorts } from './ports.js';
import { users } from './schema.js';

type Account = Pick<typeof users.$inferSelect, 'id' | 'isPlatformAdmin'>;

/**
 * Refused sign-ins in the audit log (docs/decisions.md "Audit: hash chain, checkpoints, security
 * events"): a failed password, a locked or inactive account, an unknown email (recorded under a keyed
 * hash of the address, never the address), a refused second factor or SSO sign-in, a lockout, a
 * rate-limit refusal of a sign-in route. The entry belongs to the account's organisation (else its
 * partner), so that organisation's administrators read the refusals of their own users; an unknown
 * address goes to the platform's log. Actor: anonymous (whoever tried); result `failure`; bounded per
 * source address and minute by `recordSecurityEvent`. Recording never changes the answer: a failure to
 * write is logged.
 */
export interface SignInRefusal {
  action: string;
  reason: string;
  user?: Account | null;
  /** The account by id, when the caller holds only that (a second-factor step). */
  userId?: string | null;
  email?: string | null;
  details?: Record<string, unknown>;
}

/**
 * Queues the recording after the answer (identity's `deferred`): neither the answer's timing nor its
 * outcome depends on it, so the audit lookups (the account, its tenant) tell nothing about which
 * addresses have accounts. `events` may be computed in the queued task.
 */
export function auditSignInRefusal(keel: Keel, info: AuditRequestInfo, events: SignInRefusal | (() => Promise<SignInRefusal[]>)): void {
  identityOf(keel).deferred.run('audit.sign_in_refusal', info, async (log) => {
    for (const event of typeof events === 'function' ? await events() : [events]) {
      try {
        await recordRefusal(keel, info, event);
      } catch (err) {
        log.warn({ error: loggableError(err), action: event.action }, 'audit: a refused sign-in could not be recorded');
      }
    }
  });
}

async function recordRefusal(keel: Keel, info: AuditRequestInfo, event: SignInRefusal): Promise<void> {
  const user = event.user ?? (event.userId ? await accountById(keel, event.userId) : event.email ? await accountByEmail(keel, event.email) : null);
  const tenant = user ? await identityPorts(keel).tenantOf(keel, user) : null;
  const target = user ? { type: 'user', id: user.id } : event.email ? { type: 'email', id: emailHash(keel, event.email) } : null;
  await recordSecurityEvent(keel.db, { ...info, actor: { type: 'anonymous' } }, {
    action: event.action,
    orgId: tenant?.orgId ?? null,
    partnerId: tenant?.partnerId ?? null,
    target,
    details: { ...event.details, reason: event.reason },
  });
}

/** The keyed hash an unknown address is recorded under (HMAC under the encryption keyring: no dictionary reverses it without the key). */
export function emailHash(keel: Keel, email: string): string {
  return keel.secrets.keyed.make(`audit-email:${email.trim().toLowerCase()}`);
}

async function accountByEmail(keel: Keel, email: string): Promise<Account | null> {
  const [row] = await keel.db
    .select({ id: users.id, isPlatformAdmin: users.isPlatformAdmin })
    .from(users)
    .where(sql`lower(${users.email}) = lower(${email.trim()})`)
    .limit(1);
  return row ?? null;
}

async function accountById(keel: Keel, id: string): Promise<Account | null> {
  const [row] = await keel.db.select({ id: users.id, isPlatformAdmin: users.isPlatformAdmin }).from(users).where(eq(users.id, id)).limit(1);
  return row ?? null;
}

/** Why a password sign-in of `email` failed, read after the fact (only on the failure path). */
export async function passwordFailureReason(keel: Keel, email: string): Promise<{ user: Account | null; reason: string }> {
  const [row] = await keel.db
    .select({ id: users.id, isPlatformAdmin: users.isPlatformAdmin, status: users.status, hasPassword: sql<boolean>`${users.passwordHash} is not null`, lockedUntil: users.lockedUntil })
    .from(users)
    .where(sql`lower(${users.email}) = lower(${email.trim()})`)
    .limit(1);
  if (!row) return { user: null, reason: 'unknown_email' };
  const user = { id: row.id, isPlatformAdmin: row.isPlatformAdmin };
  if (row.status !== 'active') return { user, reason: 'inactive' };
  if (!row.hasPassword) return { user, reason: 'no_password' };
  if (row.lockedUntil && row.lockedUntil.getTime() > clock.nowMs()) return { user, reason: 'locked' };
  return { user, reason: 'wrong_password' };
}
