/**
 * The enforced-SSO domain rule's lookup on password sign-in is cached per process by the email's
 * domain (domains/service.ts `cachedVerifiedDomainOrg`, docs/decisions.md "Speed: logins"): a second
 * login of that domain runs no lookup, and verifying or deleting a domain drops the answer at once,
 * so the next login reads the organisation that now owns the domain. Counted at the driver: the
 * prepared statement `verified_domain_owners` by name.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';
import { startDnsServer, type DnsServer } from '../helpers/dns.js';
import { addDomain, cachedVerifiedDomainOrg, deleteDomain, verifyDomain, type DomainOwner } from '../../src/modules/domains/service.js';

type Fn = (...args: unknown[]) => unknown;
const LOOKUP = 'verified_domain_owners';

describe.skipIf(!backendAvailable())(`verified-domain lookups of password sign-ins (${backend})`, () => {
  let app: TestApp;
  let dns: DnsServer;
  let tenant: Tenant;
  beforeAll(async () => {
    dns = await startDnsServer();
    app = await startTestApp({ env: { DNS_RESOLVER: dns.address, LOGIN_LIMIT: '1000' } });
    tenant = await createTenant(app);
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await dns?.close();
  });

  /** Runs of the domain lookup while `work` runs: PGlite's protocol messages or node-postgres's named queries. */
  async function lookups(work: () => Promise<unknown>): Promise<number> {
    const client = (app.server.keel.db as unknown as { session: { client: Record<string, Fn> } }).session.client;
    let n = 0;
    const originals: [string, Fn][] = [];
    for (const name of ['query', 'execProtocol']) {
      const original = client[name];
      if (typeof original !== 'function') continue;
      originals.push([name, original]);
      client[name] = function (this: unknown, ...args: unknown[]) {
        const a = args[0];
        const text = a instanceof Uint8Array ? Buffer.from(a).toString('latin1') : typeof a === 'string' ? a : ((a as { name?: string } | null)?.name ?? '');
        // PGlite: a Bind names the statement; a first run also sends its Parse.
        if (text.includes(LOOKUP) && (!(a instanceof Uint8Array) || text.startsWith('B'))) n++;
        return original.apply(this, args);
      };
    }
    try {
      await work();
    } finally {
      for (const [name, fn] of originals) client[name] = fn;
    }
    return n;
  }

  it('asks once per domain, and again after the domain is verified or deleted', async () => {
    const domain = `cached-${randomBytes(4).toString('hex')}.example`;
    const user = await createUser(app, { email: `someone@${domain}` });
    await login(app, user);
    expect(await lookups(() => login(app, user))).toBe(0);
    expect(await cachedVerifiedDomainOrg(app.server.keel, user.email)).toBeNull();

    const owner: DomainOwner = { kind: 'org', orgId: tenant.orgId, partnerId: tenant.partnerId };
    const info = { actor: { type: 'system' as const } };
    const claim = await addDomain(app.server.keel, owner, { domain }, null, info);
    dns.txt.set(domain, [claim.txtRecord]);
    expect((await verifyDomain(app.server.keel, owner, claim.id, info)).status).toBe('verified');
    expect(await lookups(() => login(app, user))).toBe(1);
    expect(await cachedVerifiedDomainOrg(app.server.keel, user.email)).toBe(tenant.orgId);
    expect(await lookups(() => login(app, user))).toBe(0);

    await deleteDomain(app.server.keel, owner, claim.id, info);
    expect(await cachedVerifiedDomainOrg(app.server.keel, user.email)).toBeNull();
  });
});
