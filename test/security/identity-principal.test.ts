/**
 * docs/security.md "Findings", 1: an API key never acts on an account route. The account routes are taken from the
 * app's own route table (every `/auth/*` and `/users/me` handler), so a route added later is covered
 * without editing this file: it must refuse an API key with 403 `user_required`, or be named below
 * as public by design.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type ApiResponse, type TestApp } from '../helpers/app.js';
import { eq } from 'drizzle-orm';
import { createUser, jwtClaims, login, totpCode } from '../helpers/fixtures.js';
import { buildApp } from '../../src/app.js';
import { upgradeSession } from '../../src/modules/identity/service.js';
import { sessions, users } from '../../src/modules/identity/schema.js';

const API = '/api/v1';

/** Account paths that are public by design (no bearer is needed; a bearer is ignored). */
const PUBLIC = new Set([
  'POST /auth/register',
  'POST /auth/register-partner',
  'POST /auth/login',
  'POST /auth/refresh',
  'POST /auth/forgot-password',
  'POST /auth/reset-password',
  'POST /auth/accept-invite',
  'POST /auth/mfa/passkey/options',
  'POST /auth/mfa/passkey/verify',
  'POST /auth/passkey/options',
  'POST /auth/passkey/verify',
  'POST /auth/discover',
  'POST /auth/invitation',
]);
/** Public with a tempToken in the body; without one they act for the bearer, who must be a user. */
const MIXED: Record<string, unknown> = {
  'POST /auth/mfa/verify': { code: '123456' },
  'POST /auth/mfa/sms/send': {},
};

