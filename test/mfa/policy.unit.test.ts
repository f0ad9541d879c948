import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import type { AppEnv } from '../../src/app-env.js';
import type { Keel } from '../../src/keel.js';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/platform/logger.js';
import { handleError } from '../../src/platform/http/errors.js';
import type { Principal } from '../../src/modules/identity/principal.js';
import { requireMfa } from '../../src/modules/mfa/policy.js';

function appWith(principal: Principal, env: Record<string, string> = {}) {
  const keel = { config: loadConfig(env) } as Keel;
  const app = new Hono<AppEnv>();
  app.onError((err, c) => handleError(err, c, createLogger('silent')));
  app.use('*', async (c, next) => {
    c.set('principal', principal);
    await next();
  });
  app.post('/sensitive', requireMfa(keel), (c) => c.json({ ok: true }));
  return app;
}

const user = (mfa: boolean, kind: Principal['kind'] = 'user'): Principal => ({
  kind, userId: '00000000-0000-7000-8000-00000000000a', email: 'a@example.com', sessionId: kind === 'user' ? 's' : null, mfa,
  isPlatformAdmin: false, apiKeyId: kind === 'api_key' ? 'k' : null,
});

describe('step-up guard (requireMfa)', () => {
  it('refuses a session without a second factor with 403 mfa_required', async () => {
    const res = await appWith(user(false)).request('/sensitive', { method: 'POST' });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ code: 'mfa_required' });
  });

  it('lets an MFA session through', async () => {
    expect((await appWith(user(true)).request('/sensitive', { method: 'POST' })).status).toBe(200);
  });

  it('never lets an API key through', async () => {
    expect((await appWith(user(false, 'api_key')).request('/sensitive', { method: 'POST' })).status).toBe(403);
  });

  it('is off with ENABLE_2FA=false', async () => {
    expect((await appWith(user(false), { ENABLE_2FA: 'false' }).request('/sensitive', { method: 'POST' })).status).toBe(200);
  });
});
