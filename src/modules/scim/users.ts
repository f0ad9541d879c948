import { and, asc, count, eq, ne, sql } from 'drizzle-orm';
import { scimPatch, ScimError as PatchError, type ScimPatchOperation, type ScimResource } from 'scim-patch';
import type { Keel } from '../../keel.js';
import type { Db } from '../../platform/db/client.js';
import { transaction, type Tx } from '../../platform/db/transaction.js';
import { prepared, rawQuery, tableReader, tableWriter } from '../../platform/db/raw.js';
import { clock } from '../../platform/clock.js';
import { AppError } from '../../platform/http/errors.js';
import { writeAudit, type AuditRequestInfo } from '../audit/service.js';
import { users } from '../identity/schema.js';
import { createAccount, deleteAccount, updateAccount } from '../identity/accounts.js';
import { identityOf } from '../identity/context.js';
import { findUserByEmail } from '../identity/service.js';
import { organizationUsers, partnerUsers } from '../access/schema.js';
import { addOrganizationMember, assertNotLastFullAdmin, getMembership } from '../access/service.js';
import { verifiedDomainOrg } from '../domains/service.js';
import { scimUsers, type ScimUserAttributes, type ScimUserRow } from './schema.js';
import { ScimError, scimInvalid, scimNotFound } from './errors.js';
import { dateField, matches, parseFilter, pushDown, tooManyToFilter, type SqlField } from './filter.js';
import { scimDefaultRole } from './settings.js';
import type { ScimCaller } from './tokens.js';

export const CORE_USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const ENTERPRISE_USER = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
export const LIST_RESPONSE = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

/** `count` when a directory sends none, and the most one page holds (ServiceProviderConfig `filter.maxResults`). */
export const DEFAULT_COUNT = 100;
export const MAX_COUNT = 200;
/** The most operations one PATCH carries (Entra sends membership changes in batches well under it). */
export const MAX_PATCH_OPERATIONS = 1000;

/** Who acts: the SCIM token (the audit actor), its organisation, and the base URL of resource locations. */
export interface ScimContext {
  keel: Keel;
  caller: ScimCaller;
  baseUrl: string;
  info: AuditRequestInfo;
}

/** A User as a directory sent it, checked and reduced to what Keel keeps. */
export interface UserInput {
  userName: string;
  externalId: string | null;
  active: boolean;
  attributes: ScimUserAttributes;
}

type Account = { id: string; email: string; name: string; status: 'active' | 'invited' | 'disabled'; isPlatformAdmin: boolean };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const NAME_PARTS = ['formatted', 'familyName', 'givenName', 'middleName', 'honorificPrefix', 'honorificSuffix'] as const;

/** Attribute names are case-insensitive (RFC 7643 §2.1): the value of `name` in `o`, whatever its case. */
function get(o: Record<string, unknown>, name: string): unknown {
  if (name in o) return o[name];
  const lower = name.toLowerCase();
  const key = Object.keys(o).find((k) => k.toLowerCase() === lower);
  return key === undefined ? undefined : o[key];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A boolean, or Entra ID's `"True"`/`"False"` (any case). */
function bool(v: unknown, path: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string' && /^(true|false)$/i.test(v.trim())) return v.trim().toLowerCase() === 'true';
  throw scimInvalid(`${path} must be a boolean`);
}

function str(v: unknown, path: string, max = 255): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw scimInvalid(`${path} must be a string`);
  const t = v.trim();
  if (t.length > max) throw scimInvalid(`${path} is longer than ${max} characters`);
  return t === '' ? undefined : t;
}

