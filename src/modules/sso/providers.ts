import { X509Certificate } from 'node:crypto';
import { and, count, desc, eq, inArray } from 'drizzle-orm';
import type { Keel } from '../../keel.js';
import { requestLog, type RequestRef } from '../../platform/request-scope.js';
import type { Db } from '../../platform/db/client.js';
import { transaction } from '../../platform/db/transaction.js';
import { clock } from '../../platform/clock.js';
import { newId } from '../../platform/db/columns.js';
import { singleUseRecords } from '../../platform/db/schema.js';
import { notFound, validationError, platformError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { assignableRole } from '../access/roles.js';
import { fullOrgAccessRequired, reachOrg, type AccessContext } from '../access/scope.js';
import { assertCoversTenantMembers } from '../users/service.js';
import { organizations, partners } from '../tenancy/schema.js';
import { partnerUsers } from '../access/schema.js';
import { DEFAULT_MAPPING, DEFAULT_SCOPES, findPreset } from './presets.js';
import { ssoProviders, type AttributeMapping, type GroupRoleMapping } from './schema.js';
import { discover, discoveryFailure, probeClientCredentials, type CredentialCheck } from './oidc.js';
import { CALLBACK_PATH, SSO_LOGIN_PURPOSE } from './constants.js';
import { activeCacheOf } from './active-cache.js';
import type { SealedColumn } from '../../platform/reseal.js';
import { ssoError } from './errors.js';

export type ProviderRow = typeof ssoProviders.$inferSelect;

function one<T>(row: T | undefined): T {
  if (row === undefined) throw new Error('sso_providers: the statement returned no row');
  return row;
}
export type ProviderStatus = ProviderRow['status'];

/** Whose provider: an organisation's or a partner's (docs/decisions.md "Partner-level SSO"). */
export type ProviderOwner = { orgId: string } | { partnerId: string };

/** The owner of a stored provider (exactly one of its two columns is set). */
export function ownerOf(p: Pick<ProviderRow, 'orgId' | 'partnerId'>): ProviderOwner {
  if (p.partnerId) return { partnerId: p.partnerId };
  if (p.orgId) return { orgId: p.orgId };
  throw new Error('sso_providers: a provider without an owner');
}

/** The key of the owner in the active-provider cache: an organisation's id, or `partner:<id>`. */
export const ownerKey = (owner: ProviderOwner): string => ('orgId' in owner ? owner.orgId : `partner:${owner.partnerId}`);
const ownerCondition = (owner: ProviderOwner) => ('orgId' in owner ? eq(ssoProviders.orgId, owner.orgId) : eq(ssoProviders.partnerId, owner.partnerId));
/** The audit scope of a provider's entries. */
const auditScope = (access: AccessContext, p: Pick<ProviderRow, 'orgId' | 'partnerId'>) => ({ partnerId: p.partnerId ?? access.partnerId, orgId: p.orgId });

export interface ProviderView {
  id: string;
  orgId: string | null;
  partnerId: string | null;
  name: string;
  type: 'oidc' | 'saml';
  status: ProviderStatus;
  preset: string | null;
  issuer: string | null;
  clientId: string | null;
  hasClientSecret: boolean;
  authorizationUrl: string | null;
  tokenUrl: string | null;
  userInfoUrl: string | null;
  jwksUrl: string | null;
  scopes: string;
  attributeMapping: AttributeMapping;
  autoProvision: boolean;
  defaultRoleId: string | null;
  allowedDomains: string;
  enforceSSO: boolean;
  entityId: string | null;
  ssoUrl: string | null;
  certificate: string | null;
  groupRoleMappings: GroupRoleMapping[];
  mfaAcrValues: string[];
  orgAccess: 'all' | 'selected' | 'none';
  orgIds: string[];
  breakGlassUserIds: string[];
  createdBy: string | null;
  createdAt: string;
  updatedAt: string;
}

export function providerView(p: ProviderRow): ProviderView {
  return {
    id: p.id,
    orgId: p.orgId,
    partnerId: p.partnerId,
    name: p.name,
    type: p.type,
    status: p.status,
    preset: p.preset,
    issuer: p.issuer,
    clientId: p.clientId,
    hasClientSecret: p.clientSecret !== null,
    authorizationUrl: p.authorizationUrl,
    tokenUrl: p.tokenUrl,
    userInfoUrl: p.userInfoUrl,
    jwksUrl: p.jwksUrl,
    scopes: p.scopes,
    attributeMapping: p.attributeMapping,
    autoProvision: p.autoProvision,
    defaultRoleId: p.defaultRoleId,
    allowedDomains: p.allowedDomains,
    enforceSSO: p.enforceSso,
    entityId: p.entityId,
    ssoUrl: p.ssoUrl,
    certificate: p.certificate,
    groupRoleMappings: p.groupRoleMappings,
    mfaAcrValues: p.mfaAcrValues,
    orgAccess: p.orgAccess,
    orgIds: p.orgIds,
    breakGlassUserIds: p.breakGlassUserIds,
    createdBy: p.createdBy,
    createdAt: p.createdAt.toISOString(),
    updatedAt: p.updatedAt.toISOString(),
  };
}

/** The client secret is sealed bound to its provider's id: a sealed value cannot be moved to another row. */
const secretAad = (providerId: string) => `sso_providers.client_secret:${providerId}`;
/** The sealed column of providers, for `keel secrets reseal` (platform/reseal.ts). */
export const PROVIDER_SEALED: SealedColumn[] = [{ table: 'sso_providers', column: 'client_secret', keys: ['id'], context: (r) => secretAad(r.id ?? '') }];
export const sealSecret = (keel: Keel, providerId: string, secret: string) => keel.secrets.sealer.seal(secret, secretAad(providerId));
export const openSecret = (keel: Keel, p: ProviderRow) => (p.clientSecret === null ? null : keel.secrets.sealer.open(p.clientSecret, secretAad(p.id)));

export interface ProviderInput {
  name?: string | undefined;
  type?: 'oidc' | 'saml' | undefined;
  preset?: string | null | undefined;
  issuer?: string | null | undefined;
  clientId?: string | null | undefined;
  clientSecret?: string | null | undefined;
  authorizationUrl?: string | null | undefined;
  tokenUrl?: string | null | undefined;
  userInfoUrl?: string | null | undefined;
  jwksUrl?: string | null | undefined;
  scopes?: string | undefined;
  attributeMapping?: AttributeMapping | undefined;
  autoProvision?: boolean | undefined;
  defaultRoleId?: string | null | undefined;
  allowedDomains?: string | undefined;
  enforceSSO?: boolean | undefined;
  entityId?: string | null | undefined;
  ssoUrl?: string | null | undefined;
  certificate?: string | null | undefined;
  groupRoleMappings?: GroupRoleMapping[] | undefined;
  mfaAcrValues?: string[] | undefined;
  orgAccess?: 'all' | 'selected' | undefined;
  orgIds?: string[] | undefined;
  breakGlassUserIds?: string[] | undefined;
}

/** A PEM certificate, or a bare base64 body made into one (docs/decisions.md "SSO shapes"). 400 when it does not parse. */
export function normaliseCertificate(text: string): string {
  const body = text.includes('BEGIN CERTIFICATE') ? text.trim() : `-----BEGIN CERTIFICATE-----\n${(text.replace(/\s+/g, '').match(/.{1,64}/g) ?? []).join('\n')}\n-----END CERTIFICATE-----`;
  try {
    new X509Certificate(body);
  } catch {
    throw validationError([{ path: 'certificate', message: 'is not an X.509 certificate (PEM or base64)' }]);
  }
  return body;
}

/**
 * The partner a partner-level request acts for (`partnerId` in the body, `?partnerId=`): a partner
 * user needs every organisation of the partner (403 `full_org_access_required`), as for every
 * partner-wide setting; a platform administrator names the partner. Organisation users never get here
 * (the scope refuses them any partner they name, 404).
 */
export function partnerLevelOf(access: AccessContext): string {
  if (access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();
  if (!access.partnerId || access.scope === 'organization') throw notFound('Partner');
  return access.partnerId;
}

/**
 * The provider if the caller may see its owner, else 404 (another tenant's provider does not exist):
 * an organisation's as before; a partner's only for that partner's users and platform
 * administrators, and never when the request names an organisation.
 */
export async function findProvider(db: Db, access: AccessContext, id: string): Promise<ProviderRow> {
  const [p] = await db.select().from(ssoProviders).where(eq(ssoProviders.id, id));
  if (!p) throw notFound('SSO provider');
  if (p.partnerId) {
    const mine = access.scope === 'system' || (access.scope === 'partner' && access.partnerId === p.partnerId);
    if (!mine || access.orgId || (access.partnerId && access.partnerId !== p.partnerId)) throw notFound('SSO provider');
    if (access.scope === 'partner' && access.orgAccess !== 'all') throw fullOrgAccessRequired();
    return p;
  }
  if (!p.orgId || !(await reachOrg(db, access, p.orgId))) throw notFound('SSO provider');
  if (access.orgId && access.orgId !== p.orgId) throw notFound('SSO provider');
  return p;
}

export async function listProviders(db: Db, owner: ProviderOwner, q: { page: number; limit: number }): Promise<{ data: ProviderView[]; total: number }> {
  const where = ownerCondition(owner);
  const [rows, [total]] = await Promise.all([
    db.select().from(ssoProviders).where(where).orderBy(desc(ssoProviders.createdAt)).limit(q.limit).offset((q.page - 1) * q.limit),
    db.select({ n: count() }).from(ssoProviders).where(where),
  ]);
  return { data: rows.map(providerView), total: total?.n ?? 0 };
}

type Grants = Pick<ProviderInput, 'defaultRoleId' | 'groupRoleMappings' | 'orgAccess' | 'orgIds' | 'breakGlassUserIds'>;

/**
 * `defaultRoleId` and every mapped role: a role usable in the provider's owner (an organisation's
 * organisation-scoped role, a partner's partner-scoped one); for a partner, the organisations named
 * (`orgIds`, a mapping's `orgIds`) are its own and the break-glass accounts its members. The
 * partner-only fields on an organisation's provider are refused. 400 naming each bad field.
 */
async function assertRoles(db: Db, owner: ProviderOwner, input: Grants): Promise<void> {
  const bad: { path: string; message: string }[] = [];
  const partner = 'partnerId' in owner;
  const kind = partner ? 'a partner-scoped role of this partner' : 'an organization-scoped role of this organization';
  const usable = async (roleId: string) => (await assignableRole(db, roleId, owner)) !== null;
  if (input.defaultRoleId && !(await usable(input.defaultRoleId))) bad.push({ path: 'defaultRoleId', message: `must be ${kind}` });
  for (const [i, m] of (input.groupRoleMappings ?? []).entries()) {
    if (!(await usable(m.roleId))) bad.push({ path: `groupRoleMappings.${i}.roleId`, message: `must be ${kind}` });
    if (m.orgIds !== undefined && !partner) bad.push({ path: `groupRoleMappings.${i}.orgIds`, message: 'is for partner providers only' });
  }
  if (!partner) {
    for (const f of ['orgAccess', 'orgIds', 'breakGlassUserIds'] as const) {
      if (input[f] !== undefined) bad.push({ path: f, message: 'is for partner providers only' });
    }
  } else {
    const lists: [string, string[] | undefined][] = [['orgIds', input.orgIds], ...(input.groupRoleMappings ?? []).map((m, i): [string, string[] | undefined] => [`groupRoleMappings.${i}.orgIds`, m.orgIds])];
    for (const [path, ids] of lists) {
      if (!ids?.length) continue;
      const found = await db.select({ id: organizations.id }).from(organizations).where(and(inArray(organizations.id, ids), eq(organizations.partnerId, owner.partnerId)));
      if (found.length !== new Set(ids).size) bad.push({ path, message: 'must name organizations of this partner' });
    }
    const glass = input.breakGlassUserIds ?? [];
    if (glass.length > 0) {
      const members = await db.select({ id: partnerUsers.userId }).from(partnerUsers).where(and(inArray(partnerUsers.userId, glass), eq(partnerUsers.partnerId, owner.partnerId)));
      if (members.length !== new Set(glass).size) bad.push({ path: 'breakGlassUserIds', message: 'must name members of this partner' });
    }
  }
  if (bad.length > 0) throw validationError(bad);
}

/**
 * Group mappings need a groups claim (docs/decisions.md "SSO that explains itself"): without one they
 * can never match, so saving them is refused (400 naming `attributeMapping.groups`) rather than
 * accepted and silently ignored. A change that leaves both untouched is not judged (an unrelated PATCH
 * of an older provider goes through).
 */
export function assertGroupsClaim(mapping: AttributeMapping, mappings: readonly GroupRoleMapping[]): void {
  if (mappings.length === 0 || mapping.groups?.trim()) return;
  throw validationError([{ path: 'attributeMapping.groups', message: 'is needed for group-to-role mappings: name the claim (OIDC) or attribute (SAML) that carries the user\'s groups, e.g. groups' }]);
}

/**
 * Who may configure an organisation's provider (create, PATCH, status, delete): a provider grants
 * roles (`defaultRoleId`, `groupRoleMappings`) and signs in any member of its organisation by email,
 * so the caller must hold every permission of each role it grants (before and after the change) and
 * of each member it can sign in: the users module's rule for changing a user and giving a role
 * (`assertCoversOrgMembers`), else 403 `privilege_escalation`. (Partner callers without full
 * organisation access and callers restricted to sites or groups are stopped by the route's guard.)
 */
export async function assertMayConfigureProvider(db: Db, access: AccessContext, owner: ProviderOwner, ...providers: (Pick<ProviderInput, 'defaultRoleId' | 'groupRoleMappings'> | undefined)[]): Promise<void> {
  const grants: string[] = [];
  for (const p of providers) {
    if (p?.defaultRoleId) grants.push(p.defaultRoleId);
    for (const m of p?.groupRoleMappings ?? []) grants.push(m.roleId);
  }
  // A partner's provider grants orgAccess too: only a caller with every organisation of the partner
  // (the route's `fullOrgAccess`) or a platform administrator covers any orgAccess it can give.
  await assertCoversTenantMembers(db, access, owner, grants);
}

/** Fills the four endpoints from the issuer's discovery document; a failure is a warning, never a refusal (docs/specification.md "Single sign-on: providers"). */
async function discoverInto(keel: Keel, set: Partial<ProviderRow>, issuer: string, providerId: string, request: RequestRef): Promise<void> {
  try {
    const d = await discover(keel, issuer);
    set.authorizationUrl = d.authorizationUrl;
    set.tokenUrl = d.tokenUrl;
    set.userInfoUrl = d.userInfoUrl;
    set.jwksUrl = d.jwksUrl;
  } catch (err) {
    requestLog(keel.log, request).warn({ providerId, reason: discoveryFailure(err) }, 'SSO provider: OIDC discovery failed; the provider is saved without discovered endpoints');
  }
}

const isUniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return e.code === '23505' || e.cause?.code === '23505';
};
const oneActive = () => ssoError('provider_already_active');

export async function createProvider(keel: Keel, access: AccessContext, owner: ProviderOwner, input: ProviderInput & { name: string; type: 'oidc' | 'saml' }, info: AuditRequestInfo): Promise<ProviderView> {
  const preset = input.preset ? findPreset(input.preset) : undefined;
  if (input.preset && !preset) throw validationError([{ path: 'preset', message: 'is not a known preset (GET /sso/presets)' }]);
  if (preset && preset.type !== input.type) throw validationError([{ path: 'preset', message: `is a ${preset.type} preset` }]);
  await assertRoles(keel.db, owner, input);
  assertGroupsClaim(input.attributeMapping ?? preset?.attributeMapping ?? DEFAULT_MAPPING, input.groupRoleMappings ?? []);
  await assertMayConfigureProvider(keel.db, access, owner, input);
  const orgId = 'orgId' in owner ? owner.orgId : null;
  const partnerId = 'partnerId' in owner ? owner.partnerId : null;
  const id = newId();
  const now = clock.now();
  const row: typeof ssoProviders.$inferInsert = {
    id,
    orgId,
    partnerId,
    name: input.name.trim(),
    type: input.type,
    status: 'inactive',
    preset: input.preset ?? null,
    issuer: input.issuer ?? null,
    clientId: input.clientId ?? null,
    clientSecret: input.clientSecret ? sealSecret(keel, id, input.clientSecret) : null,
    authorizationUrl: input.authorizationUrl ?? null,
    tokenUrl: input.tokenUrl ?? null,
    userInfoUrl: input.userInfoUrl ?? null,
    jwksUrl: input.jwksUrl ?? null,
    scopes: input.scopes ?? preset?.scopes ?? DEFAULT_SCOPES,
    attributeMapping: input.attributeMapping ?? preset?.attributeMapping ?? DEFAULT_MAPPING,
    autoProvision: input.autoProvision ?? true,
    defaultRoleId: input.defaultRoleId ?? null,
    allowedDomains: input.allowedDomains ?? '',
    enforceSso: input.enforceSSO ?? false,
    entityId: input.entityId ?? null,
    ssoUrl: input.ssoUrl ?? null,
    certificate: input.certificate ? normaliseCertificate(input.certificate) : null,
    groupRoleMappings: input.groupRoleMappings ?? [],
    mfaAcrValues: input.mfaAcrValues ?? [],
    orgAccess: input.orgAccess ?? 'all',
    orgIds: input.orgAccess === 'selected' ? [...new Set(input.orgIds ?? [])] : [],
    breakGlassUserIds: [...new Set(input.breakGlassUserIds ?? [])],
    createdBy: access.principal.kind === 'user' ? access.principal.userId : null,
    createdAt: now,
    updatedAt: now,
  };
  if (row.type === 'oidc' && row.issuer) {
    // Endpoints given by hand win over discovered ones.
    const found: Partial<ProviderRow> = {};
    await discoverInto(keel, found, row.issuer, id, info);
    row.authorizationUrl ??= found.authorizationUrl ?? null;
    row.tokenUrl ??= found.tokenUrl ?? null;
    row.userInfoUrl ??= found.userInfoUrl ?? null;
    row.jwksUrl ??= found.jwksUrl ?? null;
  }
  const created = await transaction(keel.db, async (tx) => {
    const [p] = await tx.db.insert(ssoProviders).values(row).returning();
    await writeAudit(tx.db, info, {
      action: 'sso.provider.create',
      partnerId: partnerId ?? access.partnerId,
      orgId,
      target: { type: 'sso_provider', id },
      details: { type: row.type, status: 'inactive', name: row.name },
    });
    return one(p);
  });
  return providerView(created);
}

/** PATCH field names (the list of docs/specification.md "Single sign-on: providers", plus the SAML fields, preset and groupRoleMappings Keel adds) → columns. */
const PATCH_COLUMNS = {
  name: 'name', issuer: 'issuer', clientId: 'clientId', authorizationUrl: 'authorizationUrl', tokenUrl: 'tokenUrl',
  userInfoUrl: 'userInfoUrl', jwksUrl: 'jwksUrl', scopes: 'scopes', attributeMapping: 'attributeMapping',
  autoProvision: 'autoProvision', defaultRoleId: 'defaultRoleId', allowedDomains: 'allowedDomains', enforceSSO: 'enforceSso',
  entityId: 'entityId', ssoUrl: 'ssoUrl', groupRoleMappings: 'groupRoleMappings', mfaAcrValues: 'mfaAcrValues',
  orgAccess: 'orgAccess', orgIds: 'orgIds', breakGlassUserIds: 'breakGlassUserIds',
} as const satisfies Record<string, keyof ProviderRow>;

export async function updateProvider(keel: Keel, access: AccessContext, id: string, input: ProviderInput, info: AuditRequestInfo): Promise<ProviderView> {
  const p = await findProvider(keel.db, access, id);
  const owner = ownerOf(p);
  await assertRoles(keel.db, owner, input);
  if (input.attributeMapping !== undefined || input.groupRoleMappings !== undefined) {
    assertGroupsClaim(input.attributeMapping ?? p.attributeMapping, input.groupRoleMappings ?? p.groupRoleMappings);
  }
  if (input.orgAccess === 'all' && input.orgIds === undefined) input = { ...input, orgIds: [] };
  await assertMayConfigureProvider(keel.db, access, owner, p, input);
  const set: Partial<ProviderRow> = {};
  const changes: string[] = [];
  for (const [field, column] of Object.entries(PATCH_COLUMNS) as [keyof typeof PATCH_COLUMNS, keyof ProviderRow][]) {
    const value = input[field];
    if (value === undefined) continue;
    const normalised = typeof value === 'string' && field === 'name' ? value.trim() : value;
    if (JSON.stringify(normalised) === JSON.stringify(p[column])) continue;
    (set as Record<string, unknown>)[column] = normalised;
    changes.push(field);
  }
  if (input.certificate !== undefined) {
    const cert = input.certificate === null ? null : normaliseCertificate(input.certificate);
    if (cert !== p.certificate) {
      set.certificate = cert;
      changes.push('certificate');
    }
  }
  if (input.clientSecret !== undefined) {
    // The secret is never compared or echoed: giving one is a change.
    set.clientSecret = input.clientSecret === null ? null : sealSecret(keel, p.id, input.clientSecret);
    changes.push('clientSecret');
  }
  const issuer = set.issuer !== undefined ? set.issuer : input.issuer !== undefined ? p.issuer : undefined;
  if (p.type === 'oidc' && issuer) {
    const found: Partial<ProviderRow> = {};
    await discoverInto(keel, found, issuer, p.id, info);
    for (const k of ['authorizationUrl', 'tokenUrl', 'userInfoUrl', 'jwksUrl'] as const) {
      if (input[k] === undefined && found[k] !== undefined && found[k] !== p[k]) {
        set[k] = found[k];
        if (!changes.includes(k)) changes.push(k);
      }
    }
  }
  if (changes.length === 0) return providerView(p);
  const updated = await transaction(keel.db, async (tx) => {
    const [row] = await tx.db.update(ssoProviders).set({ ...set, updatedAt: clock.now() }).where(eq(ssoProviders.id, p.id)).returning();
    await writeAudit(tx.db, info, { action: 'sso.provider.update', ...auditScope(access, p), target: { type: 'sso_provider', id: p.id }, changes });
    tx.afterCommit(() => activeCacheOf(keel).changed(ownerKey(owner)));
    return one(row);
  });
  return providerView(updated);
}

/** Deletes the provider, its pending login sessions and (by cascade) its identity links. */
export async function deleteProvider(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<void> {
  const p = await findProvider(keel.db, access, id);
  await assertMayConfigureProvider(keel.db, access, ownerOf(p), p);
  await transaction(keel.db, async (tx) => {
    await tx.db.delete(singleUseRecords).where(and(eq(singleUseRecords.purpose, SSO_LOGIN_PURPOSE), eq(singleUseRecords.subjectId, p.id)));
    await tx.db.delete(ssoProviders).where(eq(ssoProviders.id, p.id));
    tx.afterCommit(() => activeCacheOf(keel).changed(ownerKey(ownerOf(p))));
    await writeAudit(tx.db, info, { action: 'sso.provider.delete', ...auditScope(access, p), target: { type: 'sso_provider', id: p.id }, details: { type: p.type, name: p.name } });
  });
}

/** Moves the status; a second `active` provider of an organisation is 409 (the partial unique index decides, so two racing activations cannot both win). */
export async function setProviderStatus(keel: Keel, access: AccessContext, id: string, status: ProviderStatus, info: AuditRequestInfo): Promise<ProviderView> {
  const p = await findProvider(keel.db, access, id);
  await assertMayConfigureProvider(keel.db, access, ownerOf(p), p);
  try {
    const updated = await transaction(keel.db, async (tx) => {
      const [row] = await tx.db.update(ssoProviders).set({ status, updatedAt: clock.now() }).where(eq(ssoProviders.id, p.id)).returning();
      await writeAudit(tx.db, info, {
        action: 'sso.provider.status.update',
        ...auditScope(access, p),
        target: { type: 'sso_provider', id: p.id },
        details: { from: p.status, to: status },
      });
      tx.afterCommit(() => activeCacheOf(keel).changed(ownerKey(ownerOf(p))));
      return one(row);
    });
    return providerView(updated);
  } catch (err) {
    if (isUniqueViolation(err)) throw oneActive();
    throw err;
  }
}

export interface TestReport {
  ok: boolean;
  type: 'oidc' | 'saml';
  message: string;
  discovered: { issuer: string; authorizationUrl: string | null; tokenUrl: string | null; userInfoUrl: string | null; jwksUrl: string | null } | null;
  certificate: { subject: string; issuer: string; validFrom: string; validTo: string; expired: boolean; daysLeft: number } | null;
  /** OIDC: what the token endpoint said of the client id and secret; null when not checked. */
  credentials: CredentialCheck | null;
}

/**
 * OIDC: discovery, then the client credentials (`probeClientCredentials`): the report is ok only when
 * discovery found the endpoints and the token endpoint accepted the client (docs/decisions.md "SSO
 * that explains itself").
 */
async function testOidc(keel: Keel, p: ProviderRow): Promise<TestReport> {
  const none = { discovered: null, certificate: null, credentials: null };
  if (!p.issuer) return { ok: false, type: 'oidc', message: 'The provider has no issuer: set it with PATCH', ...none };
  let d;
  try {
    d = await discover(keel, p.issuer);
  } catch (err) {
    return { ok: false, type: 'oidc', message: `Discovery failed: ${discoveryFailure(err)}`, ...none };
  }
  const discovered = { issuer: d.issuer, authorizationUrl: d.authorizationUrl, tokenUrl: d.tokenUrl, userInfoUrl: d.userInfoUrl, jwksUrl: d.jwksUrl };
  const missing = [!d.authorizationUrl && 'authorization_endpoint', !d.tokenUrl && 'token_endpoint', !d.jwksUrl && 'jwks_uri'].filter(Boolean);
  const found = missing.length === 0 ? 'Discovery succeeded' : `Discovery document lacks ${missing.join(', ')}`;
  const tokenUrl = p.tokenUrl ?? d.tokenUrl;
  const secret = openSecret(keel, p);
  if (!tokenUrl || !p.clientId || !secret) {
    const lacks = [!p.clientId && 'client id', !secret && 'client secret', !tokenUrl && 'token endpoint'].filter(Boolean).join(', ');
    return { ok: false, type: 'oidc', message: `${found}; the client credentials were not checked: the provider has no ${lacks}`, discovered, certificate: null, credentials: null };
  }
  const credentials = await probeClientCredentials(keel, { issuer: d.issuer, tokenUrl, clientId: p.clientId, clientSecret: secret, redirectUri: `${keel.config.publicUrl}${CALLBACK_PATH}` });
  return { ok: missing.length === 0 && credentials.result === 'accepted', type: 'oidc', message: `${found}. ${credentials.message}.`, discovered, certificate: null, credentials };
}

/** OIDC: discovery against the issuer, reporting what was found or why not. SAML: the certificate parsed, its expiry. Audited either way. */
export async function testProvider(keel: Keel, access: AccessContext, id: string, info: AuditRequestInfo): Promise<TestReport> {
  const p = await findProvider(keel.db, access, id);
  let report: TestReport;
  if (p.type === 'oidc') {
    report = await testOidc(keel, p);
  } else if (!p.certificate) {
    report = { ok: false, type: 'saml', message: 'The provider has no signing certificate: set it with PATCH', discovered: null, certificate: null, credentials: null };
  } else {
    const cert = new X509Certificate(p.certificate);
    const validTo = new Date(cert.validTo);
    const daysLeft = Math.floor((validTo.getTime() - clock.nowMs()) / 86_400_000);
    const expired = validTo.getTime() <= clock.nowMs();
    const gaps = [!p.ssoUrl && 'ssoUrl', !p.entityId && 'entityId'].filter(Boolean);
    report = {
      ok: !expired && gaps.length === 0,
      type: 'saml',
      message: expired ? 'The signing certificate has expired' : gaps.length > 0 ? `Missing ${gaps.join(', ')}` : `Certificate valid for ${daysLeft} more days`,
      discovered: null,
      certificate: { subject: cert.subject, issuer: cert.issuer, validFrom: new Date(cert.validFrom).toISOString(), validTo: validTo.toISOString(), expired, daysLeft },
      credentials: null,
    };
  }
  await writeAudit(keel.db, info, {
    action: 'sso.provider.test',
    ...auditScope(access, p),
    target: { type: 'sso_provider', id: p.id },
    details: { ok: report.ok, credentials: report.credentials?.result ?? null },
    result: report.ok ? 'success' : 'failure',
  });
  return report;
}

/**
 * The provider `/sso/login/:orgId` starts: the active one, else the most recently changed one in
 * `testing` (a trial that only the organisation's SSO administrators complete, docs/decisions.md
 * "SSO that explains itself").
 */
export async function signInProvider(db: Db, owner: string | ProviderOwner): Promise<ProviderRow | null> {
  const o = typeof owner === 'string' ? { orgId: owner } : owner;
  const active = await activeProvider(db, o);
  if (active) return active;
  const [testing] = await db.select().from(ssoProviders).where(and(ownerCondition(o), eq(ssoProviders.status, 'testing'))).orderBy(desc(ssoProviders.updatedAt)).limit(1);
  return testing ?? null;
}

/** A provider that signs people in: `active`, or `testing` for a trial. */
export const signsIn = (p: Pick<ProviderRow, 'status'> | undefined): boolean => p?.status === 'active' || p?.status === 'testing';

/** The organisation's (or partner's) active provider, if any. */
export async function activeProvider(db: Db, owner: string | ProviderOwner): Promise<ProviderRow | null> {
  const o = typeof owner === 'string' ? { orgId: owner } : owner;
  const [p] = await db.select().from(ssoProviders).where(and(ownerCondition(o), eq(ssoProviders.status, 'active')));
  return p ?? null;
}

/** A partner's slug, or null when it is gone. */
export async function partnerSlugOf(db: Db, partnerId: string): Promise<string | null> {
  const [p] = await db.select({ slug: partners.slug }).from(partners).where(eq(partners.id, partnerId));
  return p?.slug ?? null;
}

/** A partner by its slug (the public sign-in page and `/sso/login/partner/{slug}`). */
export async function partnerBySlug(db: Db, slug: string): Promise<{ id: string; name: string; slug: string } | null> {
  if (!/^[a-z0-9-]{1,63}$/.test(slug)) return null;
  const [p] = await db.select({ id: partners.id, name: partners.name, slug: partners.slug }).from(partners).where(eq(partners.slug, slug));
  return p ?? null;
}

export const noActiveProvider = () => platformError('not_found', { message: 'There is no active or testing SSO provider for this organization' });
