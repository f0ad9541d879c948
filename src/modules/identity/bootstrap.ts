import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import type { Logger } from '../../platform/logger.js';
import { ConfigError } from '../../config.js';
import { AppError } from '../../platform/http/errors.js';
import { users } from './schema.js';
import { assertStrongPassword, hashPassword } from './passwords.js';
import { writeAudit } from '../audit/service.js';
import { clock } from '../../platform/clock.js';

export class AdminExistsError extends Error {
  override name = 'AdminExistsError';
}

/** Serialises every creation of a platform administrator (CLI, first start) across processes. */
const ADMIN_CREATE_LOCK = 7345002;

/** What a fresh installation prints until an administrator exists. */
export const NO_ADMIN_HINT =
  'No platform administrator exists yet: stop the server and run `npx keel admin create --email you@example.com` (asks for the password), ' +
  'or start it once with ADMIN_EMAIL and ADMIN_PASSWORD set';

async function platformAdminExists(db: Db): Promise<boolean> {
  const admins = await db.select({ id: users.id }).from(users).where(eq(users.isPlatformAdmin, true)).limit(1);
  return admins.length > 0;
}

/**
 * Creates a platform administrator (system scope, implicit `*:*`). Used by first start with
 * ADMIN_EMAIL/ADMIN_PASSWORD and by `keel admin create`. Never from a default password.
 * `onlyIfNoAdmin`: create nothing (answer null) when any platform administrator exists, decided
 * under the same lock, so processes starting together create one.
 */
export async function createPlatformAdmin(
  db: Db,
  input: { email: string; password: string; name?: string | undefined },
  opts: { onlyIfNoAdmin?: boolean; passwordField?: string } = {},
): Promise<string | null> {
  await assertStrongPassword(input.password, [input.email, input.name], opts.passwordField);
  const passwordHash = await hashPassword(input.password);
  const email = input.email.trim();
  return db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(${sql.raw(String(ADMIN_CREATE_LOCK))})`);
    if (opts.onlyIfNoAdmin && (await platformAdminExists(tx))) return null;
    const existing = await tx.select({ id: users.id }).from(users).where(sql`lower(${users.email}) = lower(${email})`);
    if (existing.length > 0) throw new AdminExistsError(`A user with email ${email} already exists`);
    const now = clock.now();
    const [row] = await tx
      .insert(users)
      .values({ email, name: input.name ?? 'Platform Administrator', passwordHash, isPlatformAdmin: true, status: 'active', passwordChangedAt: now })
      .returning({ id: users.id });
    if (!row) throw new Error('insert returned nothing');
    await writeAudit(tx, { actor: { type: 'system' } }, { action: 'user.create', target: { type: 'user', id: row.id }, details: { platformAdmin: true } });
    return row.id;
  });
}

/**
 * Every start: with ADMIN_EMAIL/ADMIN_PASSWORD, create the first platform administrator when none
 * exists (a weak ADMIN_PASSWORD stops start-up naming the variable); without them, and without any
 * administrator, log how to create one. config.ts already refused one of the two without the other.
 */
export async function bootstrapAdmin(db: Db, log: Logger, email: string | undefined, password: string | undefined): Promise<void> {
  if (await platformAdminExists(db)) {
    if (email) log.debug('ADMIN_EMAIL is ignored: a platform administrator exists');
    return;
  }
  if (!email || !password) {
    log.warn(NO_ADMIN_HINT);
    return;
  }
  try {
    const id = await createPlatformAdmin(db, { email, password }, { onlyIfNoAdmin: true, passwordField: 'ADMIN_PASSWORD' });
    if (id) log.info({ email }, 'created the first platform administrator from ADMIN_EMAIL');
  } catch (err) {
    if (err instanceof AdminExistsError) {
      log.warn({ email }, `ADMIN_EMAIL names an existing account that is not an administrator; no administrator created. ${NO_ADMIN_HINT}`);
    } else if (err instanceof AppError && Array.isArray(err.details?.fields)) {
      const [field] = err.details.fields as { path: string; message: string }[];
      throw new ConfigError(`Invalid configuration: ADMIN_PASSWORD ${field?.message ?? 'is not accepted'}`);
    } else {
      throw err;
    }
  }
}
