import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { identityError } from './errors.js';

/**
 * Who manages an account's email, name and status outside Keel (`'scim'`: an organisation's
 * directory), or null. A module above identity answers it (the SCIM module), registered when it is
 * installed (src/compose.ts), so identity never imports it.
 */
export type AccountManager = (db: Db, userId: string) => Promise<string | null>;

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
    const by = await manager(db, userId);
    if (by) throw identityError('account_managed', { details: { managedBy: by, fields: fields.filter((f) => MANAGED_FIELDS.has(f)) } });
  }
}
