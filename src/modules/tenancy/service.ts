import type { Db } from '../../platform/db/client.js';
import { organizations, partners } from './schema.js';

/** Creates a partner. Runs in the caller's transaction. */
export async function createPartner(db: Db, input: { name: string }): Promise<typeof partners.$inferSelect> {
  const [row] = await db.insert(partners).values({ name: input.name }).returning();
  if (!row) throw new Error('partner insert returned nothing');
  return row;
}

/** Creates an organisation, optionally under a partner. Runs in the caller's transaction. */
export async function createOrganization(db: Db, input: { name: string; partnerId?: string | null }): Promise<typeof organizations.$inferSelect> {
  const [row] = await db.insert(organizations).values({ name: input.name, partnerId: input.partnerId ?? null }).returning();
  if (!row) throw new Error('organization insert returned nothing');
  return row;
}
