/**
 * The physical baselines over HTTP, bare hono on @hono/node-server with no middleware, authentication
 * or database: GET /me answers a JSON body the size of GET /users/me, and POST /login parses a JSON
 * body and runs one Argon2id verify (the physical limit of a login over HTTP). Started by the
 * benchmarks in its own process (PORT from the environment, loopback only).
 */
import { Hono } from 'hono';
import { serve } from '@hono/node-server';
import { hash, verify } from '@node-rs/argon2';
import { connect } from 'node:net';

const PASSWORD = 'correct-horse-battery-0-staple';
const stored = await hash(PASSWORD);

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
app.post('/login', async (c) => {
  const body = await c.req.json<{ email?: string; password?: string }>();
  // Every bench user's password differs; the bare route checks one stored hash, whatever was sent.
  const ok = await verify(stored, body.password === undefined ? '' : PASSWORD);
  return ok ? c.json({ accessToken: 'x', refreshToken: 'y', user: profile }) : c.json({ error: 'no' }, 401);
});

// The heartbeat's physical limit (bench/fleet.ts): parse the JSON body, answer the same JSON a device gets.
app.post('/heartbeat', async (c) => {
  await c.req.json();
  return c.json({ nextHeartbeatSeconds: 60, autoUpdate: true, update: null });
});

// bench/peer-socket.ts: one client socket beside the server (BARE_PEER=host:port of a Redis), sending
// one PING a second, as a server with a database or Redis connection has.
if (process.env.BARE_PEER) {
  const [host, port] = process.env.BARE_PEER.split(':');
  const peer = connect(Number(port), host ?? '127.0.0.1');
  peer.on('data', () => undefined);
  peer.on('error', () => undefined);
  peer.once('connect', () => setInterval(() => peer.write('PING\r\n'), 1000).unref());
}

serve({ fetch: app.fetch, port: Number(process.env.PORT ?? '0'), hostname: '127.0.0.1' });
