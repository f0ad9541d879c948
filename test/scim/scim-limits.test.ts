/**
 * SCIM's bounds (docs/decisions.md "SCIM provisioning"): SCIM_RATE_LIMIT requests per token per
 * minute, counted per token (another token of the same organisation is not slowed), answered in the
 * SCIM error schema with Retry-After.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';

describe.skipIf(!backendAvailable())('SCIM limits', () => {
  let app: TestApp;
  let tenant: Tenant;
  let adminToken: string;

  beforeAll(async () => {
    app = await startTestApp({ env: { SCIM_RATE_LIMIT: '3', SCIM_FILTER_SCAN_LIMIT: '2' } });
    tenant = await createTenant(app);
    adminToken = (await enrollTotp(app, (await login(app, tenant.orgAdmin)).accessToken)).accessToken;
  }, 120_000);
  afterAll(async () => {
    await app?.close();
  });

  it('a token over SCIM_RATE_LIMIT a minute gets 429 with Retry-After; another token is not slowed', async () => {
    const make = async () => (await app.api('POST', `/orgs/${tenant.orgId}/scim-tokens`, { token: adminToken, body: { name: 'dir' } })).body.token as string;
    const [busy, calm] = [await make(), await make()];
    for (let i = 0; i < 3; i++) expect((await app.request('GET', '/scim/v2/Users', { token: busy })).status).toBe(200);
    const over = await app.request('GET', '/scim/v2/Users', { token: busy });
    expect(over.status).toBe(429);
    expect(over.body).toMatchObject({ schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '429' });
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await app.request('GET', '/scim/v2/Users', { token: calm })).status).toBe(200);
  });

  it('a filter SQL cannot answer whole reads at most SCIM_FILTER_SCAN_LIMIT users (else 400 tooMany); one it answers is never refused', async () => {
    const make = async () => (await app.api('POST', `/orgs/${tenant.orgId}/scim-tokens`, { token: adminToken, body: { name: 'dir' } })).body.token as string;
    const [writer, reader] = [await make(), await make()];
    const names = ['a', 'b', 'c'].map((x) => `${x}-${Date.now().toString(36)}@scan.example`);
    for (const userName of names) {
      const made = await app.request('POST', '/scim/v2/Users', { token: writer, body: { userName }, headers: { 'content-type': 'application/scim+json' } });
      expect(made.status).toBe(201);
    }
    const scan = await app.request('GET', `/scim/v2/Users?filter=${encodeURIComponent('userName co "@scan.example"')}`, { token: reader });
    expect(scan.status).toBe(400);
    expect(scan.body).toMatchObject({ status: '400', scimType: 'tooMany' });
    const pinned = await app.request('GET', `/scim/v2/Users?filter=${encodeURIComponent(`userName eq "${names[2]}" and userName co "@scan.example"`)}`, { token: reader });
    expect(pinned.status).toBe(200);
    expect(pinned.body).toMatchObject({ totalResults: 1 });
  });
});
