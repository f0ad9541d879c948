import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../platform/db/client.js';
import type { Logger } from '../../platform/logger.js';
import { users } from './schema.js';
import { assertStrongPassword, hashPassword } from './passwords.js';
import { writeAudit } from '../audit/service.js';
import { clock } from '../../platform/clock.js';

export class AdminExistsError extends Error {
  override name = 'AdminExistsError';
}

/**
 * Creates a platform administrator (system scope, implicit `*:*`). Used by first start with
 * ADMIN_EMAIL/ADMIN_PASSWORD and by `keel admin create`. Never from a default password.
 */
export async function createPlatformAdmin(db: Db, input: { email: string; password: string; name?: string | undefined }): Promise<string> {
  await assertStrongPassword(input.password, [input.email, input.name]);
  const passwordHash = await hashPassword(input.password);
  const email = input.email.trim();
  return db.transaction(async (tx) => {
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

/** First start: create the administrator from ADMIN_EMAIL/ADMIN_PASSWORD when no platform admin exists yet. */
export async function bootstrapAdmin(db: Db, log: Logger, email: string | undefined, password: string | undefined): Promise<void> {
  if (!email || !password) return;
  const admins = await db.select({ id: users.id }).from(users).where(eq(users.isPlatformAdmin, true)).limit(1);
  if (admins.length > 0) return;
  try {
    await createPlatformAdmin(db, { email, password });
    log.info({ email }, 'created the first platform administrator from ADMIN_EMAIL');
  } catch (err) {
    if (err instanceof AdminExistsError) log.warn({ email }, 'ADMIN_EMAIL names an existing user; no administrator created');
    else throw err;
  }
}