/** Checks a User body (POST, PUT, or the result of a PATCH); 400 `invalidValue`/`invalidSyntax` naming the attribute. */
export function parseUserInput(body: unknown): UserInput {
  if (!isObject(body)) throw new ScimError(400, 'The body must be a SCIM User object', 'invalidSyntax');
  const userName = str(get(body, 'userName'), 'userName');
  if (!userName) throw scimInvalid('userName is required');
  if (!EMAIL.test(userName)) throw scimInvalid('userName must be an email address (Keel signs people in by email)');
  const attributes: ScimUserAttributes = {};
  const name = get(body, 'name');
  if (name !== undefined && name !== null) {
    if (!isObject(name)) throw scimInvalid('name must be an object');
    const parts: Record<string, string> = {};
    for (const part of NAME_PARTS) {
      const v = str(get(name, part), `name.${part}`);
      if (v !== undefined) parts[part] = v;
    }
    if (Object.keys(parts).length > 0) attributes.name = parts;
  }
  const displayName = str(get(body, 'displayName'), 'displayName');
  if (displayName !== undefined) attributes.displayName = displayName;
  const title = str(get(body, 'title'), 'title');
  if (title !== undefined) attributes.title = title;
  const emails = get(body, 'emails');
  if (emails !== undefined && emails !== null) {
    if (!Array.isArray(emails) || emails.length > 10) throw scimInvalid('emails must be an array of at most 10 entries');
    attributes.emails = emails.map((e, i) => {
      if (!isObject(e)) throw scimInvalid(`emails[${i}] must be an object`);
      const value = str(get(e, 'value'), `emails[${i}].value`);
      if (!value) throw scimInvalid(`emails[${i}].value is required`);
      const type = str(get(e, 'type'), `emails[${i}].type`, 40);
      const primary = bool(get(e, 'primary'), `emails[${i}].primary`);
      return { value, ...(type === undefined ? {} : { type }), ...(primary === undefined ? {} : { primary }) };
    });
  }
  const enterprise = get(body, ENTERPRISE_USER);
  if (enterprise !== undefined && enterprise !== null) {
    if (!isObject(enterprise)) throw scimInvalid(`${ENTERPRISE_USER} must be an object`);
    const ext: NonNullable<ScimUserAttributes['enterprise']> = {};
    const department = str(get(enterprise, 'department'), 'department');
    if (department !== undefined) ext.department = department;
    const manager = get(enterprise, 'manager');
    if (typeof manager === 'string' && manager.trim() !== '') ext.manager = { value: str(manager, 'manager') ?? '' };
    else if (isObject(manager)) {
      const value = str(get(manager, 'value'), 'manager.value');
      const displayName = str(get(manager, 'displayName'), 'manager.displayName');
      if (value !== undefined || displayName !== undefined) ext.manager = { ...(value === undefined ? {} : { value }), ...(displayName === undefined ? {} : { displayName }) };
    } else if (manager !== undefined && manager !== null && manager !== '') throw scimInvalid('manager must be an object with value');
    if (Object.keys(ext).length > 0) attributes.enterprise = ext;
  }
  return {
    userName,
    externalId: str(get(body, 'externalId'), 'externalId') ?? null,
    active: bool(get(body, 'active'), 'active') ?? true,
    attributes,
  };
}

/** The account's display name in Keel: displayName, else the formatted or given + family name, else the email. */
export function keelName(input: UserInput): string {
  const a = input.attributes;
  const parts = [a.name?.givenName, a.name?.familyName].filter(Boolean).join(' ');
  return (a.displayName ?? a.name?.formatted ?? (parts || input.userName)).slice(0, 255);
}

/** The User resource of an account a directory manages (RFC 7643 §4.1, with the enterprise extension). */
export function userResource(row: ScimUserRow, account: { email: string; status: string }, baseUrl: string): Record<string, unknown> & ScimResource {
  const a = row.attributes;
  const enterprise = a.enterprise ? { [ENTERPRISE_USER]: a.enterprise } : {};
  return {
    schemas: a.enterprise ? [CORE_USER, ENTERPRISE_USER] : [CORE_USER],
    id: row.userId,
    ...(row.externalId ? { externalId: row.externalId } : {}),
    userName: account.email,
    ...(a.name ? { name: a.name } : {}),
    ...(a.displayName ? { displayName: a.displayName } : {}),
    ...(a.title ? { title: a.title } : {}),
    ...(a.emails ? { emails: a.emails } : {}),
    active: account.status === 'active',
    ...enterprise,
    meta: {
      resourceType: 'User',
      created: row.createdAt.toISOString() as unknown as Date,
      lastModified: row.updatedAt.toISOString() as unknown as Date,
      location: `${baseUrl}/Users/${row.userId}`,
      version: `W/"${row.version}"`,
    } as ScimResource['meta'],
  };
}

