import type { KeyObject } from 'node:crypto';
import { signBuild } from '../../src/modules/agents/signing.js';
import type { TestApp } from '../helpers/app.js';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openDatabase } from '../../src/platform/db/client.js';
import { createLogger } from '../../src/platform/logger.js';
import { enrollTotp, login } from '../helpers/fixtures.js';
import type { World } from '../access/helpers.js';
import { agentsOf } from '../../src/modules/agents/context.js';
import { sweep } from '../../src/modules/agents/heartbeat.js';

export interface Enrolled {
  deviceId: string;
  deviceToken: string;
}

/** An enrolment key of an organisation (through the API). */
export async function enrollmentKey(app: TestApp, token: string, orgId: string, body: Record<string, unknown> = {}): Promise<string> {
  const res = await app.api('POST', `/orgs/${orgId}/enrollment-keys`, { token, body });
  if (res.status !== 201) throw new Error(`enrollment key: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.key as string;
}

export async function enroll(app: TestApp, key: string, extra: Record<string, unknown> = {}): Promise<Enrolled> {
  const res = await app.api('POST', '/agents/enroll', { body: { enrollmentKey: key, hostname: `host-${Math.random().toString(36).slice(2, 8)}`, os: 'linux', arch: 'amd64', agentVersion: '1.0.0', ...extra } });
  if (res.status !== 201) throw new Error(`enroll: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Enrolled;
}

export function heartbeat(app: TestApp, device: Enrolled, body: Record<string, unknown> = { components: { agent: '1.0.0' } }) {
  return app.api('POST', '/agents/heartbeat', { token: device.deviceToken, body });
}

/** A platform administrator's session established with a second factor (promote needs `mfa: true`). */
export async function mfaAdmin(app: TestApp, w: World): Promise<string> {
  const { accessToken } = await login(app, w.platformAdmin);
  return (await enrollTotp(app, accessToken)).accessToken;
}

/** Registers a remote build (JSON) as the platform administrator; signed with `signWith` when given. */
export async function registerRemote(app: TestApp, token: string, b: { version: string; component?: string; os?: string; arch?: string; sha256?: string }, signWith?: KeyObject) {
  const body = { component: 'agent', os: 'linux', arch: 'amd64', url: `https://releases.example.com/${b.version}/agent`, sha256: 'a'.repeat(64), size: 1000, ...b };
  const res = await app.api('POST', '/agent-versions', { token, body: signWith ? { ...body, signature: signBuild(signWith, body) } : body });
  if (res.status !== 201) throw new Error(`register: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** The offline timer's tick, run now (it also runs every 10 seconds on its own). */
export const runSweep = (app: TestApp) => sweep(agentsOf(app.server.keel));

/**
 * A second Keel process (postgres project) on the test app's PostgreSQL database and Redis, with the
 * same secrets; `env` adds settings. Close it with `closeSecond` before the app.
 */
export async function startSecondProcess(app: TestApp, env: Record<string, string> = {}): Promise<RunningServer> {
  const c = app.server.keel.config;
  const config = loadConfig({
    NODE_ENV: 'test', DATA_DIR: c.DATA_DIR, LOG_LEVEL: 'silent', APP_ENCRYPTION_KEY: c.APP_ENCRYPTION_KEY ?? '', JWT_SECRET: c.JWT_SECRET ?? '',
    DATABASE_URL: c.DATABASE_URL ?? '', REDIS_URL: c.REDIS_URL ?? '', TRUST_PROXY: '127.0.0.1', ALLOW_INSECURE_TARGETS: 'true', ...env,
  });
  return startServer({ config, log: createLogger('silent'), database: await openDatabase({ url: config.DATABASE_URL, poolSize: 4 }), skipMigrate: true, port: 0, host: '127.0.0.1' });
}

export async function closeSecond(second: RunningServer | undefined): Promise<void> {
  await second?.close();
  await second?.keel.database.close();
}