function accountRoutes(app: TestApp): { method: string; path: string }[] {
  const seen = new Set<string>();
  const out: { method: string; path: string }[] = [];
  for (const r of buildApp(app.server.keel).routes) {
    if (r.method === 'ALL' || !r.path.startsWith(API)) continue;
    const path = r.path.slice(API.length);
    if (!path.startsWith('/auth/') && path !== '/users/me' && !path.startsWith('/users/me/')) continue;
    const key = `${r.method} ${path}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ method: r.method, path });
  }
  return out;
}

const concrete = (path: string) => path.replace(/:[A-Za-z]+/g, () => randomUUID());

function expectUserRequired(res: ApiResponse, what: string): void {
  expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(403);
  expect(res.body.code, what).toBe('user_required');
  expect(JSON.stringify(res.body), what).not.toMatch(/accessToken|refreshToken/);
}

describe.skipIf(!backendAvailable())(`account routes refuse API keys (${backend})`, () => {
  let app: TestApp;
  let owner: { id: string; email: string; password: string };
  let ownerToken: string;
  let key: string;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    owner = await createUser(app, { platformAdmin: true });
    ownerToken = (await login(app, owner)).accessToken;
    const created = await app.api('POST', '/api-keys', { token: ownerToken, body: { name: 'devices only', permissions: [{ resource: 'devices', action: 'read' }] } });
    expect(created.status).toBe(201);
    key = created.body.key;
  });
  afterAll(async () => app?.close());

  it('the key is valid, and acts only within its permissions on resource routes', async () => {
    const partners = await app.api('GET', '/partners', { token: key });
    expect(partners.status).toBe(403);
    expect(partners.body.code).toBe('permission_denied');
  });

  it('every authenticated /auth/* and /users/me route of the route table answers an API key 403 user_required', async () => {
    const routes = accountRoutes(app);
    const names = routes.map((r) => `${r.method} ${r.path}`);
    // The table is the real one: the routes of the finding are in it.
    for (const expected of [
      'POST /auth/mfa/setup', 'POST /auth/mfa/enable', 'GET /auth/sessions', 'DELETE /auth/sessions/:id', 'PATCH /users/me', 'GET /users/me',
      'GET /auth/me', 'POST /auth/logout', 'POST /auth/change-password', 'POST /auth/phone/verify', 'POST /auth/passkeys/register/options', 'GET /auth/passkeys',
    ]) {
      expect(names).toContain(expected);
    }
    let checked = 0;
    for (const { method, path } of routes) {
      const name = `${method} ${path}`;
      if (PUBLIC.has(name)) continue;
      const body = MIXED[name] ?? (method === 'GET' || method === 'DELETE' ? undefined : {});
      expectUserRequired(await app.api(method, concrete(path), { token: key, ...(body === undefined ? {} : { body }) }), name);
      checked++;
    }
    expect(checked).toBeGreaterThanOrEqual(20);
  });

  it('public account routes ignore the key and never hand it tokens', async () => {
    for (const name of PUBLIC) {
      const [method, path] = name.split(' ') as [string, string];
      const res = await app.api(method, path, { token: key, body: {} });
      // A usernameless passkey challenge is given to anyone (it names no account); every other public route refuses an empty body.
      if (name === 'POST /auth/passkey/options') expect(Object.keys(res.body).sort(), name).toEqual(['challengeId', 'options']);
      else expect(res.status, name).toBeGreaterThanOrEqual(400);
      expect(JSON.stringify(res.body), name).not.toMatch(/accessToken|refreshToken/);
    }
  });

  it('the attack of the finding: setup, enable, sessions, profile, logout, password and factors all refuse the key', async () => {
    const setup = await app.api('POST', '/auth/mfa/setup', { token: key });
    expectUserRequired(setup, 'mfa/setup');
    // Even with a pending setup of the owner's and a valid code, enable refuses the key.
    const ownSetup = await app.api('POST', '/auth/mfa/setup', { token: ownerToken });
    expect(ownSetup.status).toBe(200);
    const code = await totpCode(ownSetup.body.secret);
    expectUserRequired(await app.api('POST', '/auth/mfa/enable', { token: key, body: { code } }), 'mfa/enable');
    expectUserRequired(await app.api('POST', '/auth/mfa/verify', { token: key, body: { code } }), 'mfa/verify without tempToken');
    expectUserRequired(await app.api('GET', '/auth/sessions', { token: key }), 'sessions');
    expectUserRequired(await app.api('PATCH', '/users/me', { token: key, body: { name: 'Mallory' } }), 'PATCH /users/me');
    expectUserRequired(await app.api('POST', '/auth/logout', { token: key }), 'logout');
    expectUserRequired(
      await app.api('POST', '/auth/change-password', { token: key, body: { currentPassword: owner.password, newPassword: 'another-strong-passphrase-77' } }),
      'change-password',
    );
    expectUserRequired(await app.api('POST', '/auth/phone/verify', { token: key, body: { phoneNumber: '+14155550123' } }), 'phone/verify');
    expectUserRequired(await app.api('POST', '/auth/passkeys/register/options', { token: key, body: { currentPassword: owner.password, name: 'k' } }), 'passkeys');
    // Nothing happened to the owner: still signed in, name unchanged, no MFA enrolled by the key.
    const me = await app.api('GET', '/auth/me', { token: ownerToken });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ name: 'Test User', mfaEnabled: false });
    // The owner can still finish their own enrolment with the same code.
    expect((await app.api('POST', '/auth/mfa/enable', { token: ownerToken, body: { code } })).status).toBe(200);
  });

  it('an unknown key is still 401 (not a 403 that would confirm it)', async () => {
    const res = await app.api('POST', '/auth/mfa/verify', { token: `kk_${'A'.repeat(43)}`, body: { code: '123456' } });
    expect(res.status).toBe(401);
    expect((await app.api('GET', '/auth/me', { token: `kk_${'A'.repeat(43)}` })).status).toBe(401);
  });

  it('upgradeSession upgrades only a live session of the user and never creates one', async () => {
    const keel = app.server.keel;
    const user = await createUser(app);
    const other = await createUser(app);
    const { accessToken } = await login(app, user);
    const sid = jwtClaims(accessToken).sid as string;
    const otherSid = jwtClaims((await login(app, other)).accessToken).sid as string;
    const [row] = await keel.db.select().from(users).where(eq(users.id, user.id));
    const sessionsOf = async () => (await keel.db.select().from(sessions).where(eq(sessions.userId, user.id))).length;

    const upgraded = await upgradeSession(keel, row!, sid);
    expect(jwtClaims(upgraded.accessToken)).toMatchObject({ sid, mfa: true });
    for (const id of [randomUUID(), otherSid]) {
      await expect(upgradeSession(keel, row!, id)).rejects.toMatchObject({ status: 401, code: 'invalid_token' });
    }
    expect((await app.api('POST', '/auth/logout', { token: upgraded.accessToken })).status).toBe(200);
    await expect(upgradeSession(keel, row!, sid)).rejects.toMatchObject({ status: 401 });
    expect(await sessionsOf()).toBe(1);
  });
});
