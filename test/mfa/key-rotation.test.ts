import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { backend } from '../helpers/app.js';
import { cliEnv, runCli, startServe, type ServeProcess } from '../helpers/cli.js';
import { call } from '../helpers/topology.js';
import { openDatabase, pgliteDirFor } from '../../src/platform/db/client.js';
import { sha256Hex } from '../../src/platform/crypto.js';

/**
 * An encryption-key rotation as docs/deploy.md "Key rotation" tells an operator to run it, on one
 * embedded data directory with `keel serve` restarted between the steps: recovery codes (keyed hashes,
 * not sealed values) made under the old key keep working while it is in APP_ENCRYPTION_KEYS_PREVIOUS,
 * the guide's count finds them by the key's id, and once the old key is dropped they stop. Sealed
 * values (the TOTP secret, a webhook's URL and secret) move to the new key with `keel secrets reseal`,
 * after which the old key can go.
 */
describe.skipIf(backend !== 'pglite')('encryption-key rotation and recovery codes (keel serve restarted)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-rotation-'));
  const admin = { email: 'rotation-admin@example.com', password: 'quartz-meadow-lantern-58-orbit' };
  const oldKey = randomBytes(32).toString('hex');
  const newKey = randomBytes(32).toString('hex');
  const keyId = (hex: string) => sha256Hex(Buffer.from(hex, 'hex')).slice(0, 8);
  const base = cliEnv(dataDir, { ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password, ALLOW_INSECURE_TARGETS: 'true' });
  let served: ServeProcess | null = null;
  afterAll(async () => {
    await served?.stop('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function stopServed(): Promise<void> {
    const running = served;
    served = null;
    await running?.stop();
  }

  async function serve(env: Record<string, string>): Promise<string> {
    await stopServed();
    served = await startServe({ ...base, ...env });
    return served.url;
  }

  /** Password, then a recovery code at the MFA step: the status of the second step. */
  async function signInWithRecoveryCode(url: string, code: string): Promise<number> {
    const first = await call(url, 'POST', '/auth/login', { body: admin });
    expect(first.status).toBe(200);
    expect(first.body.tempToken).toBeTruthy();
    return (await call(url, 'POST', '/auth/mfa/verify', { body: { tempToken: first.body.tempToken, code } })).status;
  }

  /** The guide's count of recovery codes still made under a key (run with the server stopped). */
  async function codesUnder(id: string): Promise<number> {
    await stopServed();
    const db = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
    try {
      // docs/deploy.md's query, with the key id in place of <id>.
      const [row] = await db.query<{ n: number }>(
        `select count(*)::int as n from users, jsonb_array_elements_text(mfa_recovery_codes) c where c like $1 or c !~ '^[0-9a-f]{8}[.]'`,
        [`${id}.%`],
      );
      return Number(row?.n);
    } finally {
      await db.close();
    }
  }

  it('codes made under the old key work while it is a previous key, are counted by its id, and stop when it is dropped; reseal moves sealed values', { timeout: 240_000 }, async () => {
    let url = await serve({ APP_ENCRYPTION_KEY: oldKey });
    const { generate } = await import('otplib');
    const token = (await call(url, 'POST', '/auth/login', { body: admin })).body.accessToken as string;
    const partnerId = (await call(url, 'POST', '/partners', { token, body: { name: 'Rotation Partner' } })).body.id as string;
    const orgId = (await call(url, 'POST', '/orgs', { token, body: { name: 'Rotation Org', partnerId } })).body.id as string;
    const hook = await call(url, 'POST', '/webhooks', { token, body: { orgId, name: 'rotation', url: 'http://127.0.0.1:9/hook', secret: 'rotation-signing-secret-0123456789', events: ['user.login'] } });
    expect(hook.status).toBe(201);
    const setup = await call(url, 'POST', '/auth/mfa/setup', { token });
    expect(setup.status).toBe(200);
    const secret = setup.body.secret as string;
    const enabled = await call(url, 'POST', '/auth/mfa/enable', { token, body: { code: await generate({ secret }) } });
    expect(enabled.status).toBe(200);
    const codes = enabled.body.recoveryCodes as string[];
    expect(await codesUnder(keyId(oldKey))).toBe(10);

    // Step 3 of the guide: the new key is current, the old one previous.
    url = await serve({ APP_ENCRYPTION_KEY: newKey, APP_ENCRYPTION_KEYS_PREVIOUS: oldKey });
    expect(await signInWithRecoveryCode(url, codes[0]!)).toBe(200);
    expect(await signInWithRecoveryCode(url, codes[0]!)).toBe(401); // used once
    expect(await codesUnder(keyId(oldKey))).toBe(9);

    // Dropped too early: what is left under the old key no longer matches.
    url = await serve({ APP_ENCRYPTION_KEY: newKey });
    expect(await signInWithRecoveryCode(url, codes[1]!)).toBe(401);
    // Nor do sealed values: the TOTP secret cannot be opened (503 secret_unavailable, never a 500).
    let mfa = await call(url, 'POST', '/auth/login', { body: admin });
    let session = await call(url, 'POST', '/auth/mfa/verify', { body: { tempToken: mfa.body.tempToken, code: await generate({ secret }) } });
    expect(session.status).toBe(503);
    expect(session.body.code).toBe('secret_unavailable');
    // Back in APP_ENCRYPTION_KEYS_PREVIOUS, it works again.
    url = await serve({ APP_ENCRYPTION_KEY: newKey, APP_ENCRYPTION_KEYS_PREVIOUS: oldKey });
    expect(await signInWithRecoveryCode(url, codes[1]!)).toBe(200);
    await stopServed();

    // keel secrets reseal with the old key still previous: every sealed value moves to the new key.
    const env = { ...base, APP_ENCRYPTION_KEY: newKey, APP_ENCRYPTION_KEYS_PREVIOUS: oldKey };
    const resealed = await runCli(['secrets', 'reseal'], env);
    expect(resealed.stderr).toBe('');
    expect(resealed.code).toBe(0);
    expect(resealed.stdout).toMatch(new RegExp(`^Re-sealed \\d+ values with key ${keyId(newKey)} \\(users.mfa_secret 1, webhooks.url_sealed 1, webhooks.secret_sealed 1\\b`));
    expect((await runCli(['secrets', 'reseal'], env)).stdout).toBe(`Re-sealed 0 values with key ${keyId(newKey)}\n`);

    // Now the old key can go: the TOTP secret and the webhook open with the new key alone.
    url = await serve({ APP_ENCRYPTION_KEY: newKey });
    mfa = await call(url, 'POST', '/auth/login', { body: admin });
    session = await call(url, 'POST', '/auth/mfa/verify', { body: { tempToken: mfa.body.tempToken, code: await generate({ secret, epoch: Math.floor(Date.now() / 1000) + 30 }) } });
    expect(session.status).toBe(200);
    const read = await call(url, 'GET', `/webhooks/${hook.body.id}?orgId=${orgId}`, { token: session.body.accessToken });
    expect(read.status).toBe(200);
    expect(read.body.url).toContain('127.0.0.1');
    await stopServed();

    // Under a key that opens nothing stored: named, exit 1, nothing changed.
    const lost = await runCli(['secrets', 'reseal'], { ...base, APP_ENCRYPTION_KEY: randomBytes(32).toString('hex') });
    expect(lost.code).toBe(1);
    expect(lost.stderr).toMatch(/could not be opened with the configured keys \(users\.mfa_secret 1, webhooks\.url_sealed 1/);
    expect(lost.stderr).toContain('APP_ENCRYPTION_KEYS_PREVIOUS');
  });
});
