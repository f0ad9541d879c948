import { and, eq } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { requestLog, type RequestRef } from '../../platform/request-scope.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { constantTimeEqual, sha256Hex } from '../../platform/crypto.js';
import { AppError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { assignableRole } from '../access/roles.js';
import { roleFromGroups } from '../access/group-roles.js';
import { addOrganizationMember, addPartnerMember, assertNotLastFullAdmin, getMembership, setOrganizationMemberRole, setPartnerMemberAccess, type Membership, type OrgAccess } from '../access/service.js';
import { identityOf } from '../identity/context.js';
import { createAccount } from '../identity/accounts.js';
import { findUserByEmail, signIn, type RequestInfo, type TokenAnswer } from '../identity/service.js';
import { users } from '../identity/schema.js';
import { ssoIdentities, type AttributeMapping } from './schema.js';
import { assertMayConfigureProvider, ownerOf, type ProviderRow } from './providers.js';
import { accessContextFor, restricted } from '../access/scope.js';
import { SAML_ATTRIBUTE_URIS } from './presets.js';
import { SSO_EXCHANGE_PURPOSE, SSO_EXCHANGE_TTL_MS, SsoFailure } from './constants.js';
import type { SealedColumn } from '../../platform/reseal.js';
import { ssoEmailRefusal, verifiedDomainOwner } from '../domains/service.js';
import { mfaError } from '../mfa/errors.js';
import { ssoError } from './errors.js';

/** The profile an IdP asserted, after the provider's attribute mapping. */
export interface MappedProfile {
  externalId: string;
  email: string;
  name: string;
  groups: string[];
  /** Everything the IdP sent (UserInfo claims or SAML attributes), kept on the identity link. */
  raw: Record<string, unknown>;
  /** The IdP asserted a second factor for this login (`providerAssertedMfa`): the session starts `mfa: true`. */
  mfa?: boolean | undefined;
}

const str = (v: unknown): string | undefined => {
  if (typeof v === 'string' && v.trim() !== '') return v.trim();
  if (Array.isArray(v) && typeof v[0] === 'string' && v[0].trim() !== '') return v[0].trim();
  return undefined;
};
const list = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : typeof v === 'string' ? [v] : []);

/**
 * Maps claims with the provider's `attributeMapping` (docs/specification.md "Single sign-on: providers"): `email` and `name` required; a
 * missing name is built from firstName/lastName, else the email; `groups` an array of strings. For
 * SAML the URI table of the same section fills whatever the mapping left empty.
 */
export function mapClaims(mapping: AttributeMapping, claims: Record<string, unknown>, externalId: string, saml: boolean): MappedProfile {
  const pick = (field: keyof AttributeMapping): unknown => {
    const claim = mapping[field];
    if (claim && claims[claim] !== undefined) return claims[claim];
    if (!saml) return undefined;
    for (const a of SAML_ATTRIBUTE_URIS) if (a.field === field && claims[a.uri] !== undefined) return claims[a.uri];
    return undefined;
  };
  const email = str(pick('email'));
  if (!email || !/^[^@\s]+@[^@\s]+$/.test(email)) throw new SsoFailure('sso_error', 'the IdP sent no usable email claim');
  const first = str(pick('firstName'));
  const last = str(pick('lastName'));
  const name = str(pick('name')) ?? ([first, last].filter(Boolean).join(' ') || email);
  return { externalId, email: email.slice(0, 255), name: name.slice(0, 255), groups: list(pick('groups')), raw: claims };
}

/** `allowedDomains` (comma-separated, empty = any): the email's domain must be one of them, case-insensitively. */
export function domainAllowed(allowed: string, email: string): boolean {
  const domains = allowed.split(',').map((d) => d.trim().toLowerCase().replace(/^@/, '')).filter(Boolean);
  if (domains.length === 0) return true;
  const domain = email.slice(email.lastIndexOf('@') + 1).toLowerCase();
  return domains.includes(domain);
}

