import { z } from '@hono/zod-openapi';
import { count, eq } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import { notFound } from '../../platform/http/errors.js';
import { getAccessSummary, type AccessSummary } from '../access/service.js';
import { passkeys } from '../mfa/schema.js';
import { users } from './schema.js';
import type { Keel } from '../../keel.js';
import { PROFILE_TOPIC, USER_TOPIC } from './sessions.js';
import { ROLES_TOPIC } from '../access/role-cache.js';

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

/** The self-profile; pass the access summary when the caller already has it. */
export async function selfProfile(db: Db, userId: string, known?: { access?: AccessSummary }): Promise<SelfProfile> {
  const [user] = await db.select().from(users).where(eq(users.id, userId));
  if (!user) throw notFound('User');
  const access = known?.access ?? (await getAccessSummary(db, user));
  return profileOf(user, await passkeyCount(db, user), access);
}

/** A passkey implies mfa_enabled (see mfa/login.ts enrolledMethods): no query without it. */
export async function passkeyCount(db: Db, user: Pick<User, 'id' | 'mfaEnabled'>): Promise<number> {
  if (!user.mfaEnabled) return 0;
  const [pk] = await db.select({ n: count() }).from(passkeys).where(eq(passkeys.userId, user.id));
  return pk?.n ?? 0;
}

/** The self-profile from rows already in hand (a login has just read the user). */
export function profileOf(user: User, passkeys: number, access: AccessSummary): SelfProfile {
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
 * association publishes there) and entirely on any role change; a load that raced an invalidation is
 * not stored (DECISIONS "Caches").
 */
class ProfileCache {
  readonly #entries = new Map<string, SelfProfile>();
  #generation = 0;

  constructor(keel: Keel) {
    keel.invalidation.on(USER_TOPIC, (userId) => this.#drop(userId));
    keel.invalidation.on(PROFILE_TOPIC, (userId) => this.#drop(userId));
    keel.invalidation.on(ROLES_TOPIC, () => this.#drop('*'));
  }

  async get(db: Db, userId: string): Promise<SelfProfile> {
    const hit = this.#entries.get(userId);
    if (hit) return hit;
    const generation = this.#generation;
    const profile = await selfProfile(db, userId);
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
  return cache.get(keel.db, userId);
}
