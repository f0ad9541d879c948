/**
 * The physical baseline for HTTP reads: bare hono on @hono/node-server answering a JSON body the size
 * of GET /users/me, with no middleware, authentication or database. Started by the benchmarks in
 * its own process (PORT from the environment, loopback only).
 */
import { Hono } from 'hono';
import { serve } from '@hono/node-server';

const profile = {
  id: '0192f3a4-5b6c-7d8e-9f00-112233445566',
  email: 'bench-user@example.com',
  name: 'Bench User',
  avatarUrl: null,
  status: 'active',
  isPlatformAdmin: false,
  mfaEnabled: false,
  mfaMethod: null,
  passkeyCount: 0,
  phoneNumberMasked: null,
  phoneVerified: false,
  lastLoginAt: '2026-01-01T00:00:00.000Z',
  createdAt: '2026-01-01T00:00:00.000Z',
  scope: null,
  partnerId: null,
  orgId: null,
  roleId: null,
  permissions: [],
};

const app = new Hono();
app.get('/health', (c) => c.json({ status: 'ok' }));
app.get('/me', (c) => c.json(profile));

serve({ fetch: app.fetch, port: Number(process.env.PORT ?? '0'), hostname: '127.0.0.1' });
