/**
 * A directory's deactivation reaches every process (docs/decisions.md "SCIM provisioning"): two
 * `keel serve` on one PostgreSQL and one Redis; the SCIM PATCH goes to one, the person's live session
 * was in use on the other and answers 401 right after; a SCIM token revoked on one is refused by the
 * other, though both had it in their token caches. "Right after" is the bus's promise (docs/decisions.md
 * "Caches": everywhere within a second): the other process's next request normally, but on a loaded
 * machine its request can be read before the Redis message that arrived first, so each check may
 * retry for up to a second. Without the message the caches would answer 200 for 30 s.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { backend, backendAvailable } from '../helpers/app.js';
import { call, startTopology, type Topology } from '../helpers/topology.js';
import { STRONG_PASSWORD } from '../helpers/fixtures.js';
import { openDatabase, type Database } from '../../src/platform/db/client.js';
import { createOrganization, createPartner } from '../../src/modules/tenancy/service.js';
import { users } from '../../src/modules/identity/schema.js';
import { hashPassword } from '../../src/modules/identity/passwords.js';
import { addOrganizationMember } from '../../src/modules/access/service.js';
import { SYSTEM_ROLES } from '../../src/modules/access/catalog.js';
import { scimTokens } from '../../src/modules/scim/schema.js';
import { sha256Hex } from '../../src/platform/crypto.js';
import { generate } from 'otplib';

/** What the invalidation bus promises: every process drops the entry within a second. */
const WITHIN_A_SECOND = { timeout: 1000, interval: 50 };

describe.skipIf(!backendAvailable() || backend !== 'postgres')('SCIM deactivation across processes (postgres)', () => {
  let topology: Topology | null = null;
  let database: Database | null = null;
  afterAll(async () => {
    await database?.close();
    await topology?.close();
  });

  it('a deactivation sent to one server ends the session in use on the other right after', { timeout: 180_000 }, async () => {
    topology = await startTopology({ apis: 2, workers: 0 });
    const [a, b] = topology.apis;
    database = await openDatabase({ url: topology.databaseUrl, poolSize: 2 });
    const db = database.db;
    const partner = await createPartner(db, { name: `P ${randomBytes(3).toString('hex')}` });
    const org = await createOrganization(db, { name: 'Org', partnerId: partner.id });
    const email = `scim-${randomBytes(4).toString('hex')}@example.com`;
    const [member] = await db.insert(users).values({ email, name: 'Member', passwordHash: await hashPassword(STRONG_PASSWORD) }).returning({ id: users.id });
    await addOrganizationMember(db, { orgId: org.id, userId: member!.id, roleId: SYSTEM_ROLES.orgReadOnly.id });
    const token = `kscim_${randomBytes(32).toString('base64url')}`;
    await db.insert(scimTokens).values({ orgId: org.id, name: 'dir', tokenHash: sha256Hex(token), prefix: token.slice(0, 12) });

    const session = (await call(a!.url, 'POST', '/auth/login', { body: { email, password: STRONG_PASSWORD } })).body as { accessToken: string };
    for (const api of [a!, b!]) expect((await call(api.url, 'GET', '/users/me', { token: session.accessToken })).status).toBe(200);

    const scim = (method: string, path: string, body?: unknown) =>
      fetch(`${b!.url}/scim/v2${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
    const adopted = await scim('POST', '/Users', { userName: email });
    expect(adopted.status).toBe(201);
    // Both servers hold the live session in their caches when the deactivation comes.
    for (const api of [a!, b!]) expect((await call(api.url, 'GET', '/users/me', { token: session.accessToken })).status).toBe(200);
    const off = await scim('PATCH', `/Users/${member!.id}`, { schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'], Operations: [{ op: 'replace', path: 'active', value: false }] });
    expect(off.status).toBe(200);
    for (const api of [a!, b!]) await expect.poll(async () => (await call(api.url, 'GET', '/users/me', { token: session.accessToken })).status, WITHIN_A_SECOND).toBe(401);

    // A token revoked on one server stops at once on the other, though both hold it in their token caches.
    const adminEmail = `scim-admin-${randomBytes(4).toString('hex')}@example.com`;
    const [admin] = await db.insert(users).values({ email: adminEmail, name: 'Admin', passwordHash: await hashPassword(STRONG_PASSWORD) }).returning({ id: users.id });
    await addOrganizationMember(db, { orgId: org.id, userId: admin!.id, roleId: SYSTEM_ROLES.orgAdmin.id });
    const first = (await call(a!.url, 'POST', '/auth/login', { body: { email: adminEmail, password: STRONG_PASSWORD } })).body as { accessToken: string };
    const setup = (await call(a!.url, 'POST', '/auth/mfa/setup', { token: first.accessToken, body: {} })).body as { secret: string };
    const enabled = await call(a!.url, 'POST', '/auth/mfa/enable', { token: first.accessToken, body: { code: await generate({ secret: setup.secret }) } });
    expect(enabled.status).toBe(200);
    const adminToken = (enabled.body as { accessToken: string }).accessToken;
    const made = await call(a!.url, 'POST', `/orgs/${org.id}/scim-tokens`, { token: adminToken, body: { name: 'cached' } });
    expect(made.status).toBe(201);
    const cached = made.body as { id: string; token: string };
    const list = (url: string) => fetch(`${url}/scim/v2/Users`, { headers: { authorization: `Bearer ${cached.token}` } }).then((r) => r.status);
    for (const api of [a!, b!]) expect(await list(api.url)).toBe(200);
    expect((await call(a!.url, 'DELETE', `/orgs/${org.id}/scim-tokens/${cached.id}`, { token: adminToken })).status).toBe(204);
    for (const api of [a!, b!]) await expect.poll(() => list(api.url), WITHIN_A_SECOND).toBe(401);
  });
});
