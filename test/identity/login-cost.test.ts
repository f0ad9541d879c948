/**
 * A password login's transaction (docs/decisions.md "Speed: logins"): the session, the last-login
 * stamp and the audit entry are one statement (identity/sessions.ts `create`). A user whose
 * `user.login` no subscriber takes (no organisation: webhooks route organisations' events only)
 * signs in without BEGIN and COMMIT; an organisation's user still gets one transaction, so the
 * webhook deliveries commit with the session.
 * Counted on Keel's database handle.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';

type Fn = (...args: unknown[]) => unknown;

describe.skipIf(!backendAvailable())(`login cost (${backend})`, () => {
  let app: TestApp;
  let tenant: Tenant;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    tenant = await createTenant(app);
  }, 60_000);
  afterAll(async () => app?.close());

  /** Transactions opened on Keel's database handle while `work` runs (either backend). */
  async function transactions(work: () => Promise<unknown>): Promise<number> {
    const db = app.server.keel.db as unknown as { transaction: Fn };
    const original = db.transaction;
    let n = 0;
    db.transaction = function (this: unknown, ...args: unknown[]) {
      n++;
      return original.apply(this, args);
    };
    try {
      await work();
    } finally {
      db.transaction = original;
    }
    return n;
  }

  it('a user without an organisation signs in without a transaction', async () => {
    const user = await createUser(app);
    await login(app, user); // the statements are prepared on first use
    expect(await transactions(() => login(app, user))).toBe(0);
    expect(await transactions(() => login(app, tenant.partnerTechnician))).toBe(0);
  });

  it('an organisation user signs in in one transaction (its webhook deliveries commit with the session)', async () => {
    await login(app, tenant.orgTechnician);
    expect(await transactions(() => login(app, tenant.orgTechnician))).toBe(1);
  });
});
