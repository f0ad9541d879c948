import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import { createLogger } from '../logger.js';
import { AppError, handleError } from './errors.js';

describe('error envelope', () => {
  const log = createLogger('silent');
  const app = new Hono();
  app.onError((err, c) => handleError(err, c, log));
  app.get('/bug', () => {
    throw new Error('database password is hunter2 at /srv/keel/src/secret.ts:10');
  });
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

  it('answers a domain error with its status, code and details', async () => {
    const res = await app.request('/known');
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: 'That already exists', code: 'conflict_thing', details: { field: 'email' } });
  });
});
