import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, enrollTotp, login, uniqueEmail, type Tenant } from '../helpers/fixtures.js';
import { together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { identityOf } from '../../src/modules/identity/context.js';
import { emailHash } from '../../src/modules/identity/sign-in-audit.js';
import { flushSecurityEvents } from '../../src/modules/audit/security-events.js';
import { auditSsoFailure } from '../../src/modules/sso/login.js';
import { SsoFailure } from '../../src/modules/sso/constants.js';
import { verifyChain, PLATFORM_CHAIN } from '../../src/modules/audit/chain.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { clock } from '../../src/platform/clock.js';

interface Entry {
  action: string;
  orgId: string | null;
  targetType: string | null;
  targetId: string | null;
  actorType: string;
  result: string;
  ipAddress: string | null;
  details: Record<string, unknown> | null;
}

/**
 * Failed and refused security events in the audit log: failed sign-ins (each reason), lockouts,
 * rate-limit refusals of sign-in routes, refused second factors, refused cross-tenant attempts; read
 * by the organisation's administrators for their own users; bounded per source address and minute.
 */
describe.skipIf(!backendAvailable())('audit log: failed and refused security events', () => {
  let app: TestApp;
  let tenant: Tenant;
  let adminToken: string;
  let source = 0;
  /** Each case claims its own source address (X-Forwarded-For through the trusted proxy). */
  const nextSource = () => `192.0.2.${++source}`;

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '5', LOGIN_IP_LIMIT: '1000', LOCKOUT_THRESHOLD: '3' } });
    tenant = await createTenant(app);
    adminToken = (await login(app, tenant.orgAdmin)).accessToken;
  });
  afterAll(async () => {
    clock.reset();
    await app?.close();
  });
  // Every case starts in a minute of its own: the aggregation is per source and minute.
  beforeEach(() => clock.advance(60_000));

  const settled = () => identityOf(app.server.keel).deferred.idle();
  const signIn = (email: string, password: string, ip: string) => app.api('POST', '/auth/login', { body: { email, password }, headers: { 'x-forwarded-for': ip } });
  async function orgEntries(action: string, token = adminToken): Promise<Entry[]> {
    const res = await app.api('GET', `/audit-logs?limit=100&action=${action}`, { token });
    expect(res.status).toBe(200);
    return res.body.data;
  }

  it('a wrong password, and a locked account, are read by the organisation\'s administrators: user.login.failed, user.lockout', async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const ip = nextSource();
    for (let i = 0; i < 3; i++) expect((await signIn(user.email, 'wrong-password-1', ip)).status).toBe(401);
    await settled();
    const failed = (await orgEntries('user.login.failed')).filter((e) => e.targetId === user.id);
    expect(failed).toHaveLength(1); // the first of the minute; the other two are counted
    expect(failed[0]).toMatchObject({ orgId: tenant.orgId, targetType: 'user', actorType: 'anonymous', result: 'failure', ipAddress: ip, details: { reason: 'wrong_password', count: 1 } });
    const lockout = (await orgEntries('user.lockout')).filter((e) => e.targetId === user.id);
    expect(lockout).toHaveLength(1);
    expect(lockout[0]).toMatchObject({ details: { reason: 'failed_logins' } });

    clock.advance(60_000);
    expect((await signIn(user.email, user.password, ip)).status).toBe(401);
    await settled();
    const reasons = (await orgEntries('user.login.failed')).filter((e) => e.targetId === user.id).map((e) => e.details?.reason);
    expect(reasons).toContain('locked');
    // Another organisation's administrator reads none of it.
    const other = await createUser(app, { org: { orgId: tenant.otherOrgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const otherToken = (await login(app, other)).accessToken;
    expect((await orgEntries('user.login.failed', otherToken)).filter((e) => e.targetId === user.id)).toEqual([]);
  });

  it('an unknown email is recorded under a keyed hash of the address, never the address, in the platform\'s log', async () => {
    const email = uniqueEmail('nobody');
    const ip = nextSource();
    expect((await signIn(email, 'whatever-password-9', ip)).status).toBe(401);
    await settled();
    const rows = await rawQuery<{ target_type: string; target_id: string; org_id: string | null; details: Record<string, unknown>; text: string }>(
      app.server.keel.db,
      `select target_type, target_id, org_id, details, a::text as text from audit_logs a where action = 'user.login.failed' and ip_address = $1`,
      [ip],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ target_type: 'email', target_id: emailHash(app.server.keel, email), org_id: null, details: { reason: 'unknown_email' } });
    expect(rows[0]!.text).not.toContain(email);
    expect(rows[0]!.text.toLowerCase()).not.toContain(email.split('@')[0]!.toLowerCase());
  });

  it('a rate-limit refusal of a sign-in route: auth.rate_limited, under the account\'s organisation', async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const ip = nextSource();
    // LOGIN_LIMIT=5 per address and email; the lockout (3) answers 401 before, the limiter 429 after.
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await signIn(user.email, 'wrong-password-2', ip)).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
    await settled();
    const limited = (await orgEntries('auth.rate_limited')).filter((e) => e.targetId === user.id);
    expect(limited).toHaveLength(1);
    expect(limited[0]).toMatchObject({ orgId: tenant.orgId, ipAddress: ip, details: { reason: 'rate_limited', route: 'login' } });
  });

  it('a refused second-factor code: auth.mfa.failed', async () => {
    const user = await createUser(app, { org: { orgId: tenant.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    await enrollTotp(app, (await login(app, user)).accessToken);
    const ip = nextSource();
    const challenge = await signIn(user.email, user.password, ip);
    expect(challenge.status).toBe(200);
    expect(challenge.body.tempToken).toBeTruthy();
    const wrong = await app.api('POST', '/auth/mfa/verify', { body: { tempToken: challenge.body.tempToken, code: '000000' }, headers: { 'x-forwarded-for': ip } });
    expect(wrong.status).toBe(401);
    await settled();
    const refused = (await orgEntries('auth.mfa.failed')).filter((e) => e.targetId === user.id);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ orgId: tenant.orgId, details: { reason: 'invalid_code' } });
  });

  it('a refused cross-tenant attempt: access.cross_tenant_refused under the caller\'s organisation; a made-up id is not one', async () => {
    const ip = nextSource();
    const res = await app.api('GET', `/audit-logs?orgId=${tenant.otherOrgId}`, { token: adminToken, headers: { 'x-forwarded-for': ip } });
    expect(res.status).toBe(404);
    const made = await app.api('GET', `/audit-logs?orgId=01900000-0000-7000-8000-00000000abcd`, { token: adminToken, headers: { 'x-forwarded-for': ip } });
    expect(made.status).toBe(404);
    const refused = (await orgEntries('access.cross_tenant_refused')).filter((e) => e.ipAddress === ip);
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ orgId: tenant.orgId, targetType: 'organization', targetId: tenant.otherOrgId, actorType: 'user', details: { method: 'GET' } });
    // A partner user naming another partner's organisation: under its partner.
    const otherTenant = await createTenant(app);
    const partnerTech = (await login(app, tenant.partnerTechnician)).accessToken;
    expect((await app.api('GET', `/audit-logs?orgId=${otherTenant.orgId}`, { token: partnerTech, headers: { 'x-forwarded-for': ip } })).status).toBe(404);
    const [row] = await rawQuery<{ partner_id: string; org_id: string | null }>(app.server.keel.db, `select partner_id, org_id from audit_logs where action = 'access.cross_tenant_refused' and target_id = $1`, [otherTenant.orgId]);
    expect(row).toEqual({ partner_id: tenant.partnerId, org_id: null });
  });

  it('refused SSO sign-ins (and refused identity links) are bounded per source and minute like the other refusals', async () => {
    const ip = nextSource();
    await flushSecurityEvents(app.server.keel.db);
    clock.freeze();
    const providerId = randomUUID();
    const info = { actor: { type: 'anonymous' as const }, ip };
    for (let i = 0; i < 30; i++) {
      const failure = new SsoFailure('sso_error', 'identity_subject_changed: another subject').about({ providerId, orgId: tenant.orgId, refusedSubject: `sub-${i}` });
      await auditSsoFailure(app.server.keel, failure, info);
    }
    const during = await rawQuery<{ action: string; details: Record<string, unknown> }>(app.server.keel.db, 'select action, details from audit_logs where ip_address = $1 order by chain_seq', [ip]);
    expect(during.map((r) => [r.action, r.details.count])).toEqual([['sso.login', 1], ['sso.identity.refused', 1]]);
    clock.advance(60_000);
    expect(await flushSecurityEvents(app.server.keel.db)).toBe(2);
    const after = await rawQuery<{ action: string; result: string; org_id: string; details: Record<string, unknown> }>(app.server.keel.db, 'select action, result, org_id, details from audit_logs where ip_address = $1 order by chain_seq', [ip]);
    expect(after).toHaveLength(4);
    expect(after.slice(2).map((r) => [r.action, r.result, r.org_id, r.details.count, r.details.aggregated]).sort()).toEqual([
      ['sso.identity.refused', 'failure', tenant.orgId, 30, true],
      ['sso.login', 'failure', tenant.orgId, 30, true],
    ]);
  });

  it('a flood of 200 failed sign-ins from one address writes two entries, the second with the total count, once the minute is over', async () => {
    const ip = nextSource();
    // Earlier tests' buckets whose minute is over are written first; the flood happens on a frozen
    // clock, so it falls in one minute however slow the machine.
    await flushSecurityEvents(app.server.keel.db);
    clock.freeze();
    const before = await rawQuery<{ n: string }>(app.server.keel.db, 'select count(*) as n from audit_logs', []);
    await together(20, async (w) => {
      for (let i = 0; i < 10; i++) expect((await signIn(uniqueEmail(`flood${w}`), 'not-the-password-7', ip)).status).toBe(401);
    });
    await settled();
    const during = await rawQuery<{ details: Record<string, unknown> }>(app.server.keel.db, `select details from audit_logs where action = 'user.login.failed' and ip_address = $1`, [ip]);
    expect(during.map((r) => r.details.count)).toEqual([1]);
    // Within the minute nothing more is written; after it, one entry with the minute's total.
    expect(await flushSecurityEvents(app.server.keel.db)).toBe(0);
    clock.advance(60_000);
    expect(await flushSecurityEvents(app.server.keel.db)).toBeGreaterThanOrEqual(1);
    const after = await rawQuery<{ details: Record<string, unknown> }>(app.server.keel.db, `select details from audit_logs where action = 'user.login.failed' and ip_address = $1 order by chain_seq`, [ip]);
    expect(after).toHaveLength(2);
    expect(after[1]!.details).toMatchObject({ count: 200, aggregated: true });
    const total = await rawQuery<{ n: string }>(app.server.keel.db, 'select count(*) as n from audit_logs', []);
    expect(Number(total[0]!.n) - Number(before[0]!.n)).toBeLessThanOrEqual(4);
    // The buckets are gone, and the chains the entries joined still hold.
    expect(await rawQuery(app.server.keel.db, 'select 1 from audit_event_buckets where source = $1', [ip])).toEqual([]);
    expect((await verifyChain(app.server.keel.db, PLATFORM_CHAIN)).ok).toBe(true);
    expect((await verifyChain(app.server.keel.db, tenant.orgId)).ok).toBe(true);
  });
});
