import type { Keel } from '../../keel.js';
import { transaction } from '../../platform/db/transaction.js';
import { writeAudit } from '../audit/service.js';
import { createPartner } from '../tenancy/service.js';
import { identityOf } from '../identity/context.js';
import { assertStrongPassword, hashPassword } from '../identity/passwords.js';
import { insertUser, signIn, type RequestInfo, type TokenAnswer } from '../identity/service.js';
import { addPartnerMember } from '../access/service.js';
import { SYSTEM_ROLES } from '../access/catalog.js';

/*
 * `POST /auth/register-partner` (docs/specification.md "Users and invitations"): a partner, its first user and that user's Partner Admin
 * membership in one transaction. It sits here, above identity and access, because it joins the two
 * (docs/architecture.md); `POST /auth/register` (a user without a tenant) stays in identity.
 */

/** Creates a partner, its first user and that user's Partner Admin membership in one transaction. */
export async function registerPartner(
  keel: Keel,
  input: { partnerName: string; email: string; password: string; name: string },
  info: RequestInfo,
): Promise<TokenAnswer & { partner: { id: string; name: string; createdAt: string } }> {
  await identityOf(keel).limits.registerPartner.consume(info.ip ?? 'unknown');
  await assertStrongPassword(input.password, [input.email, input.name, input.partnerName]);
  const passwordHash = await hashPassword(input.password);
  const { user, partner } = await transaction(keel.db, async (tx) => {
    const created = await insertUser(tx, { email: input.email, name: input.name, passwordHash });
    const p = await createPartner(tx.db, { name: input.partnerName });
    await addPartnerMember(tx.db, { partnerId: p.id, userId: created.id, roleId: SYSTEM_ROLES.partnerAdmin.id, orgAccess: 'all' });
    await writeAudit(tx.db, { ...info, actor: { type: 'user', id: created.id, email: created.email } }, {
      action: 'partner.register',
      partnerId: p.id,
      target: { type: 'partner', id: p.id },
    });
    return { user: created, partner: p };
  });
  const tokens = await signIn(keel, user, info, { mfa: false, method: 'registration' });
  return { ...tokens, partner: { id: partner.id, name: partner.name, createdAt: partner.createdAt.toISOString() } };
}