/** What a sign-in gives a person: a role and, at a partner, the organisations they reach. */
export interface Grant {
  roleId: string;
  orgAccess: OrgAccess;
  orgIds: string[];
}

/**
 * A partner provider's organisation access for a person (docs/decisions.md "Partner-level SSO"): the
 * winning group mapping's `orgIds` (`selected`), else the provider's own `orgAccess` and list.
 */
function accessOfGrant(p: ProviderRow, mapping: { orgIds?: string[] | undefined } | null): Pick<Grant, 'orgAccess' | 'orgIds'> {
  if (mapping?.orgIds !== undefined) return { orgAccess: 'selected', orgIds: mapping.orgIds };
  return { orgAccess: p.orgAccess, orgIds: p.orgAccess === 'selected' ? p.orgIds : [] };
}

/**
 * What the person's groups give through the provider's mappings: the one rule SSO and SCIM share
 * (`roleFromGroups`, docs/decisions.md "SCIM"), over the organisation's roles or the partner's; a
 * mapping whose role is no longer usable is skipped.
 */
async function mappedGrant(keel: Keel, p: ProviderRow, groups: string[], request: RequestRef): Promise<Grant | null> {
  const { mapping, skipped } = await roleFromGroups(keel, ownerOf(p), p.groupRoleMappings, groups);
  for (const s of skipped) requestLog(keel.log, request).warn({ providerId: p.id, roleId: s.roleId }, 'SSO group mapping names a role no longer usable; skipped');
  return mapping ? { roleId: mapping.roleId, ...accessOfGrant(p, mapping) } : null;
}

/** Whether a membership is of the provider's owner (its organisation, or its partner). */
function memberOfOwner(m: Membership | null, p: ProviderRow): boolean {
  return p.partnerId ? m?.kind === 'partner' && m.partnerId === p.partnerId : m?.kind === 'organization' && m.orgId === p.orgId;
}
const notMember = (p: ProviderRow) => new SsoFailure('no_org_access', `no membership of the provider ${p.partnerId ? 'partner' : 'organization'}`);

/**
 * Whose domain an address must be of: an organisation's provider follows `ssoEmailRefusal`; a
 * partner's provider signs in only addresses of a domain the partner itself verified (docs/decisions.md
 * "Partner-level SSO"), so it can never sign in another partner's or an organisation's people by address.
 */
async function domainRefusal(keel: Keel, p: ProviderRow, email: string, opts: { existingAccount: boolean; emailVerified: boolean | null }): Promise<string | null> {
  if (!p.partnerId) return ssoEmailRefusal(keel.db, { kind: 'org', orgId: p.orgId ?? '', partnerId: null }, email, opts);
  const owner = await verifiedDomainOwner(keel.db, email);
  if (!owner) return 'the email domain is not verified by the partner';
  if (owner.orgId || owner.partnerId !== p.partnerId) return `the email domain is verified by ${owner.orgId ? 'an organization' : 'another partner'}`;
  return null;
}

export interface IdpTokens {
  accessToken?: string | undefined;
  refreshToken?: string | undefined;
  expiresAt?: Date | null | undefined;
}

const tokenAad = (providerId: string, userId: string, which: string) => `sso_identities.${which}:${providerId}:${userId}`;

/** The sealed columns of identity links, for `keel secrets reseal` (platform/reseal.ts). */
export const IDENTITY_SEALED: SealedColumn[] = (['access_token', 'refresh_token'] as const).map((which) => ({
  table: 'sso_identities',
  column: which,
  keys: ['id', 'provider_id', 'user_id'],
  context: (r: Record<string, string>) => tokenAad(r.provider_id ?? '', r.user_id ?? '', which),
}));

/**
 * The IdP's word on the address (OIDC `email_verified`): an address it marks unverified signs in and
 * provisions no one (an IdP that lets a user type any address would otherwise make them anyone of
 * that address). `true`/`"true"` is verified, `false`/`"false"` is not; the claim speaks only for the
 * standard `email` claim, so with another mapped email claim, or none sent (Entra ID, SAML), it is
 * absent (`null`).
 */
