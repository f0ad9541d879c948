/**
 * SSO sessions and the second factor (docs/decisions.md "Verified domains and SSO step-up"): a
 * session is `mfa: true` when the provider asserted a second factor (OIDC `amr`, or an `acr` the
 * provider is configured to accept), and a person with a Keel factor steps an SSO session up with
 * `POST /auth/mfa/step-up`, so an organisation under `enforceSSO` can still change its provider.
 * A real oidc-provider signs users in.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { backendAvailable } from '../helpers/app.js';
import { createUser, enrollTotp, jwtClaims, login, nextTotpStep, totpCode, uniqueEmail } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { clock } from '../../src/platform/clock.js';
import { providerAssertedMfa } from '../../src/modules/sso/mfa.js';
import { Browser, startOidcIdp, type OidcIdp } from './idp.js';
import { ssoCodeOf, ssoWorld, type SsoWorld } from './helpers.js';

describe.skipIf(!backendAvailable())('SSO sessions carry the provider’s second factor; step-up with a Keel factor', () => {
  let w: SsoWorld;
  let idp: OidcIdp;
  let providerId: string;
  /** An Organization Admin with TOTP enrolled, who signs in through the IdP. */
  let admin: { id: string; email: string; password: string; secret: string; recoveryCodes: string[]; sub: string };

  beforeAll(async () => {
    w = await ssoWorld();
    idp = await startOidcIdp({ redirectUri: `${w.app.publicUrl}/api/v1/sso/callback` });
    const created = await w.api('POST', '/sso/providers', {
      token: w.adminToken,
      body: { name: 'IdP', type: 'oidc', preset: 'workforce-idp', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, defaultRoleId: SYSTEM_ROLES.orgReadOnly.id },
    });
    expect(created.status).toBe(201);
    providerId = created.body.id;
    const user = await createUser(w.app, { email: uniqueEmail('sso-admin'), org: { orgId: w.tenant.orgId, roleId: SYSTEM_ROLES.orgAdmin.id } });
    const enrolled = await enrollTotp(w.app, (await login(w.app, user)).accessToken);
    const sub = `sub-${randomBytes(6).toString('hex')}`;
    idp.accounts.set(sub, { sub, email: user.email, name: 'Sam Admin' });
    admin = { ...user, secret: enrolled.secret, recoveryCodes: enrolled.recoveryCodes, sub };
    expect((await w.api('POST', `/sso/providers/${providerId}/status`, { token: w.adminToken, body: { status: 'active' } })).status).toBe(200);
    expect((await w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body: { enforceSSO: true } })).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await idp?.close();
    await w?.app.close();
  });
  afterEach(() => clock.reset());

  /** Signs in through the IdP as `sub` with the given amr/acr, exchanges the code; answers the token answer. */
  async function ssoSession(sub: string, how: { amr?: string[]; acr?: string }): Promise<{ accessToken: string; refreshToken: string }> {
    const account = idp.accounts.get(sub)!;
    idp.accounts.set(sub, { sub: account.sub, email: account.email!, name: account.name!, ...how });
    const isApp = (l: string) => l.startsWith(w.app.publicUrl) && !l.includes('/api/v1/sso/callback');
    const { location } = await new Browser(w.app).signInAt(`${w.app.url}/api/v1/sso/login/${w.tenant.orgId}`, sub, isApp);
    const code = ssoCodeOf(location);
    expect(code, location).toBeTruthy();
    const ex = await w.api('POST', '/sso/exchange', { body: { code } });
    expect(ex.status, JSON.stringify(ex.body)).toBe(200);
    return ex.body;
  }

  const patch = (token: string, name: string) => w.api('PATCH', `/sso/providers/${providerId}`, { token, body: { name } });

  it('under enforceSSO the admin cannot sign in with a password (the lockout this fixes)', async () => {
    const res = await w.api('POST', '/auth/login', { body: { email: admin.email, password: admin.password } });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('sso_required');
  });

  it('an IdP asserting amr ["pwd","mfa"] gives an mfa: true session, and PATCH /sso/providers/:id works from it', async () => {
    const s = await ssoSession(admin.sub, { amr: ['pwd', 'mfa'] });
    expect(jwtClaims(s.accessToken).mfa).toBe(true);
    const res = await patch(s.accessToken, 'IdP (rotated by SSO admin)');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const audit = await w.api('GET', `/audit-logs?action=user.login&targetId=${admin.id}&limit=1`, { token: w.adminToken });
    expect(audit.body.data[0].details).toMatchObject({ providerId, idpMfa: true });
  });

  it('without amr the session is mfa: false (403 mfa_required); step-up with a TOTP code makes it mfa: true and the PATCH works', async () => {
    const s = await ssoSession(admin.sub, { amr: ['pwd'] });
    expect(jwtClaims(s.accessToken).mfa).toBe(false);
    const refused = await patch(s.accessToken, 'IdP before step-up');
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('mfa_required');

    const wrong = await w.api('POST', '/auth/mfa/step-up', { token: s.accessToken, body: { code: '000000' } });
    expect(wrong.status).toBe(400);
    expect(wrong.body.code).toBe('invalid_code');
    await nextTotpStep();
    const up = await w.api('POST', '/auth/mfa/step-up', { token: s.accessToken, body: { code: await totpCode(admin.secret) } });
    expect(up.status, JSON.stringify(up.body)).toBe(200);
    clock.reset();
    expect(jwtClaims(up.body.accessToken).mfa).toBe(true);
    // The same session, upgraded: its id stays, and the new pair works.
    expect(jwtClaims(up.body.accessToken).sid).toBe(jwtClaims(s.accessToken).sid);
    const ok = await patch(up.body.accessToken, 'IdP after step-up');
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const audit = await w.api('GET', `/audit-logs?action=auth.mfa.step_up&targetId=${admin.id}`, { token: w.adminToken });
    expect(audit.body.data.map((e: { result: string }) => e.result).sort()).toEqual(['failure', 'success']);
  });

  it('a recovery code steps up too; a user without a Keel factor gets 409 mfa_not_enabled', async () => {
    const s = await ssoSession(admin.sub, {});
    expect(jwtClaims(s.accessToken).mfa).toBe(false);
    const up = await w.api('POST', '/auth/mfa/step-up', { token: s.accessToken, body: { code: admin.recoveryCodes[0] } });
    expect(up.status, JSON.stringify(up.body)).toBe(200);
    expect(jwtClaims(up.body.accessToken).mfa).toBe(true);

    const plainSub = `sub-${randomBytes(6).toString('hex')}`;
    idp.accounts.set(plainSub, { sub: plainSub, email: uniqueEmail('jit'), name: 'Jit User' });
    const plain = await ssoSession(plainSub, {});
    const none = await w.api('POST', '/auth/mfa/step-up', { token: plain.accessToken, body: { code: '123456' } });
    expect(none.status).toBe(409);
    expect(none.body.code).toBe('mfa_not_enabled');
  });

  it('an acr the provider lists in mfaAcrValues counts as a second factor; another acr does not', async () => {
    const set = await w.api('PATCH', `/sso/providers/${providerId}`, { token: w.adminToken, body: { mfaAcrValues: ['urn:keel:test:mfa'] } });
    expect(set.status).toBe(200);
    expect(set.body.mfaAcrValues).toEqual(['urn:keel:test:mfa']);
    expect(jwtClaims((await ssoSession(admin.sub, { acr: 'urn:keel:test:mfa' })).accessToken).mfa).toBe(true);
    expect(jwtClaims((await ssoSession(admin.sub, { acr: 'urn:keel:test:pwd' })).accessToken).mfa).toBe(false);
  });

  it('providerAssertedMfa: the amr values of RFC 8176 that mean a second factor, and only configured acr values', () => {
    const p = { mfaAcrValues: ['urn:example:mfa'] };
    for (const amr of [['pwd', 'mfa'], ['otp'], ['hwk'], ['swk'], ['pop'], 'mfa']) expect(providerAssertedMfa(p, { amr }), JSON.stringify(amr)).toBe(true);
    for (const amr of [['pwd'], [], undefined, 'pwd', [1, 2], { mfa: true }]) expect(providerAssertedMfa(p, { amr }), JSON.stringify(amr)).toBe(false);
    expect(providerAssertedMfa(p, { acr: 'urn:example:mfa' })).toBe(true);
    expect(providerAssertedMfa(p, { acr: 'urn:example:pwd' })).toBe(false);
    expect(providerAssertedMfa({ mfaAcrValues: [] }, { acr: 'urn:example:mfa' })).toBe(false);
  });
});
