import { z } from '@hono/zod-openapi';
import { count, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import type { users } from '../identity/schema.js';
import { passkeys } from './schema.js';
import { securityPolicy, usableMethods } from './policy.js';
import { getAccessSummary } from '../access/service.js';

export const MFA_LOGIN_PURPOSE = 'mfa_login';
export const MFA_TEMP_TOKEN_TTL_MS = 5 * 60_000;

export const MfaChallengeSchema = z
  .object({
    mfaRequired: z.literal(true).openapi({ description: 'Always true: the password was right and a second factor is needed; no tokens were issued' }),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).openapi({ description: 'The primary factor to ask for: `totp` or `sms` go to POST /auth/mfa/verify (for `sms`, POST /auth/mfa/sms/send first), `passkey` to POST /auth/mfa/passkey/options' }),
    tempToken: z.string().openapi({ description: 'Carries the login to the second step; valid 5 minutes' }),
    availableMethods: z
      .array(z.enum(['totp', 'sms', 'passkey']))
      .openapi({ description: 'Every enrolled factor the organisation policy allows; empty when none is allowed (a recovery code still signs in)' }),
  })
  .openapi('MfaChallenge');

export type MfaChallenge = z.infer<typeof MfaChallengeSchema>;
export type MfaMethodName = MfaChallenge['mfaMethod'];
type Method = MfaMethodName;

/** The second factors a user has enrolled, primary first. */
export async function enrolledMethods(keel: Keel, user: typeof users.$inferSelect): Promise<Method[]> {
  const methods: Method[] = [];
  if (user.mfaEnabled && user.mfaSecret) methods.push('totp');
  if (user.mfaEnabled && user.phoneVerified && user.phoneNumber && user.mfaMethod === 'sms') methods.push('sms');
  // Passkeys are an alternate factor beside TOTP/SMS (docs/specification.md "MFA").
  // Registering a passkey sets mfa_enabled, and it is cleared only when no factor remains: a user
  // without it has no passkey, so the count (a query on every login) is skipped for them.
  if (user.mfaEnabled) {
    const [pk] = await keel.db.select({ n: count() }).from(passkeys).where(eq(passkeys.userId, user.id));
    if ((pk?.n ?? 0) > 0) methods.push('passkey');
  }
  const primary = user.mfaMethod && methods.includes(user.mfaMethod) ? user.mfaMethod : methods[0];
  return primary ? [primary, ...methods.filter((m) => m !== primary)] : [];
}

/** How many passkeys a user holds. A passkey implies mfa_enabled (see enrolledMethods): no query without it. */
export async function passkeyCount(db: Db, user: Pick<typeof users.$inferSelect, 'id' | 'mfaEnabled'>): Promise<number> {
  if (!user.mfaEnabled) return 0;
  const [pk] = await db.select({ n: count() }).from(passkeys).where(eq(passkeys.userId, user.id));
  return pk?.n ?? 0;
}

/**
 * The login seam for a second factor: after the password is proven, a user with MFA gets a 5-minute
 * single-use temp token instead of tokens. Null when MFA is off (ENABLE_2FA=false) or not enrolled.
 */
export async function loginSecondFactor(keel: Keel, user: typeof users.$inferSelect): Promise<MfaChallenge | null> {
  if (!keel.config.ENABLE_2FA) return null;
  const enrolled = await enrolledMethods(keel, user);
  if (enrolled.length === 0) return null;
  // Only the methods the policy allows are offered (policy.ts decides for every method). A user whose
  // every factor is disallowed still gets the challenge, never tokens: `availableMethods` is empty,
  // `mfaMethod` names the enrolled one (the user is told why when trying it), and a recovery code signs in.
  const methods = usableMethods(await securityPolicy(keel, await getAccessSummary(keel, user)), enrolled);
  const primary = methods[0] ?? enrolled[0];
  if (!primary) return null;
  const { token } = await keel.singleUse.create(keel.db, {
    purpose: MFA_LOGIN_PURPOSE,
    subjectId: user.id,
    ttlMs: MFA_TEMP_TOKEN_TTL_MS,
  });
  return { mfaRequired: true, mfaMethod: primary, tempToken: token, availableMethods: methods };
}
