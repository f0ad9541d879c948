import { z } from '@hono/zod-openapi';
import { eq } from 'drizzle-orm';
import { notFound } from '../../platform/http/errors.js';
import { users } from './schema.js';
import type { Keel } from '../../keel.js';
import { PROFILE_TOPIC, USER_TOPIC } from './sessions.js';
import { identityPorts, type TenantOf } from './ports.js';

export const PermissionPairSchema = z.object({ resource: z.string(), action: z.string() });

/** The self-profile of `GET /auth/me`, `GET /users/me` and the `user` of every token answer (DECISIONS). */
export const SelfProfileSchema = z
  .object({
    id: z.uuid(),
    email: z.string(),
    name: z.string(),
    avatarUrl: z.string().nullable(),
    status: z.enum(['active', 'invited', 'disabled']),
    isPlatformAdmin: z.boolean(),
    mfaEnabled: z.boolean(),
    mfaMethod: z.enum(['totp', 'sms', 'passkey']).nullable(),
    passkeyCount: z.number().int(),
    phoneNumberMasked: z.string().nullable(),
    phoneVerified: z.boolean(),
    lastLoginAt: z.string().nullable(),
    createdAt: z.string(),
    scope: z.enum(['system', 'partner', 'organization']).nullable(),
    partnerId: z.uuid().nullable(),
    orgId: z.uuid().nullable(),
    roleId: z.uuid().nullable(),
    permissions: z.array(PermissionPairSchema),
  })
  .openapi('SelfProfile');

export type SelfProfile = z.infer<typeof SelfProfileSchema>;
type User = typeof users.$inferSelect;

/** `+14155550123` → `+1•••••••23`: enough to recognise, not enough to use. */
export function maskPhone(phone: string | null): string | null {
  if (!phone) return null;
  const keep = phone.startsWith('+') ? 2 : 1;
  return `${phone.slice(0, keep)}${'•'.repeat(Math.max(0, phone.length - keep - 2))}${phone.slice(-2)}`;
}

/** The self-profile; pass the tenant when the caller already has it. */
export async function selfProfile(keel: Keel, userId: string, known?: { tenant?: TenantOf }): Promise<SelfProfile> {
  const [user] = await keel.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw notFound('User');
  const ports = identityPorts(keel);
  const [tenant, passkeys] = await Promise.all([known?.tenant ?? ports.tenantOf(keel.db, user), ports.passkeyCount(keel.db, user)]);
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
 * reads. Cleared for a user on the `user` topic (any change to the account, its factors or its
 * association publishes there) and entirely on any role change (the access module publishes `profile`
 * `*` then); a load that raced an invalidation is
 * not stored (DECISIONS "Caches").
 */
class ProfileCache {
  readonly #entries = new Map<string, SelfProfile>();
  #generation = 0;

  constructor(keel: Keel) {
    keel.invalidation.on(USER_TOPIC, (userId) => this.#drop(userId));
    keel.invalidation.on(PROFILE_TOPIC, (userId) => this.#drop(userId));
  }

  async get(keel: Keel, userId: string): Promise<SelfProfile> {
    const hit = this.#entries.get(userId);
    if (hit) return hit;
    const generation = this.#generation;
    const profile = await selfProfile(keel, userId);
    if (generation === this.#generation) {
      if (this.#entries.size >= 100_000) this.#entries.clear();
      this.#entries.set(userId, profile);
    }
    return profile;
  }

  #drop(userId: string): void {
    this.#generation++;
    if (userId === '*') this.#entries.clear();
    else this.#entries.delete(userId);
  }
}

const profileCaches = new WeakMap<Keel, ProfileCache>();

export function cachedSelfProfile(keel: Keel, userId: string): Promise<SelfProfile> {
  let cache = profileCaches.get(keel);
  if (!cache) {
    cache = new ProfileCache(keel);
    profileCaches.set(keel, cache);
  }
  return cache.get(keel, userId);
}