const selection = { row: scimUsers, email: users.email, status: users.status, name: users.name, isPlatformAdmin: users.isPlatformAdmin };
type Joined = { row: ScimUserRow; email: string; status: Account['status']; name: string; isPlatformAdmin: boolean };

function joined(db: Db) {
  return db.select(selection).from(scimUsers).innerJoin(users, eq(users.id, scimUsers.userId));
}

const resourceOf = (ctx: ScimContext, j: Joined) => userResource(j.row, j, ctx.baseUrl);

/** One managed user of the token's organisation, locked for the rest of the transaction when `tx` is given; 404 otherwise. */
async function findManaged(db: Db, orgId: string, id: string, lock: boolean): Promise<Joined> {
  if (!UUID.test(id)) throw scimNotFound('User');
  const q = joined(db).where(and(eq(scimUsers.userId, id), eq(scimUsers.orgId, orgId)));
  const [j] = (await (lock ? q.for('update', { of: scimUsers }) : q)) as Joined[];
  if (!j) throw scimNotFound('User');
  return j;
}

export async function getUser(ctx: ScimContext, id: string): Promise<Record<string, unknown>> {
  return resourceOf(ctx, await findManaged(ctx.keel.db, ctx.caller.orgId, id, false));
}

export interface ListQuery {
  filter?: string | undefined;
  startIndex?: number | undefined;
  count?: number | undefined;
}

/** The filter terms SQL answers through the organisation's indexes (docs/decisions.md "SCIM"). */
export const USER_FIELDS: Record<string, SqlField> = {
  username: (op, v) => (op === 'eq' && typeof v === 'string' ? eq(scimUsers.userName, v.toLowerCase()) : null),
  externalid: (op, v) => (op === 'eq' && typeof v === 'string' ? eq(scimUsers.externalId, v) : null),
  id: (op, v) => (op === 'eq' && typeof v === 'string' ? (UUID.test(v) ? eq(scimUsers.userId, v) : sql`false`) : null),
  active: (op, v) => (op === 'eq' && typeof v === 'boolean' ? (v ? eq(users.status, 'active') : ne(users.status, 'active')) : null),
  'meta.lastmodified': dateField(scimUsers.updatedAt),
  'meta.created': dateField(scimUsers.createdAt),
};

/**
 * `GET /Users` (RFC 7644 §3.4.2): the organisation's managed users in creation order, filtered,
 * paged by `startIndex` (1-based) and `count` (at most MAX_COUNT). A filter SQL can say whole
 * (`pushDown`: `userName`/`externalId`/`id`/`active` `eq`, `meta.lastModified` and `meta.created`
 * compared, joined by `and`/`or`/`not`) is counted and paged in SQL; any other is applied to the
 * rows its SQL part narrows to, at most SCIM_FILTER_SCAN_LIMIT of them (400 `tooMany` beyond).
 */
