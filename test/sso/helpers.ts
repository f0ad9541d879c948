import { Writable } from 'node:stream';
import { startTestApp, type TestApp, type TestAppOptions } from '../helpers/app.js';
import { createTenant, enrollTotp, login, type Tenant } from '../helpers/fixtures.js';
import { createLogger, type Logger } from '../../src/platform/logger.js';

/** Every log line an app wrote, as text, and parsed. */
export interface CapturedLog {
  log: Logger;
  text: string[];
}

/** Keel's own logger (its redaction included, as an operator's log has it), at debug, into memory. */
export function captureLog(): CapturedLog {
  const text: string[] = [];
  const log = createLogger(
    'debug',
    {},
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) text.push(line);
        done();
      },
    }),
  );
  return { log, text };
}

export interface SsoWorld {
  app: TestApp;
  tenant: Tenant;
  /** The organisation admin's `mfa: true` access token (provider writes need it). */
  adminToken: string;
  logs: CapturedLog;
  /** Every response body and header the tests saw, to prove no secret ever left. */
  seen: string[];
  api: TestApp['api'];
}

/** An app (PUBLIC_URL from its port, so the IdP can register the callback), a tenant, an MFA admin session; responses recorded. */
export async function ssoWorld(opts: TestAppOptions = {}): Promise<SsoWorld> {
  const logs = captureLog();
  const app = await startTestApp({ publicUrlFromPort: true, log: logs.log, ...opts });
  const tenant = await createTenant(app);
  const signedIn = await login(app, tenant.orgAdmin);
  const { accessToken } = await enrollTotp(app, signedIn.accessToken);
  const seen: string[] = [];
  const api: TestApp['api'] = async (method, path, o) => {
    const res = await app.api(method, path, o);
    seen.push(JSON.stringify(res.body), JSON.stringify([...res.headers.entries()]));
    return res;
  };
  return { app, tenant, adminToken: accessToken, logs, seen, api };
}

/** The exchange code from a success location, or null. */
export function ssoCodeOf(location: string): string | null {
  const m = /#ssoCode=([^&]+)$/.exec(location);
  return m?.[1] ? decodeURIComponent(m[1]) : null;
}
