/**
 * `DELETE /partners/:id`: platform administrators only; 409 `partner_not_empty` while organisations
 * remain; audited; the partner's members lose their association (the accounts stay), its roles and API
 * keys go (docs/decisions.md "Console enrolment, devices in their group's site, helpdesk tasks").
 * Partner users and API keys are refused on their own partner and on another tenant's real one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createWorld, type World } from '../access/helpers.js';
import { createUser, login } from '../helpers/fixtures.js';
import { raceTest, together } from '../helpers/race.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';

describe.skipIf(!backendAvailable())(`DELETE /partners/:id (${backend})`, () => {
  let app: TestApp;
  let w: World;
  let other: World;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    w = await createWorld(app);
    other = await createWorld(app);
  });
  afterAll(async () => app?.close());

  const newPartner = async (name: string) => {
    const res = await app.api('POST', '/partners', { token: w.tokens.platformAdmin, body: { name } });
    expect(res.status).toBe(201);
    return res.body.id as string;
  };

  it('partner users and their API keys are refused, on their own partner and on another tenant’s (403 scope_forbidden); nothing is deleted', async () => {
    const key = await app.api('POST', '/api-keys', { token: w.tokens.partnerFull, body: { name: 'wide', permissions: [{ resource: '*', action: '*' }] } });
    expect(key.status).toBe(201);
    for (const token of [w.tokens.partnerFull, key.body.key as string, w.tokens.orgAdmin]) {
      for (const target of [w.partnerId, other.partnerId]) {
        const res = await app.api('DELETE', `/partners/${target}`, { token });
        expect({ target, status: res.status, code: res.body?.code }).toEqual({ target, status: 403, code: 'scope_forbidden' });
      }
    }
    for (const target of [w.partnerId, other.partnerId]) expect((await app.api('GET', `/partners/${target}`, { token: w.tokens.platformAdmin })).status).toBe(200);
  });

  it('a partner with organisations: 409 partner_not_empty naming how many; the partner and its organisations stay', async () => {
    const res = await app.api('DELETE', `/partners/${other.partnerId}`, { token: w.tokens.platformAdmin });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'partner_not_empty', details: { organizations: 2 } });
    for (const org of [other.orgId, other.otherOrgId]) expect((await app.api('GET', `/orgs/${org}`, { token: w.tokens.platformAdmin })).body.partnerId).toBe(other.partnerId);
  });

  it('an empty partner: 204, audited; its member keeps the account but loses the association; a second delete is 404', async () => {
    const id = await newPartner('Going away');
    const member = await createUser(app, { name: 'Member', partner: { partnerId: id, roleId: SYSTEM_ROLES.partnerTechnician.id } });
    const memberToken = (await login(app, member)).accessToken;
    expect((await app.api('GET', `/partners/${id}`, { token: memberToken })).status).toBe(200);
    const res = await app.api('DELETE', `/partners/${id}`, { token: w.tokens.platformAdmin });
    expect(res.status).toBe(204);
    expect((await app.api('GET', `/partners/${id}`, { token: w.tokens.platformAdmin })).status).toBe(404);
    expect((await app.api('DELETE', `/partners/${id}`, { token: w.tokens.platformAdmin })).status).toBe(404);
    const audit = await app.api('GET', '/audit-logs?action=partner.delete', { token: w.tokens.platformAdmin });
    expect(audit.body.data.filter((e: { targetId: string }) => e.targetId === id).map((e: { details: unknown }) => e.details)).toEqual([{ name: 'Going away', members: 1 }]);
    // The account stays; without its association it reaches no partner any more.
    expect((await app.api('GET', '/users/me', { token: memberToken })).status).toBe(200);
    const after = await app.api('GET', `/partners/${id}`, { token: memberToken });
    expect(after.status).toBe(403);
    expect(after.body.code).toBe('context_required');
    // Another tenant's partner is untouched.
    expect((await app.api('GET', `/partners/${other.partnerId}`, { token: w.tokens.platformAdmin })).status).toBe(200);
  });

  raceTest('a partner deleted while an organisation is created in it: one of the two wins, never a 500', async () => {
    const id = await newPartner('Raced');
    const [del, made] = await together(2, (i) =>
      i === 0
        ? app.api('DELETE', `/partners/${id}`, { token: w.tokens.platformAdmin })
        : app.api('POST', `/orgs?partnerId=${id}`, { token: w.tokens.platformAdmin, body: { name: 'Late' } }),
    );
    expect([del?.status, made?.status]).not.toContain(500);
    if (del?.status === 204) expect(made?.status).toBe(404);
    else expect([del?.status, made?.status]).toEqual([409, 201]);
  });
});
