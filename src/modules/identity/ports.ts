import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import type { users } from './schema.js';

type UserRow = typeof users.$inferSelect;

/** The second factors identity knows by name (the mfa module enrols and checks them). */
export type FactorName = 'totp' | 'sms' | 'passkey';

/**
 * Where a user acts: the claims of their access token, the placement of their audit entries and the
 * tenant half of their self-profile. The access module answers it (its `AccessSummary` is one).
 */
export interface TenantOf {
  scope: 'system' | 'partner' | 'organization' | null;
  partnerId: string | null;
  orgId: string | null;
  roleId: string | null;
  /** Effective permissions (own role and its ancestors). */
  permissions: { resource: string; action: string }[];
}

/** The answer to a proven password when a second factor is due (the mfa module builds it). */
export interface SecondFactorChallenge {
  mfaRequired: true;
  mfaMethod: FactorName;
  tempToken: string;
  availableMethods: FactorName[];
}

/**
 * What identity needs from the modules above it (docs/architecture.md "How a lower module reaches a higher one"). Identity is below
 * access and mfa, so it cannot import them; the composition root (`src/compose.ts`) hands these
 * functions down once per process, when it installs identity.
 */
export interface IdentityPorts {
  /** access: the tenant a user acts in. */
  tenantOf(keel: Keel, user: Pick<UserRow, 'id' | 'isPlatformAdmin'>): Promise<TenantOf>;
  /** mfa: the factors a user has enrolled, primary first (kept with the live session for the Force MFA gate). */
  enrolledMethods(keel: Keel, user: UserRow): Promise<FactorName[]>;
  /** mfa: how many passkeys a user holds (the self-profile). */
  passkeyCount(db: Db, user: Pick<UserRow, 'id' | 'mfaEnabled'>): Promise<number>;
  /** mfa: the challenge a password sign-in must answer, or null when no second factor is due. */
  secondFactor(keel: Keel, user: UserRow): Promise<SecondFactorChallenge | null>;
}

/** The ports of a Keel, handed to identity when the composition root installs it (context.ts `installIdentity`). */
export function identityPorts(keel: Keel): IdentityPorts {
  return keel.modules.get('identity').ports;
}