export async function listUsers(ctx: ScimContext, q: ListQuery): Promise<{ totalResults: number; startIndex: number; resources: Record<string, unknown>[] }> {
  const startIndex = Math.max(1, q.startIndex ?? 1);
  const take = Math.min(MAX_COUNT, Math.max(0, q.count ?? DEFAULT_COUNT));
  const db = ctx.keel.db;
  const org = eq(scimUsers.orgId, ctx.caller.orgId);
  const order = [asc(scimUsers.createdAt), asc(scimUsers.userId)] as const;
  const filter = q.filter === undefined || q.filter.trim() === '' ? null : parseFilter(q.filter);
  const pushed = filter ? pushDown(filter, USER_FIELDS) : { where: undefined, exact: true };
  const where = and(org, pushed.where);
  if (pushed.exact) {
    const rows = take === 0 ? [] : ((await joined(db).where(where).orderBy(...order).limit(take).offset(startIndex - 1)) as Joined[]);
    // A page that is not full ends the list, so it tells the total (a directory's `userName eq` probe
    // is one statement); a full page, `count=0`, or an empty page past the start is counted.
    const ends = take > 0 && rows.length < take && (rows.length > 0 || startIndex === 1);
    const total = ends ? startIndex - 1 + rows.length : ((await db.select({ n: count() }).from(scimUsers).innerJoin(users, eq(users.id, scimUsers.userId)).where(where))[0]?.n ?? 0);
    return { totalResults: total, startIndex, resources: rows.map((j) => resourceOf(ctx, j)) };
  }
  const cap = ctx.keel.config.SCIM_FILTER_SCAN_LIMIT;
  const rows = (await joined(db).where(where).orderBy(...order).limit(cap + 1)) as Joined[];
  if (rows.length > cap) throw tooManyToFilter(cap);
  const hits = rows.map((j) => resourceOf(ctx, j)).filter((r) => filter === null || matches(filter, r));
  return { totalResults: hits.length, startIndex, resources: hits.slice(startIndex - 1, startIndex - 1 + take) };
}

const scimUserWriter = tableWriter(scimUsers);
const scimUserReader = tableReader(scimUsers);
const INSERT_SCIM_USER = scimUserWriter.insert({ userId: '', orgId: '', userName: '', externalId: null, attributes: {}, version: 1, createdAt: new Date(0), updatedAt: new Date(0) }).text;

/** A managed user's record, written by a prepared statement (one per `POST /Users` of an import). */
async function insertScimUser(tx: Tx, row: ScimUserRow): Promise<ScimUserRow> {
  const { params } = scimUserWriter.insert(row);
  const [written] = await rawQuery(tx.db, prepared('scim_user_insert', `${INSERT_SCIM_USER} returning ${scimUserReader.columns}`), params);
  if (!written) throw new Error('scim_users: insert returned no row');
  return scimUserReader.read(written);
}

const isUniqueViolation = (err: unknown): boolean => {
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  return (e.code ?? e.cause?.code) === '23505';
};
const duplicate = () => new ScimError(409, 'A user with this userName already exists', 'uniqueness');

/** An email in a domain another organisation verified is that organisation's (docs/decisions.md "Verified domains and SSO step-up"): 409. */
async function assertDomainOurs(db: Db, orgId: string, email: string): Promise<void> {
  const owner = await verifiedDomainOrg(db, email);
  if (owner && owner !== orgId) throw new ScimError(409, "The email's domain is verified by another organization");
}

/** Every write is audited with the SCIM token as its actor (`actorType: scim_token`, `actorId`: the token's id). */
const audit = (ctx: ScimContext, db: Db, action: string, userId: string, details: Record<string, unknown> = {}, changes?: string[]) =>
  writeAudit(db, ctx.info, { action, orgId: ctx.caller.orgId, target: { type: 'user', id: userId }, ...(changes ? { changes } : {}), details });

/**
 * `POST /Users`: an account (no password: it signs in by SSO, or an invitation where passwords are
 * allowed) with a membership of the organisation in its default SCIM role, or (an account that is
 * already a plain member of this organisation) that member, now managed. 409 `uniqueness` for a
 * userName Keel has elsewhere or already manages. Audited `user.scim.create`.
 */
