import { randomBytes } from 'node:crypto';
import type { TestApp } from './app.js';
import { users } from '../../src/modules/identity/schema.js';
import { hashPassword } from '../../src/modules/identity/passwords.js';
import { addOrganizationMember, addPartnerMember } from '../../src/modules/access/service.js';
import { createOrganization, createPartner } from '../../src/modules/tenancy/service.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

/** A password that passes the strength check. */
export const STRONG_PASSWORD = 'correct-horse-battery-staple-42';

export function uniqueEmail(prefix = 'user'): string {
  return `${prefix}-${randomBytes(5).toString('hex')}@example.com`;
}

export interface TestUser {
  id: string;
  email: string;
  password: string;
}

export interface CreateUserOptions {
  email?: string;
  password?: string;
  name?: string;
  status?: 'active' | 'invited' | 'disabled';
  platformAdmin?: boolean;
  partner?: { partnerId: string; roleId: string; orgAccess?: 'all' | 'selected' | 'none'; orgIds?: string[] };
  org?: { orgId: string; roleId: string; siteIds?: string[] | null; deviceGroupIds?: string[] | null };
}

/** Creates an account (and its membership) straight in the database: the arrangement step of a test. */
export async function createUser(app: TestApp, opts: CreateUserOptions = {}): Promise<TestUser> {
  const db = app.server.keel.db;
  const email = opts.email ?? uniqueEmail();
  const password = opts.password ?? STRONG_PASSWORD;
  const [row] = await db
    .insert(users)
    .values({
      email,
      name: opts.name ?? 'Test User',
      passwordHash: await hashPassword(password),
      status: opts.status ?? 'active',
      isPlatformAdmin: opts.platformAdmin ?? false,
    })
    .returning({ id: users.id });
  const id = row!.id;
  if (opts.partner) await addPartnerMember(db, { ...opts.partner, userId: id });
  if (opts.org) await addOrganizationMember(db, { ...opts.org, userId: id });
  return { id, email, password };
}

/** Signs in through the API; fails the test unless tokens come back. */
export async function login(app: TestApp, user: { email: string; password: string }): Promise<{ accessToken: string; refreshToken: string; cookies: string[]; body: any }> {
  const res = await app.api('POST', '/auth/login', { body: { email: user.email, password: user.password } });
  if (res.status !== 200 || !res.body.accessToken) throw new Error(`login failed: ${res.status} ${JSON.stringify(res.body)}`);
  return { accessToken: res.body.accessToken, refreshToken: res.body.refreshToken, cookies: res.cookies, body: res.body };
}

export interface Tenant {
  partnerId: string;
  orgId: string;
  otherOrgId: string;
  partnerAdmin: TestUser;
  partnerTechnician: TestUser;
  orgAdmin: TestUser;
  orgTechnician: TestUser;
  orgReadOnly: TestUser;
}

/**
 * A partner with two organisations and a user of each seeded role. Partner Admins have Force MFA:
 * once the MFA gate is on they need a factor enrolled before protected routes answer.
 */
export async function createTenant(app: TestApp): Promise<Tenant> {
  const db = app.server.keel.db;
  const partner = await createPartner(db, { name: `Partner ${randomBytes(3).toString('hex')}` });
  const org = await createOrganization(db, { name: 'Org A', partnerId: partner.id });
  const other = await createOrganization(db, { name: 'Org B', partnerId: partner.id });
  return {
    partnerId: partner.id,
    orgId: org.id,
    otherOrgId: other.id,
    partnerAdmin: await createUser(app, { name: 'Partner Admin', partner: { partnerId: partner.id, roleId: SYSTEM_ROLES.partnerAdmin.id } }),
    partnerTechnician: await createUser(app, { name: 'Partner Tech', partner: { partnerId: partner.id, roleId: SYSTEM_ROLES.partnerTechnician.id } }),
    orgAdmin: await createUser(app, { name: 'Org Admin', org: { orgId: org.id, roleId: SYSTEM_ROLES.orgAdmin.id } }),
    orgTechnician: await createUser(app, { name: 'Org Tech', org: { orgId: org.id, roleId: SYSTEM_ROLES.orgTechnician.id } }),
    orgReadOnly: await createUser(app, { name: 'Org Reader', org: { orgId: org.id, roleId: SYSTEM_ROLES.orgReadOnly.id } }),
  };
}

/** The value of a Set-Cookie header by cookie name, with its attributes. */
export function cookie(setCookies: string[], name: string): { value: string; attributes: string } | undefined {
  const line = setCookies.find((c) => c.startsWith(`${name}=`));
  if (!line) return undefined;
  const [pair = '', ...attrs] = line.split(';');
  return { value: decodeURIComponent(pair.slice(name.length + 1)), attributes: attrs.map((a) => a.trim()).join('; ') };
}

/** A TOTP code as an authenticator app would show it at Keel's (controllable) clock. */
export async function totpCode(secret: string, offsetSeconds = 0): Promise<string> {
  const { generate } = await import('otplib');
  const { clock } = await import('../../src/platform/clock.js');
  return generate({ secret, epoch: clock.nowSeconds() + offsetSeconds });
}

/** Moves Keel's clock to the next 30-second TOTP step, so the next code is a fresh one. */
export async function nextTotpStep(): Promise<void> {
  const { clock } = await import('../../src/platform/clock.js');
  clock.advance(30_000);
}

/**
 * Enrols an authenticator app for the signed-in user (setup + enable) and returns the secret, the
 * recovery codes and the upgraded tokens. Use it for Force-MFA users (Partner Admins) before
 * calling protected routes.
 */
export async function enrollTotp(app: TestApp, accessToken: string): Promise<{ secret: string; recoveryCodes: string[]; accessToken: string; refreshToken: string }> {
  const setup = await app.api('POST', '/auth/mfa/setup', { token: accessToken });
  if (setup.status !== 200) throw new Error(`mfa setup failed: ${setup.status} ${JSON.stringify(setup.body)}`);
  const secret = setup.body.secret as string;
  const enable = await app.api('POST', '/auth/mfa/enable', { token: accessToken, body: { code: await totpCode(secret) } });
  if (enable.status !== 200) throw new Error(`mfa enable failed: ${enable.status} ${JSON.stringify(enable.body)}`);
  return { secret, recoveryCodes: enable.body.recoveryCodes, accessToken: enable.body.accessToken, refreshToken: enable.body.refreshToken };
}

/** The claims of a JWT, unverified (tests read `mfa`, `sid`). */
export function jwtClaims(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as Record<string, unknown>;
}
