/**
 * A directory's deactivation reaches every process (docs/decisions.md "SCIM provisioning"): two
 * `keel serve` on one PostgreSQL and one Redis; the SCIM PATCH goes to one, the person's live session
 * was in use on the other and answers 401 right after.
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

describe.skipIf(!backendAvailable() || backend !== 'postgres')('SCIM deactivation across processes (postgres)', () => {
  let topology: Topology | null = null;
  let database: Database | null = null;
  afterAll(async () => {
    await database?.close();
    await topology?.close();
  });

  it('a deactivation sent to one server ends the session in use on the other at once', { timeout: 180_000 }, async () => {
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
    for (const api of [a!, b!]) expect((await call(api.url, 'GET', '/users/me', { token: session.accessToken })).status).toBe(401);
  });
});