export async function createUser(ctx: ScimContext, body: unknown): Promise<Record<string, unknown>> {
  const input = parseUserInput(body);
  const { keel, caller } = ctx;
  await assertDomainOurs(keel.db, caller.orgId, input.userName);
  const roleId = await scimDefaultRole(keel.db, caller.orgId);
  try {
    const done = await transaction(keel.db, async (tx): Promise<{ id: string } | { row: ScimUserRow; account: { email: string; status: string } }> => {
      const now = clock.now();
      const existing = await findUserByEmail(tx.db, input.userName);
      if (existing) {
        const [managed] = await tx.db.select({ id: scimUsers.userId }).from(scimUsers).where(eq(scimUsers.userId, existing.id));
        const m = await getMembership(tx.db, existing.id);
        if (managed || existing.isPlatformAdmin || m?.kind !== 'organization' || m.orgId !== caller.orgId) throw duplicate();
        await tx.db.insert(scimUsers).values({ userId: existing.id, orgId: caller.orgId, userName: existing.email.toLowerCase(), externalId: input.externalId, attributes: {}, createdAt: now, updatedAt: now });
        await audit(ctx, tx.db, 'user.scim.create', existing.id, { adopted: true, roleId: m.roleId });
        await applyUser(ctx, tx, { ...existing }, input);
        return { id: existing.id };
      }
      const created = await createAccount(tx, { email: input.userName, name: keelName(input), passwordHash: null, status: input.active ? 'active' : 'disabled', createdAt: now, updatedAt: now });
      if (!created) throw duplicate();
      await addOrganizationMember(tx.db, { orgId: caller.orgId, userId: created.id, roleId });
      const row = await insertScimUser(tx, { userId: created.id, orgId: caller.orgId, userName: input.userName.toLowerCase(), externalId: input.externalId, attributes: input.attributes, version: 1, createdAt: now, updatedAt: now });
      await audit(ctx, tx.db, 'user.scim.create', created.id, { roleId, active: input.active });
      return { row, account: created };
    });
    // A new account is answered from what was written (the import's hot path: no second read).
    if ('row' in done) return userResource(done.row, done.account, ctx.baseUrl);
    return await getUser(ctx, done.id);
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicate();
    throw err;
  }
}

/**
 * Brings the account and its SCIM record to `next` inside the caller's transaction (the record
 * locked): the email (userName), the display name, the status. `active: false` disables the account
 * at once: the identity module's disable (status, then every session and refresh token revoked and
 * the caches of every process dropped after commit, which also stops the user's API keys), audited
 * `user.scim.deactivate` and published as `user.deactivated`; `active: true` re-enables it.
 */
async function applyUser(ctx: ScimContext, tx: Tx, account: Account, next: UserInput): Promise<void> {
  const { keel, caller } = ctx;
  const now = clock.now();
  const set: { email?: string; name?: string } = {};
  if (next.userName.toLowerCase() !== account.email.toLowerCase()) {
    await assertDomainOurs(tx.db, caller.orgId, next.userName);
    const taken = await findUserByEmail(tx.db, next.userName);
    if (taken && taken.id !== account.id) throw duplicate();
    set.email = next.userName;
  } else if (next.userName !== account.email) set.email = next.userName;
  const name = keelName(next);
  if (name !== account.name) set.name = name;
  if (Object.keys(set).length > 0) await updateAccount(keel, tx, account.id, { ...set, updatedAt: now });

  const wasActive = account.status === 'active';
  if (!next.active && wasActive) {
    try {
      await assertNotLastFullAdmin(tx.db, { orgId: caller.orgId }, account.id, null);
    } catch (err) {
      if (err instanceof AppError && err.code === 'last_admin') throw new ScimError(409, 'Deactivating this user would leave the organization without a full administrator', 'mutability');
      throw err;
    }
    await updateAccount(keel, tx, account.id, { status: 'disabled', updatedAt: now });
    await identityOf(keel).sessions.revokeAllForUser(tx.db, account.id, 'scim_deactivated', tx.afterCommit);
    await audit(ctx, tx.db, 'user.scim.deactivate', account.id);
    await keel.events.publish(tx, 'user.deactivated', caller.orgId, { userId: account.id, email: set.email ?? account.email, source: 'scim' });
  } else if (next.active && !wasActive) {
    await updateAccount(keel, tx, account.id, { status: 'active', updatedAt: now });
    await audit(ctx, tx.db, 'user.scim.activate', account.id);
  }

  const [prev] = await tx.db.select().from(scimUsers).where(eq(scimUsers.userId, account.id));
  const changed = [
    ...(set.email ? ['userName'] : []),
    ...(prev?.externalId !== next.externalId ? ['externalId'] : []),
    ...Object.keys({ ...prev?.attributes, ...next.attributes }).filter((k) => JSON.stringify(prev?.attributes[k as keyof ScimUserAttributes]) !== JSON.stringify(next.attributes[k as keyof ScimUserAttributes])),
  ];
  await tx.db
    .update(scimUsers)
    .set({ userName: next.userName.toLowerCase(), externalId: next.externalId, attributes: next.attributes, version: sql`${scimUsers.version} + 1`, updatedAt: now })
    .where(eq(scimUsers.userId, account.id));
  if (changed.length > 0) await audit(ctx, tx.db, 'user.scim.update', account.id, {}, changed);
}