export function emailVerifiedClaim(mapping: AttributeMapping, claims: Record<string, unknown>): boolean | null {
  if (mapping.email !== 'email') return null;
  const v = claims.email_verified;
  if (v === true || v === 'true') return true;
  if (v === false || v === 'false') return false;
  return null;
}

/**
 * Refuses an address the IdP marked unverified (`sso_error`, audited by the caller as a failed
 * sign-in). Where the IdP says nothing (`null`: Entra ID, SAML), the organisation's verified domains
 * decide: that rule belongs here, after this check and before any account is looked up.
 */
export function assertEmailNotUnverified(emailVerified: boolean | null): void {
  if (emailVerified === false) throw new SsoFailure('sso_error', 'email_not_verified: the IdP marks the email as unverified');
}

/**
 * docs/specification.md "Single sign-on: the login flow" steps 7-9 for a verified profile: allowed domain, user by email (case-insensitive), JIT
 * provisioning with `defaultRoleId` (or the mapped group's role), organisation membership, group to
 * role mapping, the identity link; then a single-use exchange code (2 minutes, any instance).
 * Provisioning, the role change and the identity link commit together or not at all
 * (`provisionAndLink`): a refused link leaves no account and no role change.
 */
export async function completeSsoLogin(keel: Keel, p: ProviderRow, profile: MappedProfile, idp: IdpTokens, info: AuditRequestInfo, binding: string | null = null, emailVerified: boolean | null = null): Promise<string> {
  const trial = p.status === 'testing';
  try {
    assertEmailNotUnverified(emailVerified);
    if (!domainAllowed(p.allowedDomains, profile.email)) throw new SsoFailure('domain_not_allowed', 'email domain not allowed');
    const fromGroups = await mappedGrant(keel, p, profile.groups, info);
    const user = await findUserByEmail(keel.db, profile.email);
    // Verified domains decide whose provider may provision or link an address (docs/decisions.md "Verified domains and SSO step-up").
    const refused = await domainRefusal(keel, p, profile.email, { existingAccount: Boolean(user), emailVerified });
    if (refused) throw new SsoFailure('domain_not_allowed', refused);
    if (trial) return await completeTrial(keel, p, profile, idp, info, binding, user ?? null, fromGroups);
    let newGrant: Grant | null = null;
    if (!user) {
      if (!p.autoProvision) throw new SsoFailure('user_not_found', 'no account and autoProvision is off');
      newGrant = fromGroups ?? (p.defaultRoleId ? { roleId: p.defaultRoleId, ...accessOfGrant(p, null) } : null);
      if (!newGrant || !(await assignableRole(keel.db, newGrant.roleId, ownerOf(p)))) throw new SsoFailure('default_role_required', 'no usable role for a new user');
    } else {
      if (user.status !== 'active') throw new SsoFailure('sso_error', `account is ${user.status}`).about({ userId: user.id });
      // Never another tenant's person: an organisation's member (or a platform administrator) with the address of a partner technician is refused, audited.
      if (!memberOfOwner(await getMembership(keel, user.id), p)) throw notMember(p).about({ userId: user.id });
    }
    const { account, roleChanged } = await provisionAndLink(keel, p, profile, idp, info, user ?? null, fromGroups, newGrant);
    if (roleChanged) await identityOf(keel).sessions.userChanged(account.id);
    const { token } = await keel.singleUse.create(keel.db, {
      purpose: SSO_EXCHANGE_PURPOSE,
      ttlMs: SSO_EXCHANGE_TTL_MS,
      subjectId: account.id,
      data: { providerId: p.id, orgId: p.orgId, partnerId: p.partnerId, type: p.type, binding, mfa: profile.mfa === true },
    });
    return token;
  } catch (err) {
    if (err instanceof SsoFailure) err.aboutProvider(p);
    throw err;
  }
}

type UserRow = typeof users.$inferSelect;

