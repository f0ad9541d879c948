/**
 * Sign-in discovery (docs/decisions.md "Sign-in options"): `POST /auth/discover {email}` answers from
 * the email's domain only: `sso` with the provider's login URL when an organisation with an active
 * provider verified the domain (`passwordAllowed` from enforceSSO), else `password`; `passkey` for the
 * deployment. Every address of a domain, with an account or without, gets the same bytes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, type Tenant } from '../helpers/fixtures.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { verifiedDomains } from '../../src/modules/domains/schema.js';
import { ssoProviders } from '../../src/modules/sso/schema.js';
import { DEFAULT_MAPPING } from '../../src/modules/sso/presets.js';

describe.skipIf(!backendAvailable())('sign-in discovery', () => {
  let app: TestApp;
  let open: Tenant;
  let enforced: Tenant;
  const fresh = (label: string) => `${label}-${randomBytes(4).toString('hex')}.example`;
  const openDomain = fresh('open');
  const enforcedDomain = fresh('enforced');
  const pendingDomain = fresh('pending');

  beforeAll(async () => {
    app = await startTestApp({ publicUrlFromPort: true, env: { DISCOVER_LIMIT: '3', DISCOVER_IP_LIMIT: '40' } });
    const db = app.server.keel.db;
    open = await createTenant(app);
    enforced = await createTenant(app);
    for (const [t, enforceSso] of [[open, false], [enforced, true]] as const) {
      await db.insert(ssoProviders).values({ orgId: t.orgId, name: 'IdP', type: 'oidc', scopes: 'openid', attributeMapping: DEFAULT_MAPPING, status: 'active', enforceSso });
    }
    await db.insert(verifiedDomains).values([
      { orgId: open.orgId, domain: openDomain, status: 'verified', token: 't1', verifiedAt: new Date() },
      { orgId: enforced.orgId, domain: enforcedDomain, status: 'verified', token: 't2', verifiedAt: new Date() },
      { orgId: enforced.orgId, domain: pendingDomain, status: 'pending', token: 't3' },
    ]);
  }, 60_000);
  afterAll(async () => {
    await app?.close();
  });

  /** The answer as sent (the parsed body re-serialised keeps its key order). */
  const bytes = (r: { body: unknown }) => JSON.stringify(r.body);
  let n = 0;
  /** Each call from its own source address, so only the per-address limit is in play unless a test says otherwise. */
  const discover = (email: string, ip = `192.0.2.${++n}`) => app.api('POST', '/auth/discover', { body: { email }, headers: { 'x-forwarded-for': ip } });

  it('answers password for a domain no one verified, the same bytes with and without an account', async () => {
    const known = await createUser(app);
    const a = await discover(known.email);
    const b = await discover(`nobody-${randomBytes(3).toString('hex')}@${known.email.split('@')[1]}`);
    expect(a.status).toBe(200);
    expect(a.body).toEqual({ method: 'password', passwordAllowed: true, passkey: true });
    expect(bytes(b)).toBe(bytes(a));
    // A pending claim does not route anyone.
    expect((await discover(`x@${pendingDomain}`)).body).toEqual({ method: 'password', passwordAllowed: true, passkey: true });
  });

  it('sends an address of a verified domain with an active provider to SSO, the same for members, outsiders, partner users and unknown addresses', async () => {
    const member = await createUser(app, { email: `member@${openDomain}`, org: { orgId: open.orgId, roleId: SYSTEM_ROLES.orgReadOnly.id } });
    const answers = await Promise.all(
      [member.email, `nobody@${openDomain}`, `NoBody@${openDomain.toUpperCase()}`, `sub@mail.${openDomain}`].map((e) => discover(e)),
    );
    expect(answers[0]!.body).toEqual({ method: 'sso', loginUrl: `${app.publicUrl}/api/v1/sso/login/${open.orgId}`, passwordAllowed: true, passkey: true });
    for (const a of answers) expect(bytes(a)).toBe(bytes(answers[0]!));

    // Enforced SSO: no password, whoever the address belongs to (a partner user, who keeps password
    // sign-in, gets the domain's answer too: nothing is looked up per account).
    const partnerUser = await createUser(app, { email: `msp@${enforcedDomain}`, partner: { partnerId: enforced.partnerId, roleId: SYSTEM_ROLES.partnerTechnician.id } });
    const e1 = await discover(partnerUser.email);
    const e2 = await discover(`ghost@${enforcedDomain}`);
    expect(e1.body).toEqual({ method: 'sso', loginUrl: `${app.publicUrl}/api/v1/sso/login/${enforced.orgId}`, passwordAllowed: false, passkey: true });
    expect(bytes(e2)).toBe(bytes(e1));
  });

  it('refuses a malformed address with 400 and limits per address and per source', async () => {
    const bad = await discover('not-an-email');
    expect(bad.status).toBe(400);
    const email = `limited@${fresh('rl')}`;
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await discover(email)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    // Another address from the same kind of fresh source is not limited.
    expect((await discover(`other@${fresh('rl')}`)).status).toBe(200);
    // One source: DISCOVER_IP_LIMIT (40) per minute across addresses.
    const source = '198.51.100.7';
    const fromOne: number[] = [];
    for (let i = 0; i < 41; i++) fromOne.push((await discover(`a${i}@${fresh('ip')}`, source)).status);
    expect(fromOne.slice(0, 40).every((s) => s === 200)).toBe(true);
    expect(fromOne[40]).toBe(429);
  });
});
