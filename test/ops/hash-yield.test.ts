/**
 * Hashing yields to a saturated API (docs/decisions.md "Speed: embedded backend and floods"): while
 * requests wait and the event loop has no time to spare, the password hashes run one at a time (with
 * a pause after each), so a flood of logins does not take the cores from reads and heartbeats. The
 * logins admitted meanwhile are still answered; once the load ends, every hashing thread works again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backend, backendAvailable, startTestApp, type TestApp } from '../helpers/app.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { holdRequests, saturate } from '../helpers/load.js';
import { RequestLoad } from '../../src/platform/http/load.js';
import { HASH_THREADS, hashPoolLoad } from '../../src/platform/argon2-pool.js';

const LOGINS = 6;

/** The most hashes given to the hashing threads at once while `work` runs. */
async function mostAtOnce<T>(work: Promise<T>): Promise<{ result: T; most: number }> {
  let most = 0;
  let done = false;
  const sample = () => {
    most = Math.max(most, hashPoolLoad().reduce((a, b) => a + b, 0));
    if (!done) setImmediate(sample);
  };
  sample();
  try {
    return { result: await work, most };
  } finally {
    done = true;
  }
}

describe.skipIf(!backendAvailable())(`hashing yields to a saturated API (${backend})`, () => {
  let app: TestApp;
  let users: TestUser[];

  beforeAll(async () => {
    app = await startTestApp({ env: { LOGIN_LIMIT: '1000', LOGIN_IP_LIMIT: '100000' } });
    users = [];
    for (let i = 0; i < LOGINS; i++) users.push(await createUser(app));
  }, 60_000);
  afterAll(async () => app?.close());

  const logins = () => Promise.all(users.map((u) => app.api('POST', '/auth/login', { body: { email: u.email, password: u.password } })));

  it('hashes one login at a time while the API is saturated, answers every login, then uses every thread again', async () => {
    // Login requests whose bodies never finish: in flight, not yet hashing.
    const held = await holdRequests(app, RequestLoad.BUSY_AT, '/auth/login');
    const stop = saturate();
    try {
      await expect.poll(() => app.server.keel.requests.saturated, { timeout: 5_000 }).toBe(true);
      const { result, most } = await mostAtOnce(logins());
      expect(result.map((r) => r.status)).toEqual(users.map(() => 200));
      expect(result.every((r) => typeof r.body.accessToken === 'string')).toBe(true);
      expect(most).toBe(1);
    } finally {
      stop();
      for (const s of held) s.destroy();
    }
    await expect.poll(() => app.server.keel.requests.active).toBe(0);
    await expect.poll(() => app.server.keel.requests.saturated, { timeout: 5_000 }).toBe(false);
    const { result, most } = await mostAtOnce(logins());
    expect(result.map((r) => r.status)).toEqual(users.map(() => 200));
    // Quiet again: the logins spread over the hashing threads (one running, the next ready in each).
    if (HASH_THREADS > 1) expect(most).toBeGreaterThan(1);
  }, 60_000);
});