/**
 * Whether an account may manage the organisation's SSO, as the provider write routes decide it: an
 * active member of the organisation with `organizations:write`, not restricted to sites or groups,
 * covering every member and every role the provider grants (`assertMayConfigureProvider`).
 */
async function managesSso(keel: Keel, p: ProviderRow, user: UserRow): Promise<boolean> {
  if (user.status !== 'active') return false;
  const m = await getMembership(keel, user.id);
  if (!memberOfOwner(m, p)) return false;
  // A partner's provider: as its write routes, a technician with every organisation of the partner.
  if (m?.kind === 'partner' && m.orgAccess !== 'all') return false;
  const access = await accessContextFor(keel, { kind: 'user', userId: user.id, email: user.email, sessionId: null, mfa: false, isPlatformAdmin: user.isPlatformAdmin, apiKeyId: null });
  if (!access.can('organizations', 'write') || restricted(access)) return false;
  try {
    await assertMayConfigureProvider(keel.db, access, ownerOf(p), p);
    return true;
  } catch (err) {
    if (err instanceof AppError) return false;
    throw err;
  }
}

/**
 * A trial sign-in through a provider in `testing` (docs/decisions.md "SSO that explains itself"):
 * only someone who may manage the organisation's SSO completes it, as an existing member; nobody is
 * provisioned and no role changes (the role the group mappings would give is audited instead). The
 * identity link is written as at any sign-in. Accepted trials are audited `sso.login.trial`
 * (refused ones by the caller, the same action with `result: 'failure'`).
 */
async function completeTrial(keel: Keel, p: ProviderRow, profile: MappedProfile, idp: IdpTokens, info: AuditRequestInfo, binding: string | null, user: UserRow | null, fromGroups: Grant | null): Promise<string> {
  if (!user || !(await managesSso(keel, p, user))) {
    const failure = new SsoFailure('provider_testing', user ? 'trial sign-in by someone who may not manage the organization SSO' : 'trial sign-in by an address without an account');
    throw user ? failure.about({ userId: user.id }) : failure;
  }
  const { account } = await provisionAndLink(keel, p, profile, idp, info, user, null, null);
  await writeAudit(keel.db, { ...info, actor: { type: 'user', id: account.id, email: account.email } }, {
    action: 'sso.login.trial',
    orgId: p.orgId,
    partnerId: p.partnerId,
    target: { type: 'user', id: account.id },
    details: { providerId: p.id, groups: profile.groups.slice(0, 50), mappedRoleId: fromGroups?.roleId ?? null, ...(p.partnerId && fromGroups ? { mappedOrgAccess: fromGroups.orgAccess, mappedOrgIds: fromGroups.orgIds } : {}) },
  });
  const { token } = await keel.singleUse.create(keel.db, {
    purpose: SSO_EXCHANGE_PURPOSE,
    ttlMs: SSO_EXCHANGE_TTL_MS,
    subjectId: account.id,
    data: { providerId: p.id, orgId: p.orgId, partnerId: p.partnerId, type: p.type, binding, mfa: profile.mfa === true, trial: true },
  });
  return token;
}

/**
 * One transaction: the new account (with its membership and `user.sso.provision` entry) or the
 * existing member's group-mapped role, then the identity link. Any refusal (the link's subject, a
 * membership gone meanwhile) rolls all of it back.
 */
