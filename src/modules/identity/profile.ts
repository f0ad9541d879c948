import { z } from '@hono/zod-openapi';
import { eq } from 'drizzle-orm';
import { notFound } from '../../platform/http/errors.js';
import { users } from './schema.js';
import type { Keel } from '../../keel.js';
import type { InvalidatedCache } from '../../platform/cache.js';
import { identityPorts, type TenantOf } from './ports.js';

export const PermissionPairSchema = z
  .object({
    resource: z.string().openapi({ description: 'Resource of the permission (e.g. `devices`, `users`, `audit`), or `*` for every resource', example: 'devices' }),
    action: z.string().openapi({ description: 'Canonical action on it (`read`, `write`, `delete`, `execute`, or a named one such as `invite`, `acknowledge`), or `*` for every action', example: 'read' }),
  })
  .openapi({ description: 'One `resource:action` permission' });

/** The self-profile of `GET /auth/me`, `GET /users/me` and the `user` of every token answer (docs/decisions.md "Tokens and sessions"). */
export const SelfProfileSchema = z
  .object({
    id: z.uuid().openapi({ description: 'Your user id (UUID); the `sub` claim of your access tokens' }),
    email: z.string().openapi({ description: 'Email address (sign-in name)', example: 'ada@example.com' }),
    name: z.string().openapi({ description: 'Display name (1 to 255 characters)', example: 'Ada Lovelace' }),
    avatarUrl: z.string().nullable().openapi({ description: 'https URL of the avatar image, or null' }),
    status: z.enum(['active', 'invited', 'disabled']).openapi({ description: '`active` can sign in; `invited` has not accepted an invitation yet; `disabled` cannot sign in' }),
    isPlatformAdmin: z.boolean().openapi({ description: 'True for platform administrators, who act in system scope with an implicit `*:*`' }),
    mfaEnabled: z.boolean().openapi({ description: 'True when a second factor (TOTP, SMS or a passkey) is enrolled' }),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable().openapi({ description: 'Primary second factor, the one login offers first; null without one' }),
    passkeyCount: z.number().int().openapi({ description: 'Number of registered passkeys' }),
    hasPassword: z.boolean().openapi({ description: 'False once the password was removed in favour of sign-in passkeys (DELETE /auth/password), or for an account made by single sign-on; a reset link sets one again' }),
    phoneNumberMasked: z.string().nullable().openapi({ description: 'The phone number for SMS with all but its country prefix and last two digits hidden; null without one', example: '+1•••••••23' }),
    phoneVerified: z.boolean().openapi({ description: 'True when the phone number was confirmed with a texted code' }),
    lastLoginAt: z.string().nullable().openapi({ description: 'Last completed sign-in, ISO 8601 UTC; null before the first' }),
    createdAt: z.string().openapi({ description: 'When the account was created, ISO 8601 UTC' }),
    scope: z.enum(['system', 'partner', 'organization']).nullable().openapi({
      description: 'Where the user acts: `system` (platform administrator), `partner` or `organization` (its association); null for an account with no association, which may call only `/auth/*` and `/users/me`',
    }),
    partnerId: z.uuid().nullable().openapi({ description: 'The partner of a partner user; null for organisation, system and unassociated users' }),
    orgId: z.uuid().nullable().openapi({ description: 'The organisation of an organisation user; null for partner, system and unassociated users' }),
    roleId: z.uuid().nullable().openapi({ description: 'The role of the association; null without one' }),
    permissions: z.array(PermissionPairSchema).openapi({ description: 'Effective permissions: the role\'s own plus every ancestor\'s (platform administrators: `*:*`)' }),
  })
  .openapi('SelfProfile', { description: 'The signed-in user: account, second-factor state and effective access' });

export type SelfProfile = z.infer<typeof SelfProfileSchema>;
type User = typeof users.$inferSelect;

/** `+14155550123` → `+1•••••••23`: enough to recognise, not enough to use. */
export function maskPhone(phone: string | null): string | null {
  if (!phone) return null;
  const keep = phone.startsWith('+') ? 2 : 1;
  return `${phone.slice(0, keep)}${'•'.repeat(Math.max(0, phone.length - keep - 2))}${phone.slice(-2)}`;
}

/** The self-profile; pass the tenant when the caller already has it. */
export async function selfProfile(keel: Keel, userId: string, known?: { tenant?: TenantOf; user?: User }): Promise<SelfProfile> {
  // A caller that has just read the user's row (a refresh) passes it: not read again.
  const user = known?.user ?? (await keel.db.select().from(users).where(eq(users.id, userId)))[0];
  if (!user) throw notFound('User');
  const ports = identityPorts(keel);
  const [tenant, passkeys] = await Promise.all([known?.tenant ?? ports.tenantOf(keel, user), ports.passkeyCount(keel.db, user)]);
  return profileOf(user, passkeys, tenant);
}

/** The self-profile from rows already in hand (a login has just read the user). */
export function profileOf(user: User, passkeys: number, access: TenantOf): SelfProfile {
  return {
    id: user.id,
    email: user.email,
    name: user.name,
    avatarUrl: user.avatarUrl,
    status: user.status,
    isPlatformAdmin: user.isPlatformAdmin,
    mfaEnabled: user.mfaEnabled,
    mfaMethod: user.mfaMethod,
    passkeyCount: passkeys,
    hasPassword: user.passwordHash !== null,
    phoneNumberMasked: maskPhone(user.phoneNumber),
    phoneVerified: user.phoneVerified,
    lastLoginAt: user.lastLoginAt?.toISOString() ?? null,
    createdAt: user.createdAt.toISOString(),
    scope: access.scope,
    partnerId: access.partnerId,
    orgId: access.orgId,
    roleId: access.roleId,
    permissions: access.permissions,
  };
}

/**
 * Per-process cache of self-profiles for `GET /auth/me` and `/users/me`, the hottest authenticated
 * reads (platform/cache.ts). Cleared for a user on the `user` topic (any change to the account, its
 * factors or its association publishes there) and entirely on any role change (the access module
 * publishes `profile` `*` then). Held by the module's handle (context.ts `installIdentity`).
 */
const profileCache = (keel: Keel): InvalidatedCache<SelfProfile> => keel.modules.get('identity').profiles;

export function cachedSelfProfile(keel: Keel, userId: string): Promise<SelfProfile> {
  return profileCache(keel).get(userId, () => selfProfile(keel, userId));
}

/**
 * A sign-in stamped the user's `lastLoginAt`, the only field of the profile a sign-in changes: every
 * other process drops its copy (the `profile` topic), and this process keeps its copy with the new
 * time instead of reading the user again. So the user's next read here (the console's, right after
 * signing in; the reads of an account signing in often) waits for no statement. The copy is as current
 * as before: any other change drops it, here at once and elsewhere when the message arrives.
 */
export async function lastLoginStamped(keel: Keel, userId: string, at: Date): Promise<void> {
  const cache = profileCache(keel);
  const cached = cache.peek(userId);
  // publish() drops this process's copy before its first await (platform/invalidation.ts), so the copy
  // kept below is stored after the drop, not removed by it.
  const published = keel.modules.get('identity').sessions.profileChanged(userId);
  const stamp = at.toISOString();
  if (cached && (cached.lastLoginAt === null || cached.lastLoginAt <= stamp)) cache.store(userId, { ...cached, lastLoginAt: stamp });
  await published;
}

/** The cached self-profile of `userId`, without a load (no promise): undefined when none is cached. */
export function cachedSelfProfileNow(keel: Keel, userId: string): SelfProfile | undefined {
  return profileCache(keel).peek(userId);
}
