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
import { cookie, createTenant, createUser, login, type Tenant } from '../helpers/fixtures.js';

type Fn = (...args: unknown[]) => unknown;

describe.skipIf(!backendAvailable())(`login cost (${backend})`, () => {
  let app: TestApp;
  let tenant: Tenant;
  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000' } });
    tenant = await createTenant(app);
  }, 60_000);
  afterAll(async () => app?.close());

  /** Calls of `method` (`transaction`, `select`) on Keel's database handle while `work` runs (either backend). */
  async function callsOf(method: 'transaction' | 'select', work: () => Promise<unknown>): Promise<number> {
    const db = app.server.keel.db as unknown as Record<string, Fn>;
    const original = db[method]!;
    let n = 0;
    db[method] = function (this: unknown, ...args: unknown[]) {
      n++;
      return original.apply(this, args);
    };
    try {
      await work();
    } finally {
      db[method] = original;
    }
    return n;
  }
  const transactions = (work: () => Promise<unknown>) => callsOf('transaction', work);

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

  it('a refresh, by body or by cookie, is one rotation statement without a transaction, and reads the user once', async () => {
    const user = await createUser(app);
    const first = await login(app, user);
    let refreshToken = first.refreshToken;
    const byBody = async () => {
      const res = await app.api('POST', '/auth/refresh', { body: { refreshToken } });
      expect(res.status).toBe(200);
      refreshToken = res.body.refreshToken;
    };
    await byBody(); // the statements are prepared on first use
    expect(await transactions(byBody)).toBe(0);
    // The user's row is read once (prepared) and the answer's profile built from it: no query builder read.
    expect(await callsOf('select', byBody)).toBe(0);
    const csrf = cookie(first.cookies, 'service_csrf')!.value;
    let jar = `service_refresh_token=${refreshToken}; service_csrf=${csrf}`;
    const byCookie = async () => {
      const res = await app.api('POST', '/auth/refresh', { headers: { cookie: jar, 'x-service-csrf': csrf } });
      expect(res.status).toBe(200);
      refreshToken = res.body.refreshToken;
      jar = `service_refresh_token=${refreshToken}; service_csrf=${csrf}`;
    };
    expect(await transactions(byCookie)).toBe(0);
    // The CSRF value of another session is refused before anything changes: the token still refreshes.
    const other = await login(app, user);
    const refused = await app.api('POST', '/auth/refresh', { headers: { cookie: `service_refresh_token=${refreshToken}; service_csrf=${cookie(other.cookies, 'service_csrf')!.value}`, 'x-service-csrf': cookie(other.cookies, 'service_csrf')!.value } });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe('csrf_failed');
    await byBody();
  });
});