async function provisionAndLink(
  keel: Keel,
  p: ProviderRow,
  profile: MappedProfile,
  idp: IdpTokens,
  info: AuditRequestInfo,
  existing: UserRow | null,
  fromGroups: Grant | null,
  newGrant: Grant | null,
): Promise<{ account: UserRow; roleChanged: boolean }> {
  const system: AuditRequestInfo = { ...info, actor: { type: 'system' } };
  const owner = ownerOf(p);
  const scope = { orgId: p.orgId, partnerId: p.partnerId };
  return transaction(keel.db, async (tx) => {
    let account = existing;
    let roleChanged = false;
    if (!account) {
      const grant = newGrant;
      if (!grant) throw new SsoFailure('default_role_required', 'no usable role for a new user');
      const now = clock.now();
      const created = await createAccount(tx, { email: profile.email, name: profile.name, passwordHash: null, status: 'active', createdAt: now, updatedAt: now });
      if (!created) throw new SsoFailure('sso_error', 'account created concurrently');
      if ('partnerId' in owner) await addPartnerMember(tx.db, { partnerId: owner.partnerId, userId: created.id, roleId: grant.roleId, orgAccess: grant.orgAccess, orgIds: grant.orgIds });
      else await addOrganizationMember(tx.db, { orgId: owner.orgId, userId: created.id, roleId: grant.roleId });
      await writeAudit(tx.db, { ...system, actor: { type: 'user', id: created.id, email: created.email } }, {
        action: 'user.sso.provision',
        ...scope,
        target: { type: 'user', id: created.id },
        details: { providerId: p.id, roleId: grant.roleId, fromGroupMapping: fromGroups !== null, ...('partnerId' in owner ? { orgAccess: grant.orgAccess, orgIds: grant.orgIds } : {}) },
      });
      account = created;
    } else {
      const target = account;
      const m = await getMembership(tx.db, target.id);
      if (!m || !memberOfOwner(m, p)) throw notMember(p).about({ userId: target.id });
      const accessChanged = m.kind === 'partner' && fromGroups !== null && (fromGroups.orgAccess !== m.orgAccess || JSON.stringify([...fromGroups.orgIds].sort()) !== JSON.stringify([...m.orgIds].sort()));
      if (fromGroups && (fromGroups.roleId !== m.roleId || accessChanged)) {
        let kept = false;
        try {
          await assertNotLastFullAdmin(tx.db, owner, target.id, fromGroups.roleId);
        } catch (err) {
          if (!(err instanceof AppError && err.code === 'last_admin')) throw err;
          requestLog(keel.log, info).warn({ providerId: p.id, userId: target.id }, 'SSO group mapping would remove the last full administrator; role kept');
          kept = true;
        }
        if (!kept) {
          if ('partnerId' in owner) await setPartnerMemberAccess(tx.db, owner.partnerId, target.id, fromGroups);
          else await setOrganizationMemberRole(tx.db, owner.orgId, target.id, fromGroups.roleId);
          await writeAudit(tx.db, system, {
            action: 'user.role.assign',
            ...scope,
            target: { type: 'user', id: target.id },
            details: {
              from: m.roleId,
              to: fromGroups.roleId,
              source: 'sso_group_mapping',
              providerId: p.id,
              ...(m.kind === 'partner' ? { fromOrgAccess: m.orgAccess, toOrgAccess: fromGroups.orgAccess, orgIds: fromGroups.orgIds } : {}),
            },
          });
          roleChanged = true;
        }
      }
    }
    try {
      await linkIdentity(keel, tx.db, p, account.id, profile, idp);
    } catch (err) {
      if (err instanceof SsoFailure && existing) err.about({ userId: existing.id });
      throw err;
    }
    return { account, roleChanged };
  });
}

/**
 * Creates or updates the identity link (profile, sealed IdP tokens, last login) inside the caller's
 * transaction. The link is (provider, IdP subject) and is never moved: an account already linked to
 * this provider under another subject is refused (`identity_subject_changed`), and so is a subject
 * already linked to another account (`identity_subject_taken`); the caller audits both.
 */
