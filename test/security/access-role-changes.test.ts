/**
 * docs/security.md "Findings", 5 (the role side), and the last administrator race: changing a role needs the
 * caller to hold both what it grants now and what it will grant; no partner or organisation is left
 * without a `*:*` holder by a role edit; and the last-holder rule holds under concurrent requests on
 * PostgreSQL (one lock per tenant, taken before counting).
 */
import { and, eq } from 'drizzle-orm';
import { auditLogs } from '../../src/modules/audit/schema.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type ApiResponse, type TestApp } from '../helpers/app.js';
import { createUser, login } from '../helpers/fixtures.js';
import { behindLock, raceTest, together } from '../helpers/race.js';
import { createOrganization, createPartner } from '../../src/modules/tenancy/service.js';
import { countFullAdmins, FULL_ADMIN_LOCK, fullAdminLockKey } from '../../src/modules/access/service.js';
import { roles } from '../../src/modules/access/schema.js';
import { createWorld, insertRole, keys, ROLE, type World } from '../access/helpers.js';

const LAST_ADMIN = { code: 'last_admin', error: 'This would leave no user with full administrative access (*:*) in this scope' };

describe.skipIf(!backendAvailable())(`role changes (${backend})`, () => {
  let app: TestApp;
  let w: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const effective = async (roleId: string) => {
    const res = await app.api('GET', `/roles/${roleId}/effective-permissions`, { token: w.tokens.platformAdmin });
    return keys([...res.body.direct, ...res.body.inherited]);
  };
  /** A fresh organisation of the world's partner (so each case counts its own administrators). */
  const freshOrg = async (name: string) => (await createOrganization(app.server.keel.db, { name, partnerId: w.partnerId })).id;

  describe('changing a role needs its current permissions too', () => {
    it('a Helpdesk user (users:*) cannot patch, rename or delete the *:* Security Admins role, and it keeps its holders', async () => {
      const org = await freshOrg('Helpdesk org');
      const security = await insertRole(app, { scope: 'organization', orgId: org, name: 'Security Admins', perms: ['*:*'], forceMfa: true });
      const helpdesk = await insertRole(app, { scope: 'organization', orgId: org, name: 'Helpdesk', perms: ['users:read', 'users:write', 'users:invite', 'users:delete'] });
      await createUser(app, { org: { orgId: org, roleId: security } });
      await createUser(app, { org: { orgId: org, roleId: security } });
      const token = (await login(app, await createUser(app, { org: { orgId: org, roleId: helpdesk } }))).accessToken;

      // The attack of the review: strip the role down to something the caller holds.
      const strip = await app.api('PATCH', `/roles/${security}`, { token, body: { forceMfa: false, permissions: [{ resource: 'users', action: 'read' }] } });
      expect(strip.status).toBe(403);
      expect(strip.body).toMatchObject({ code: 'privilege_escalation', details: { permissions: ['*:*'] } });
      for (const body of [{ name: 'Renamed' }, { forceMfa: false }, { parentRoleId: null }]) {
        const res = await app.api('PATCH', `/roles/${security}`, { token, body });
        expect(res.status, JSON.stringify(body)).toBe(403);
        expect(res.body.code).toBe('privilege_escalation');
      }
      const unused = await insertRole(app, { scope: 'organization', orgId: org, name: 'Unused admins', perms: ['*:*'] });
      const del = await app.api('DELETE', `/roles/${unused}`, { token });
      expect(del.status).toBe(403);
      expect(del.body.code).toBe('privilege_escalation');

      const [row] = await app.server.keel.db.select().from(roles).where(eq(roles.id, security));
      expect(row).toMatchObject({ name: 'Security Admins', forceMfa: true });
      expect(await effective(security)).toEqual(['*:*']);
      expect((await app.api('GET', `/roles/${unused}`, { token })).status).toBe(200);
      // A role within the caller's permissions it can still change and delete.
      const mine = await insertRole(app, { scope: 'organization', orgId: org, name: 'Readers', perms: ['users:read'] });
      expect((await app.api('PATCH', `/roles/${mine}`, { token, body: { name: 'User readers', permissions: [{ resource: 'users', action: 'write' }] } })).status).toBe(200);
      expect((await app.api('DELETE', `/roles/${mine}`, { token })).status).toBe(204);
    });

    it('inherited grants count as current permissions: a role below a *:* parent is out of reach too', async () => {
      const org = await freshOrg('Inherit org');
      const parent = await insertRole(app, { scope: 'organization', orgId: org, perms: ['*:*'] });
      const child = await insertRole(app, { scope: 'organization', orgId: org, perms: [], parentRoleId: parent });
      const helpdesk = await insertRole(app, { scope: 'organization', orgId: org, perms: ['users:read', 'users:write', 'users:delete'] });
      const token = (await login(app, await createUser(app, { org: { orgId: org, roleId: helpdesk } }))).accessToken;
      const cut = await app.api('PATCH', `/roles/${child}`, { token, body: { parentRoleId: null } });
      expect(cut.status).toBe(403);
      expect(cut.body).toMatchObject({ code: 'privilege_escalation', details: { permissions: ['*:*'] } });
      expect((await app.api('DELETE', `/roles/${child}`, { token })).body.code).toBe('privilege_escalation');
    });
  });

  describe('a role edit never leaves a partner or organisation without a *:* holder', () => {
    it('demoting the permissions of the role its only administrators hold is 409 last_admin', async () => {
      const org = await freshOrg('Demote org');
      const admins = await insertRole(app, { scope: 'organization', orgId: org, name: 'Admins', perms: ['*:*'] });
      await createUser(app, { org: { orgId: org, roleId: admins } });
      await createUser(app, { org: { orgId: org, roleId: admins } });
      const res = await app.api('PATCH', `/roles/${admins}`, { token: w.tokens.partnerFull, body: { name: 'Demoted', permissions: [{ resource: 'devices', action: 'read' }] } });
      expect(res.status).toBe(409);
      expect(res.body).toEqual(LAST_ADMIN);
      expect(await effective(admins)).toEqual(['*:*']);
      const [row] = await app.server.keel.db.select().from(roles).where(eq(roles.id, admins));
      expect(row?.name).toBe('Admins');
      // Another administrator (through the system role) in the organisation: now the demotion goes through.
      await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
      const ok = await app.api('PATCH', `/roles/${admins}`, { token: w.tokens.partnerFull, body: { permissions: [{ resource: 'devices', action: 'read' }] } });
      expect(ok.status).toBe(200);
      expect(await countFullAdmins(app.server.keel.db, { orgId: org })).toBe(1);
    });

    it('cutting a holder’s role off its *:* parent, or demoting that parent, is 409 last_admin', async () => {
      const org = await freshOrg('Parent org');
      const parent = await insertRole(app, { scope: 'organization', orgId: org, name: 'Full', perms: ['*:*'] });
      const child = await insertRole(app, { scope: 'organization', orgId: org, name: 'Via parent', perms: ['devices:read'], parentRoleId: parent });
      await createUser(app, { org: { orgId: org, roleId: child } });
      const token = w.tokens.partnerFull;
      const cut = await app.api('PATCH', `/roles/${child}`, { token, body: { parentRoleId: null } });
      expect(cut.status).toBe(409);
      expect(cut.body).toEqual(LAST_ADMIN);
      const demote = await app.api('PATCH', `/roles/${parent}`, { token, body: { permissions: [{ resource: 'devices', action: '*' }] } });
      expect(demote.status).toBe(409);
      expect(demote.body).toEqual(LAST_ADMIN);
      expect(await effective(child)).toEqual(['*:*', 'devices:read']);
      // A role nobody holds, in an organisation with no administrator at all, is free to change.
      const empty = await freshOrg('Empty org');
      const unheld = await insertRole(app, { scope: 'organization', orgId: empty, perms: ['*:*'] });
      expect((await app.api('PATCH', `/roles/${unheld}`, { token, body: { permissions: [] } })).status).toBe(200);
    });

    it('holds for a partner’s own administrators too', async () => {
      const partner = await createPartner(app.server.keel.db, { name: 'Small MSP' });
      const admins = await insertRole(app, { scope: 'partner', partnerId: partner.id, name: 'Owners', perms: ['*:*'] });
      await createUser(app, { partner: { partnerId: partner.id, roleId: admins } });
      const res = await app.api('PATCH', `/roles/${admins}`, { token: w.tokens.platformAdmin, body: { permissions: [{ resource: 'users', action: 'read' }] } });
      expect(res.status).toBe(409);
      expect(res.body).toEqual(LAST_ADMIN);
      expect(await countFullAdmins(app.server.keel.db, { partnerId: partner.id })).toBe(1);
    });

    it('a disabled administrator does not count: the last active one can be neither disabled nor removed, nor its role demoted', async () => {
      const org = await freshOrg('Disabled org');
      const admins = await insertRole(app, { scope: 'organization', orgId: org, name: 'Admins', perms: ['*:*'] });
      const active = await createUser(app, { org: { orgId: org, roleId: admins } });
      const disabled = await createUser(app, { status: 'disabled', org: { orgId: org, roleId: ROLE.orgAdmin } });
      const token = w.tokens.partnerFull;
      for (const [method, path, body] of [
        ['PATCH', `/users/${active.id}`, { status: 'disabled' }],
        ['DELETE', `/users/${active.id}`, undefined],
        ['POST', `/users/${active.id}/role`, { roleId: ROLE.orgReadOnly }],
        ['PATCH', `/roles/${admins}`, { permissions: [{ resource: 'devices', action: 'read' }] }],
      ] as const) {
        const res = await app.api(method, path, { token, ...(body ? { body } : {}) });
        expect({ status: res.status, body: res.body }, `${method} ${path}`).toEqual({ status: 409, body: LAST_ADMIN });
      }
      // The disabled one may go: it takes nothing away (also where it is the only holder left).
      expect((await app.api('DELETE', `/users/${disabled.id}`, { token })).status).toBe(204);
      expect(await countFullAdmins(app.server.keel.db, { orgId: org })).toBe(1);
      const lone = await freshOrg('Lone disabled org');
      const gone = await createUser(app, { status: 'disabled', org: { orgId: lone, roleId: ROLE.orgAdmin } });
      expect((await app.api('DELETE', `/users/${gone.id}`, { token })).status).toBe(204);
    });

    it('a role with holders or child roles is not deleted (role_in_use), so a delete cannot take *:* from anyone', async () => {
      const org = await freshOrg('Delete org');
      const parent = await insertRole(app, { scope: 'organization', orgId: org, perms: ['*:*'] });
      const child = await insertRole(app, { scope: 'organization', orgId: org, perms: [], parentRoleId: parent });
      await createUser(app, { org: { orgId: org, roleId: child } });
      for (const id of [parent, child]) {
        const res = await app.api('DELETE', `/roles/${id}`, { token: w.tokens.partnerFull });
        expect(res.status).toBe(400);
        expect(res.body.code).toBe('role_in_use');
      }
      expect(await countFullAdmins(app.server.keel.db, { orgId: org })).toBe(1);
    });
  });

  describe('under concurrent requests (PostgreSQL)', () => {
    const ROUNDS = 10;
    const expectOneSuccess = (answers: ApiResponse[], success: number[]) => {
      const statuses = answers.map((a) => a.status);
      expect(statuses.filter((s) => success.includes(s)), `statuses: ${statuses.join(', ')}`).toHaveLength(1);
      const loser = answers.find((a) => !success.includes(a.status))!;
      expect({ status: loser.status, body: loser.body }, `statuses: ${statuses.join(', ')}`).toEqual({ status: 409, body: LAST_ADMIN });
    };
    /** Holds the organisation's last-administrator lock until both requests wait on it. */
    const bothAtTheLock = <T>(orgId: string, requests: () => Promise<T>) =>
      behindLock(app.server.keel.config.DATABASE_URL!, `select pg_advisory_xact_lock(${FULL_ADMIN_LOCK}, hashtext('${fullAdminLockKey({ orgId })}'))`, 2, requests);

    raceTest(`two organisation administrators removing each other at once, ${ROUNDS} rounds: the organisation always keeps a *:* holder, the loser gets 409 last_admin`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const org = await freshOrg(`Duel ${round}`);
        const a = await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
        const b = await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
        const [ta, tb] = [(await login(app, a)).accessToken, (await login(app, b)).accessToken];
        // Both requests pass authentication and wait on the organisation's lock before either goes on
        // (else the second could come after the first committed, and find its session revoked: 401).
        const answers = await bothAtTheLock(org, () => together(2, (i) => app.api('DELETE', `/users/${i === 0 ? b.id : a.id}`, { token: i === 0 ? ta : tb })));
        expectOneSuccess(answers, [204]);
        expect(await countFullAdmins(app.server.keel.db, { orgId: org }), `round ${round}`).toBe(1);
      }
    }, 120_000);

    raceTest(`two organisation administrators disabling each other at once, ${ROUNDS} rounds: one stays active, the loser gets 409 last_admin`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const org = await freshOrg(`Disable duel ${round}`);
        const a = await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
        const b = await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
        const [ta, tb] = [(await login(app, a)).accessToken, (await login(app, b)).accessToken];
        const answers = await bothAtTheLock(org, () =>
          together(2, (i) => app.api('PATCH', `/users/${i === 0 ? b.id : a.id}`, { token: i === 0 ? ta : tb, body: { status: 'disabled' } })),
        );
        expectOneSuccess(answers, [200]);
        // A disabled administrator is no administrator: exactly one active *:* holder is left.
        expect(await countFullAdmins(app.server.keel.db, { orgId: org }), `round ${round}`).toBe(1);
      }
    }, 120_000);

    const auditCount = async (action: string, userId: string) =>
      (await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, action), eq(auditLogs.targetId, userId)))).length;

    raceTest('two administrators removing the same member at once: one 204, the other 404, one audit entry', async () => {
      const org = await freshOrg('Double remove');
      const [a, b] = [await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } }), await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } })];
      const member = await createUser(app, { org: { orgId: org, roleId: ROLE.orgTechnician } });
      const [ta, tb] = [(await login(app, a)).accessToken, (await login(app, b)).accessToken];
      const answers = await bothAtTheLock(org, () => together(2, (i) => app.api('DELETE', `/users/${member.id}`, { token: i === 0 ? ta : tb })));
      expect(answers.map((x) => x.status).sort()).toEqual([204, 404]);
      expect(await auditCount('user.remove', member.id)).toBe(1);
    });

    raceTest('two administrators disabling the same member at once: both see it disabled, one change is recorded', async () => {
      const org = await freshOrg('Double disable');
      const [a, b] = [await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } }), await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } })];
      const member = await createUser(app, { org: { orgId: org, roleId: ROLE.orgTechnician } });
      const [ta, tb] = [(await login(app, a)).accessToken, (await login(app, b)).accessToken];
      const answers = await bothAtTheLock(org, () =>
        together(2, (i) => app.api('PATCH', `/users/${member.id}`, { token: i === 0 ? ta : tb, body: { status: 'disabled', ...(i === 1 ? { name: 'Renamed' } : {}) } })),
      );
      expect(answers.map((x) => x.status)).toEqual([200, 200]);
      for (const x of answers) expect(x.body.status).toBe('disabled');
      const entries = await app.server.keel.db.select().from(auditLogs).where(and(eq(auditLogs.action, 'user.update'), eq(auditLogs.targetId, member.id)));
      // One entry disables; the other request's name change is still made and recorded (alone, if it came second).
      expect(entries.filter((e) => (e.details as { status?: string } | null)?.status === 'disabled')).toHaveLength(1);
      expect((await app.api('GET', `/users/${member.id}`, { token: ta })).body.name).toBe('Renamed');
    });

    raceTest(`a role PATCH that demotes the administrators racing the removal of the other administrator, ${ROUNDS} rounds: one wins, the other is 409 last_admin`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const org = await freshOrg(`Race ${round}`);
        const admins = await insertRole(app, { scope: 'organization', orgId: org, name: 'Admins', perms: ['*:*'] });
        await createUser(app, { org: { orgId: org, roleId: admins } });
        const other = await createUser(app, { org: { orgId: org, roleId: ROLE.orgAdmin } });
        const token = w.tokens.partnerFull;
        const answers = await together(2, (i) =>
          i === 0
            ? app.api('PATCH', `/roles/${admins}`, { token, body: { permissions: [{ resource: 'devices', action: 'read' }] } })
            : app.api('DELETE', `/users/${other.id}`, { token }),
        );
        expectOneSuccess(answers, [200, 204]);
        expect(await countFullAdmins(app.server.keel.db, { orgId: org }), `round ${round}`).toBe(1);
      }
    }, 120_000);
  });
});