const accountOf = (j: Joined): Account => ({ id: j.row.userId, email: j.email, name: j.name, status: j.status, isPlatformAdmin: j.isPlatformAdmin });

/** Runs a write to one managed user with its record locked: writes to one user are serialised on every backend. */
async function writeLocked(ctx: ScimContext, id: string, work: (tx: Tx, current: Joined) => Promise<void>): Promise<Record<string, unknown>> {
  try {
    await transaction(ctx.keel.db, async (tx) => {
      await work(tx, await findManaged(tx.db, ctx.caller.orgId, id, true));
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicate();
    throw err;
  }
  return getUser(ctx, id);
}

/** `PUT /Users/:id`: replaces the user's attributes (what the body leaves out is cleared). */
export function replaceUser(ctx: ScimContext, id: string, body: unknown): Promise<Record<string, unknown>> {
  const input = parseUserInput(body);
  return writeLocked(ctx, id, (tx, current) => applyUser(ctx, tx, accountOf(current), input));
}

/**
 * Entra ID's PATCH habits made standard before scim-patch applies the operations: `"Replace"`
 * (any case) is `replace`, and a path-less value whose keys are paths (`"name.givenName"`, an
 * extension attribute's URN) becomes one operation per such key.
 */
export function normaliseOperations(body: unknown): ScimPatchOperation[] {
  if (!isObject(body)) throw new ScimError(400, 'The body must be a SCIM PatchOp', 'invalidSyntax');
  const ops = get(body, 'Operations');
  if (!Array.isArray(ops) || ops.length === 0) throw new ScimError(400, 'Operations must be a non-empty array', 'invalidSyntax');
  if (ops.length > MAX_PATCH_OPERATIONS) throw new ScimError(400, `At most ${MAX_PATCH_OPERATIONS} operations per request`, 'tooMany');
  const out: ScimPatchOperation[] = [];
  for (const raw of ops) {
    if (!isObject(raw)) throw new ScimError(400, 'Each operation must be an object', 'invalidSyntax');
    const given = get(raw, 'op');
    const op = typeof given === 'string' ? given.toLowerCase() : '';
    if (op !== 'add' && op !== 'replace' && op !== 'remove') throw new ScimError(400, `Unknown operation "${typeof given === 'string' ? given.slice(0, 40) : typeof given}"`, 'invalidSyntax');
    const path = get(raw, 'path');
    if (path !== undefined && typeof path !== 'string') throw new ScimError(400, 'path must be a string', 'invalidPath');
    const value = get(raw, 'value');
    if (op === 'remove') {
      if (!path) throw new ScimError(400, 'remove needs a path', 'noTarget');
      out.push({ op, path, ...(value === undefined ? {} : { value }) });
    } else if (!path && isObject(value)) {
      const plain: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value)) {
        if ((k.includes('.') || k.startsWith('urn:')) && k !== ENTERPRISE_USER) out.push({ op, path: k, value: v });
        else plain[k] = v;
      }
      if (Object.keys(plain).length > 0) out.push({ op, value: plain });
    } else out.push({ op, ...(path ? { path } : {}), value });
  }
  return out;
}

