import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import { createLogger } from '../../src/platform/logger.js';
import { AppError, handleError } from '../../src/platform/http/errors.js';
import { parseKey, Sealer, sealingKey } from '../../src/platform/crypto.js';

describe('error envelope', () => {
  const log = createLogger('silent');
  const app = new Hono();
  app.onError((err, c) => handleError(err, c, log));
  app.get('/bug', () => {
    throw new Error('database password is hunter2 at /srv/keel/src/secret.ts:10');
  });
  // A TOTP secret sealed under a key that was then dropped (rotated without APP_ENCRYPTION_KEYS_PREVIOUS).
  const oldKey = parseKey('11'.repeat(32));
  const newKey = parseKey('22'.repeat(32));
  if (!oldKey || !newKey) throw new Error('test keys');
  const sealed = new Sealer(sealingKey(oldKey)).seal('totp-secret', 'user:1:mfa');
  const rotatedWithoutPrevious = new Sealer(sealingKey(newKey));
  app.get('/sealed', (c) => c.text(rotatedWithoutPrevious.open(sealed, 'user:1:mfa')));
  app.get('/known', () => {
    throw new AppError(409, 'conflict_thing', 'That already exists', { field: 'email' });
  });

  it('answers a thrown bug with a generic 500 and no stack or internal message', async () => {
    const res = await app.request('/bug');
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ error: 'Internal server error', code: 'internal_error' });
    expect(text).not.toMatch(/hunter2|secret\.ts|at .*:\d+/);
  });

  it('answers a secret sealed with a key the server no longer has with 503 secret_unavailable, never a 500', async () => {
    const res = await app.request('/sealed');
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(JSON.parse(text)).toMatchObject({ code: 'secret_unavailable' });
    expect(text).not.toContain('totp-secret');
  });

  it('answers a domain error with its status, code and details', async () => {
    const res = await app.request('/known');
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: 'That already exists', code: 'conflict_thing', details: { field: 'email' } });
  });
});
