import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { identityError } from './errors.js';

/**
 * Who manages the email, name and status of some accounts outside Keel (`'scim'`: an organisation's
 * directory): of `userIds`, those it manages, each with its name. A module above identity answers it
 * (the SCIM module), registered when it is installed (src/compose.ts), so identity never imports it.
 */
export type AccountManager = (db: Db, userIds: readonly string[]) => Promise<Map<string, string>>;

export function registerAccountManager(keel: Keel, manager: AccountManager): void {
  keel.modules.get('identity').accountManagers.push(manager);
}

/** The fields a directory owns (docs/decisions.md "SCIM provisioning"). */
const MANAGED_FIELDS = new Set(['email', 'name', 'status']);

/**
 * Keel's own API changing `fields` of an account: refused with 409 `account_managed` when one of
 * them is managed elsewhere, unless a platform administrator asks (the directory is the source of
 * truth; an operator can still act in an emergency).
 */
export async function assertAccountChangeable(keel: Keel, db: Db, userId: string, fields: readonly string[], byPlatformAdmin: boolean): Promise<void> {
  if (byPlatformAdmin || !fields.some((f) => MANAGED_FIELDS.has(f))) return;
  for (const manager of keel.modules.get('identity').accountManagers) {
    const by = (await manager(db, [userId])).get(userId);
    if (by) throw identityError('account_managed', { details: { managedBy: by, fields: fields.filter((f) => MANAGED_FIELDS.has(f)) } });
  }
}

/** Of `userIds`, who manages each account managed outside Keel (one query per manager, not per user). */
export async function managersOf(keel: Keel, db: Db, userIds: readonly string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  if (userIds.length === 0) return out;
  for (const manager of keel.modules.get('identity').accountManagers) {
    for (const [id, by] of await manager(db, userIds)) if (!out.has(id)) out.set(id, by);
  }
  return out;
}

/** Each user view with `managedBy`: who manages the account outside Keel (`scim`), or null. */
export async function withManagedBy<T extends { id: string }>(keel: Keel, views: T[]): Promise<(T & { managedBy: string | null })[]> {
  const managed = await managersOf(keel, keel.db, views.map((v) => v.id));
  return views.map((v) => ({ ...v, managedBy: managed.get(v.id) ?? null }));
}