/** Attributes a PATCH may not write: they are Keel's. */
const READ_ONLY = new Set(['id', 'meta', 'schemas']);

/** `PATCH /Users/:id` (RFC 7644 §3.5.2): add, replace, remove with and without path, applied by scim-patch to the current resource. */
export function patchUser(ctx: ScimContext, id: string, body: unknown): Promise<Record<string, unknown>> {
  const ops = normaliseOperations(body);
  for (const op of ops) if (op.path && READ_ONLY.has(op.path.toLowerCase())) throw new ScimError(400, `${op.path} cannot be changed`, 'mutability');
  return writeLocked(ctx, id, async (tx, current) => {
    const resource = resourceOf(ctx, current);
    let patched: Record<string, unknown>;
    try {
      patched = scimPatch(resource, ops, { mutateDocument: false, treatMissingAsAdd: true });
    } catch (err) {
      if (err instanceof PatchError) throw new ScimError(400, err.message.slice(0, 300), err.scimCode === 'noTarget' ? 'noTarget' : err.scimCode === 'invalidPath' ? 'invalidPath' : 'invalidValue');
      throw err;
    }
    await applyUser(ctx, tx, accountOf(current), parseUserInput(patched));
  });
}

/**
 * `DELETE /Users/:id`: the membership of the organisation goes with its sessions, and the account
 * with it unless it belongs to a partner too. Audited `user.scim.delete`.
 */
export async function deleteUser(ctx: ScimContext, id: string): Promise<void> {
  const { keel, caller } = ctx;
  await transaction(keel.db, async (tx) => {
    const current = await findManaged(tx.db, caller.orgId, id, true);
    try {
      await assertNotLastFullAdmin(tx.db, { orgId: caller.orgId }, id, null);
    } catch (err) {
      if (err instanceof AppError && err.code === 'last_admin') throw new ScimError(409, 'Deleting this user would leave the organization without a full administrator', 'mutability');
      throw err;
    }
    await tx.db.delete(organizationUsers).where(and(eq(organizationUsers.userId, id), eq(organizationUsers.orgId, caller.orgId)));
    await tx.db.delete(scimUsers).where(eq(scimUsers.userId, id));
    await identityOf(keel).sessions.revokeAllForUser(tx.db, id, 'scim_deleted', tx.afterCommit);
    const [partner] = await tx.db.select({ id: partnerUsers.userId }).from(partnerUsers).where(eq(partnerUsers.userId, id));
    const accountDeleted = !partner && !current.isPlatformAdmin ? await deleteAccount(keel, tx, id) : false;
    await audit(ctx, tx.db, 'user.scim.delete', id, { accountDeleted });
  });
}

export interface ManagedUserView {
  id: string;
  userName: string;
  name: string;
  externalId: string | null;
  active: boolean;
  lastModified: string;
}

/** `GET /orgs/:orgId/scim-users`: the accounts the organisation's directory manages, oldest first (the console's list). */
export async function listManagedUsers(db: Db, orgId: string, q: { page: number; limit: number }): Promise<{ data: ManagedUserView[]; total: number }> {
  const where = eq(scimUsers.orgId, orgId);
  const [rows, [total]] = await Promise.all([
    joined(db).where(where).orderBy(asc(scimUsers.createdAt), asc(scimUsers.userId)).limit(q.limit).offset((q.page - 1) * q.limit) as Promise<Joined[]>,
    db.select({ n: count() }).from(scimUsers).where(where),
  ]);
  return {
    data: rows.map((j) => ({ id: j.row.userId, userName: j.email, name: j.name, externalId: j.row.externalId, active: j.status === 'active', lastModified: j.row.updatedAt.toISOString() })),
    total: total?.n ?? 0,
  };
}
