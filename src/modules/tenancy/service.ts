/*
 * The tenant records (partners, organisations, sites, device groups) and their security settings: the
 * lowest domain module but audit, used by identity (partner registration), mfa (the policy) and the
 * administration in modules/orgs, which decides who may see and change them.
 */
import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { clock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/client.js';
import { deviceGroups, organizations, partners, sites, type TenantSettings } from './schema.js';

type PartnerRow = typeof partners.$inferSelect;
type OrgRow = typeof organizations.$inferSelect;
type SiteRow = typeof sites.$inferSelect;
type GroupRow = typeof deviceGroups.$inferSelect;

export interface Paging {
  page: number;
  limit: number;
}

/** A partner slug: lowercase letters, digits and inner hyphens, 1-63 characters (docs/decisions.md "Partner-level SSO"). */
export const PARTNER_SLUG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** The slug a name gives (as the migration derived them): lowercase, runs of other characters made one hyphen, at most 50 characters. */
export function slugFromName(name: string): string {
  const base = name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 50).replace(/-+$/, '');
  return base || 'partner';
}

/**
 * Creates a partner. Runs in the caller's transaction. With a `slug` given, null when another partner
 * holds it (the caller answers 409); without one, a slug derived from the name, with a random suffix
 * while the derived one is taken. The unique index decides (`on conflict do nothing`), so racing
 * creates cannot both hold a slug and the caller's transaction is never aborted by the conflict.
 */
export async function createPartner(db: Db, input: { name: string; settings?: TenantSettings }): Promise<PartnerRow>;
export async function createPartner(db: Db, input: { name: string; slug: string | undefined; settings?: TenantSettings }): Promise<PartnerRow | null>;
export async function createPartner(db: Db, input: { name: string; slug?: string | undefined; settings?: TenantSettings }): Promise<PartnerRow | null> {
  const now = clock.now();
  const base = slugFromName(input.name);
  for (let attempt = 0; attempt < 5; attempt++) {
    const slug = input.slug ?? (attempt === 0 ? base : `${base}-${randomBytes(4).toString('hex')}`);
    const [row] = await db
      .insert(partners)
      .values({ name: input.name, slug, settings: input.settings ?? {}, createdAt: now, updatedAt: now })
      .onConflictDoNothing({ target: partners.slug })
      .returning();
    if (row) return row;
    if (input.slug !== undefined) return null;
  }
  throw new Error('partner insert: no free slug');
}

/** Creates an organisation, optionally under a partner. Runs in the caller's transaction. */
export async function createOrganization(db: Db, input: { name: string; partnerId?: string | null; settings?: TenantSettings }): Promise<OrgRow> {
  const now = clock.now();
  const [row] = await db
    .insert(organizations)
    .values({ name: input.name, partnerId: input.partnerId ?? null, settings: input.settings ?? {}, createdAt: now, updatedAt: now })
    .returning();
  if (!row) throw new Error('organization insert returned nothing');
  return row;
}

// ---------------------------------------------------------------------------------------------
// Settings

export interface SecurityPolicy {
  requireMfa: boolean;
  allowedMfaMethods: { totp: boolean; sms: boolean; passkey: boolean };
}

/** Deep-merges a settings patch: keys given replace, keys left out stay. */
export function mergeSettings(current: TenantSettings, patch: TenantSettings): TenantSettings {
  const out: TenantSettings = { ...current };
  if (patch.security) {
    const cur = current.security ?? {};
    const next = { ...cur, ...patch.security };
    if (patch.security.allowedMfaMethods) next.allowedMfaMethods = { ...(cur.allowedMfaMethods ?? {}), ...patch.security.allowedMfaMethods };
    out.security = next;
  }
  return out;
}

function policyOf(s: TenantSettings | undefined | null): SecurityPolicy {
  const sec = s?.security ?? {};
  const m = sec.allowedMfaMethods ?? {};
  return { requireMfa: sec.requireMfa ?? false, allowedMfaMethods: { totp: m.totp ?? true, sms: m.sms ?? true, passkey: m.passkey ?? true } };
}

/** The stricter of two policies wins (docs/decisions.md "Endpoints Keel adds"): MFA required if either requires it; a method allowed only if both allow it. */
function stricter(a: SecurityPolicy, b: SecurityPolicy): SecurityPolicy {
  return {
    requireMfa: a.requireMfa || b.requireMfa,
    allowedMfaMethods: {
      totp: a.allowedMfaMethods.totp && b.allowedMfaMethods.totp,
      sms: a.allowedMfaMethods.sms && b.allowedMfaMethods.sms,
      passkey: a.allowedMfaMethods.passkey && b.allowedMfaMethods.passkey,
    },
  };
}

/**
 * The security policy that applies to a member of an organisation or partner: `settings.security` of
 * the organisation and its partner, the stricter winning. For the MFA module (requireMfa, allowed methods).
 */
export async function effectiveSecurity(db: Db, where: { orgId: string } | { partnerId: string }): Promise<SecurityPolicy> {
  if ('orgId' in where) {
    const [row] = await db
      .select({ org: organizations.settings, partner: partners.settings })
      .from(organizations)
      .leftJoin(partners, eq(partners.id, organizations.partnerId))
      .where(eq(organizations.id, where.orgId));
    return stricter(policyOf(row?.org), policyOf(row?.partner));
  }
  const [row] = await db.select({ settings: partners.settings }).from(partners).where(eq(partners.id, where.partnerId));
  return policyOf(row?.settings);
}

// ---------------------------------------------------------------------------------------------
// Views

export const partnerView = (p: PartnerRow) => ({
  id: p.id, name: p.name, slug: p.slug, settings: p.settings, createdAt: p.createdAt.toISOString(), updatedAt: p.updatedAt.toISOString(),
});
export const orgView = (o: OrgRow) => ({
  id: o.id, partnerId: o.partnerId, name: o.name, settings: o.settings, createdAt: o.createdAt.toISOString(), updatedAt: o.updatedAt.toISOString(),
});
export const siteView = (s: SiteRow) => ({ id: s.id, orgId: s.orgId, name: s.name, createdAt: s.createdAt.toISOString(), updatedAt: s.updatedAt.toISOString() });
export const groupView = (g: GroupRow) => ({
  id: g.id, orgId: g.orgId, siteId: g.siteId, name: g.name, createdAt: g.createdAt.toISOString(), updatedAt: g.updatedAt.toISOString(),
});

