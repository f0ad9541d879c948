import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant } from '../helpers/fixtures.js';
import type { Keel } from '../../src/keel.js';
import { SEALED_COLUMNS } from '../../src/compose.js';
import { Sealer, sealingKey } from '../../src/platform/crypto.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { resealAll } from '../../src/platform/reseal.js';
import { openSecret, sealSecret } from '../../src/modules/sso/providers.js';
import { ssoIdentities, ssoProviders } from '../../src/modules/sso/schema.js';
import { DEFAULT_MAPPING } from '../../src/modules/sso/presets.js';

/**
 * `keel secrets reseal`'s mechanism on both backends: every declared sealed column exists as
 * declared, and values sealed under an old key are sealed again under the current one with the
 * context their module opens them with (the SSO and single-use columns here; the TOTP secret and the
 * webhook columns in test/mfa/key-rotation.test.ts, through the CLI).
 */
describe.skipIf(!backendAvailable())(`re-sealing stored secrets (${backend})`, () => {
  const oldKey = randomBytes(32);
  const newKey = randomBytes(32);
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ env: { APP_ENCRYPTION_KEY: oldKey.toString('hex') } });
  });
  afterAll(async () => app?.close());

  it('every declared column and key column exists', async () => {
    for (const c of SEALED_COLUMNS) {
      await expect(rawQuery(app.server.keel.db, `select ${[...c.keys, c.column].join(', ')} from ${c.table} limit 0`, [])).resolves.toEqual([]);
    }
  });

  it('moves SSO and single-use secrets to the current key, only once, and only values it can open', async () => {
    const keel = app.server.keel;
    const tenant = await createTenant(app);
    const [created] = await keel.db
      .insert(ssoProviders)
      .values({ orgId: tenant.orgId, name: 'IdP', type: 'oidc', scopes: 'openid', attributeMapping: DEFAULT_MAPPING })
      .returning({ id: ssoProviders.id });
    const providerId = created!.id;
    await keel.db.update(ssoProviders).set({ clientSecret: sealSecret(keel, providerId, 'client-secret-value') }).where(eq(ssoProviders.id, providerId));
    const [identity] = await keel.db
      .insert(ssoIdentities)
      .values({
        userId: tenant.orgAdmin.id, providerId, externalId: 'ext-1', email: tenant.orgAdmin.email,
        accessToken: keel.secrets.sealer.seal('idp-access-token', `sso_identities.access_token:${providerId}:${tenant.orgAdmin.id}`),
      })
      .returning();
    const record = await keel.singleUse.create(keel.db, { purpose: 'reseal_test', ttlMs: 60_000, secret: 'single-use-secret' });

    const rotated = new Sealer(sealingKey(newKey), [sealingKey(oldKey)]);
    const byColumn = (results: Awaited<ReturnType<typeof resealAll>>) => Object.fromEntries(results.map((r) => [r.column, r]));
    const first = byColumn(await resealAll(keel.db, rotated, SEALED_COLUMNS));
    expect(first['sso_providers.client_secret']).toMatchObject({ resealed: 1, unreadable: 0 });
    expect(first['sso_identities.access_token']).toMatchObject({ resealed: 1, unreadable: 0 });
    expect(first['single_use_records.sealed']).toMatchObject({ resealed: 1, unreadable: 0 });
    // Idempotent: nothing is left under the old key.
    for (const r of await resealAll(keel.db, rotated, SEALED_COLUMNS)) expect(r).toMatchObject({ resealed: 0, unreadable: 0 });

    // Read back by the modules' own code under the new key alone.
    const onlyNew = new Sealer(sealingKey(newKey));
    const [provider] = await keel.db.select().from(ssoProviders).where(eq(ssoProviders.id, providerId));
    expect(provider!.clientSecret!.startsWith(`v1.${onlyNew.currentKeyId}.`)).toBe(true);
    expect(openSecret({ secrets: { sealer: onlyNew } } as unknown as Keel, provider!)).toBe('client-secret-value');
    const [linked] = await keel.db.select().from(ssoIdentities).where(eq(ssoIdentities.id, identity!.id));
    expect(onlyNew.open(linked!.accessToken!, `sso_identities.access_token:${providerId}:${tenant.orgAdmin.id}`)).toBe('idp-access-token');
    const [row] = await rawQuery<{ sealed: string; purpose: string; token_hash: string }>(keel.db, 'select sealed, purpose, token_hash from single_use_records where id = $1', [record.id]);
    expect(onlyNew.open(row!.sealed, `single-use:${row!.purpose}:${row!.token_hash}`)).toBe('single-use-secret');

    // A keyring that opens none of them reports them and changes nothing.
    const lost = byColumn(await resealAll(keel.db, new Sealer(sealingKey(randomBytes(32))), SEALED_COLUMNS));
    expect(lost['sso_providers.client_secret']).toMatchObject({ resealed: 0, unreadable: 1 });
    const [still] = await keel.db.select().from(ssoProviders).where(eq(ssoProviders.id, providerId));
    expect(still!.clientSecret).toBe(provider!.clientSecret);
  });
});