async function linkIdentity(keel: Keel, db: Db, p: ProviderRow, userId: string, profile: MappedProfile, idp: IdpTokens): Promise<void> {
  const seal = (v: string | undefined, which: string) => (v ? keel.secrets.sealer.seal(v, tokenAad(p.id, userId, which)) : null);
  const now = clock.now();
  const externalId = profile.externalId.slice(0, 255);
  const [linked] = await db
    .select({ externalId: ssoIdentities.externalId })
    .from(ssoIdentities)
    .where(and(eq(ssoIdentities.providerId, p.id), eq(ssoIdentities.userId, userId)))
    .for('update');
  if (linked && linked.externalId !== externalId) {
    throw new SsoFailure('sso_error', 'identity_subject_changed: the account is linked to this provider under another subject').about({ userId, refusedSubject: externalId });
  }
  const values = {
    email: profile.email,
    profile: profile.raw,
    accessToken: seal(idp.accessToken, 'access_token'),
    refreshToken: seal(idp.refreshToken, 'refresh_token'),
    tokenExpiresAt: idp.expiresAt ?? null,
    lastLoginAt: now,
    updatedAt: now,
  };
  let written: { id: string }[];
  try {
    // The update applies only to the same subject: a link made by a parallel sign-in under another
    // subject (after the check above) leaves no row written, and this sign-in is refused too.
    written = await db
      .insert(ssoIdentities)
      .values({ ...values, externalId, userId, providerId: p.id, createdAt: now })
      .onConflictDoUpdate({ target: [ssoIdentities.providerId, ssoIdentities.userId], set: values, setWhere: eq(ssoIdentities.externalId, externalId) })
      .returning({ id: ssoIdentities.id });
  } catch (err) {
    // The IdP subject is linked to another account of this provider (its email changed at the IdP).
    const code = (err as { code?: string; cause?: { code?: string } }).code ?? (err as { cause?: { code?: string } }).cause?.code;
    // (No userId here: when the account was made by this sign-in it is rolled back with the link.)
    throw new SsoFailure('sso_error', `identity_subject_taken: identity link refused (${code ?? 'error'})`).about({ refusedSubject: externalId });
  }
  if (written.length === 0) {
    throw new SsoFailure('sso_error', 'identity_subject_changed: the account was linked to this provider under another subject meanwhile').about({ userId, refusedSubject: externalId });
  }
}

/** A browser's exchange (fetch metadata or Origin present): the binding cookie it carries, if any. */
export interface BrowserExchange {
  cookie: string | undefined;
}

function bindingMatches(stored: unknown, cookie: string | undefined): boolean {
  if (typeof stored !== 'string' || !cookie) return false;
  return constantTimeEqual(sha256Hex(cookie), stored);
}

export const invalidExchangeCode = () => mfaError('invalid_code', { message: 'The code is invalid or expired' });

/** `POST /sso/exchange`: consumes the code once (any instance) and starts the session, audited `user.login` with the provider. */
export async function exchangeCode(keel: Keel, code: string, info: RequestInfo, browser: BrowserExchange | null = null): Promise<TokenAnswer> {
  const record = await keel.singleUse.consume(keel.db, SSO_EXCHANGE_PURPOSE, code);
  if (!record?.subjectId) throw invalidExchangeCode();
  const [user] = await keel.db.select().from(users).where(eq(users.id, record.subjectId));
  if (user?.status !== 'active') throw invalidExchangeCode();
  if (browser && !bindingMatches(record.data.binding, browser.cookie)) {
    // A browser exchanging a code its own login did not produce (login CSRF): the code is spent, nobody signs in.
    await writeAudit(keel.db, { ...info, actor: { type: 'anonymous' } }, {
      action: 'user.sso.exchange_refused',
      orgId: typeof record.data.orgId === 'string' ? record.data.orgId : null,
      partnerId: typeof record.data.partnerId === 'string' ? record.data.partnerId : null,
      target: { type: 'user', id: user.id },
      details: { providerId: record.data.providerId, reason: browser.cookie ? 'binding_mismatch' : 'binding_cookie_missing' },
    });
    throw ssoError('sso_binding_mismatch');
  }
  // mfa: true only when the provider asserted a second factor at the IdP (sso/mfa.ts); else a Keel factor steps the session up.
  const mfa = record.data.mfa === true;
  return signIn(keel, user, { ...info, actor: { type: 'user', id: user.id, email: user.email } }, {
    mfa,
    method: 'sso',
    details: { providerId: record.data.providerId, providerType: record.data.type, idpMfa: mfa, ...(record.data.trial === true ? { trial: true } : {}) },
  });
}
