import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backend } from '../helpers/app.js';
import { cliEnv, runCli } from '../helpers/cli.js';
import { openDatabase, pgliteDirFor } from '../../src/platform/db/client.js';
import { rawQuery } from '../../src/platform/db/raw.js';
import { writeAudit } from '../../src/modules/audit/service.js';
import { checkpointSigner, PLATFORM_CHAIN, writeCheckpoints } from '../../src/modules/audit/chain.js';
import type { Db } from '../../src/platform/db/client.js';

/** `keel audit verify` and `keel audit checkpoints` on the embedded database, as an operator runs them. */
describe.skipIf(backend !== 'pglite')('keel audit verify / checkpoints', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-audit-cli-'));
  const env = cliEnv(dataDir);
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  async function withDb(fn: (db: Db) => Promise<void>): Promise<void> {
    const database = await openDatabase({ pgliteDir: pgliteDirFor(dataDir) });
    try {
      await fn(database.db);
    } finally {
      await database.close();
    }
  }

  it('prints each chain as the route answers it, exits 1 once one is broken, and prints the signed checkpoints', { timeout: 120_000 }, async () => {
    expect((await runCli(['migrate'], env)).code).toBe(0);
    let ids: string[] = [];
    await withDb(async (db) => {
      for (let i = 0; i < 3; i++) await writeAudit(db, { actor: { type: 'system' } }, { action: 'test.cli', details: { i } });
      ids = (await rawQuery<{ id: string }>(db, 'select id from audit_logs order by chain_seq', [])).map((r) => r.id);
      await writeCheckpoints(db, checkpointSigner(randomBytes(32).toString('base64')), { force: true });
    });

    const ok = await runCli(['audit', 'verify'], env);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout.trim().split('\n').map((l) => JSON.parse(l))).toEqual([{ scope: 'platform', scopeId: PLATFORM_CHAIN, ok: true, checked: 3 }]);

    const checkpoints = await runCli(['audit', 'checkpoints'], env);
    expect(checkpoints.code).toBe(0);
    const [line] = checkpoints.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(line).toMatchObject({ scopeKind: 'platform', scopeId: PLATFORM_CHAIN, seq: 3, signatureValid: true });

    await withDb(async (db) => {
      await rawQuery(db, `update audit_logs set action = 'test.forged' where id = $1`, [ids[1]]);
    });
    const broken = await runCli(['audit', 'verify'], env);
    expect(broken.code).toBe(1);
    expect(JSON.parse(broken.stdout.trim())).toEqual({ scope: 'platform', scopeId: PLATFORM_CHAIN, ok: false, checked: 1, firstBroken: { id: ids[1], reason: 'hash_mismatch' } });

    const one = await runCli(['audit', 'verify', '--org', PLATFORM_CHAIN], env);
    expect(one.code).toBe(1);
    expect(JSON.parse(one.stdout.trim())).toEqual({ ok: false, checked: 1, firstBroken: { id: ids[1], reason: 'hash_mismatch' } });

    const wrong = await runCli(['audit', 'verify', '--org', 'nope'], env);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('audit verify: --org "nope" is not an id');
  });
});
