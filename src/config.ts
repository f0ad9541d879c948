import { z } from 'zod';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isIP } from 'node:net';
import { PROJECT_ROOT } from './platform/paths.js';
import { parseKey } from './platform/crypto.js';
import { parseReleaseKey, parseReleaseKeys } from './platform/release-signing.js';

/**
 * Every environment variable Keel reads, parsed once. A bad value stops start-up with one line naming
 * the variable (ConfigError). Secrets that development may generate (APP_ENCRYPTION_KEY, JWT_SECRET)
 * are resolved later by `resolveSecrets` in platform/keys.ts, because that needs DATA_DIR.
 */

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const bool = (def: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'], { error: 'must be true or false' })
    .optional()
    .transform((v) => (v === undefined ? def : v === 'true' || v === '1' || v === 'yes'));

const int = (def: number, min: number, max: number) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === '') return def;
      const n = Number(v);
      if (!Number.isInteger(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `must be a whole number from ${min} to ${max}` });
        return z.NEVER;
      }
      return n;
    });

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

const url = (protocols: string[]) =>
  optionalString.refine(
    (v) => {
      if (v === undefined) return true;
      try {
        return protocols.includes(new URL(v).protocol);
      } catch {
        return false;
      }
    },
    { message: `must be a URL (${protocols.join(' or ')})` },
  );

const envSchema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  PORT: int(3000, 0, 65535),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./data'),
  DATABASE_URL: url(['postgres:', 'postgresql:']),
  REDIS_URL: url(['redis:', 'rediss:']),
  APP_ENCRYPTION_KEY: optionalString,
  SECRET_ENCRYPTION_KEY: optionalString,
  APP_ENCRYPTION_KEYS_PREVIOUS: optionalString,
  JWT_SECRET: optionalString,
  JWT_SECRETS_PREVIOUS: optionalString,
  PUBLIC_URL: url(['http:', 'https:']),
  PUBLIC_APP_URL: url(['http:', 'https:']),
  DASHBOARD_URL: url(['http:', 'https:']),
  ENABLE_REGISTRATION: bool(false),
  ENABLE_2FA: bool(true),
  AUTO_MIGRATE: bool(true),
  SERVICE_VERSION: optionalString,
  ADMIN_EMAIL: optionalString.refine((v) => v === undefined || z.email().safeParse(v).success, {
    message: 'must be an email address',
  }),
  ADMIN_PASSWORD: optionalString,
  SMTP_URL: url(['smtp:', 'smtps:']),
  MAIL_FROM: z.string().default('Keel <no-reply@keel.local>'),
  SMS_PROVIDER: z.enum(['log', 'twilio']).default('log'),
  TWILIO_ACCOUNT_SID: optionalString,
  TWILIO_AUTH_TOKEN: optionalString,
  TWILIO_FROM: optionalString,
  TWILIO_BASE_URL: url(['http:', 'https:']),
  BINARY_SOURCE: z.enum(['remote', 'local']).default('remote'),
  AGENT_RELEASE_URL: url(['http:', 'https:']),
  AGENT_AUTO_PROMOTE: bool(true),
  // Ed25519 public key (PEM, or the 32 raw bytes in base64) that signs the release host's manifest.
  AGENT_RELEASE_PUBLIC_KEY: optionalString,
  // Ed25519 public keys (comma-separated; PEM or base64 of the raw 32 bytes) that sign builds; several for rotation.
  AGENT_RELEASE_PUBLIC_KEYS: optionalString,
  // Base64 Ed25519 signature of the key-list statement {"keys":[...]} (two-phase key rotation), by a key the agents trust.
  AGENT_RELEASE_KEYS_SIGNATURE: optionalString,
  AGENT_HEARTBEAT_SECONDS: int(60, 1, 3600),
  /** Device requests (heartbeats, reports, enrolments, downloads) one process works on at once; past it 503 `overloaded`. */
  AGENT_MAX_IN_FLIGHT: int(512, 1, 1_000_000),
  AGENT_UPLOAD_LIMIT_BYTES: int(256 * 1024 * 1024, 1024, 4 * 1024 * 1024 * 1024),
  // Automatic rollout halt: failed + rolled_back reports of a version over this share of at least the minimum.
  AGENT_HALT_FAILURE_PERCENT: int(20, 1, 100),
  AGENT_HALT_MIN_REPORTS: int(5, 1, 100000),
  AGENT_HEARTBEAT_LIMIT: int(60, 1, 1000000),
  AGENT_REPORT_LIMIT: int(30, 1, 1000000),
  AGENT_FIELD_EVENT_WINDOW_SECONDS: int(60, 0, 86400),
  ALLOW_INSECURE_TARGETS: bool(false),
  WORKER: z.enum(['inline', 'off']).default('inline'),
  /** With PostgreSQL: every per-process cache of revocable things is dropped at least this often (a second line behind invalidation). */
  CACHE_MAX_STALENESS_SECONDS: int(30, 1, 3600),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  TRUST_PROXY: optionalString,
  WEBAUTHN_RP_ID: optionalString,
  WEBAUTHN_ORIGIN: url(['http:', 'https:']),
  // Limits (docs/decisions.md "Limits"); each can be set by environment.
  LOGIN_LIMIT: int(10, 1, 100000),
  LOGIN_WINDOW_SECONDS: int(900, 1, 86400),
  // Failed logins per IP across every email per LOGIN_WINDOW_SECONDS (an office behind one NAT shares it).
  LOGIN_IP_LIMIT: int(100, 1, 1000000),
  LOCKOUT_THRESHOLD: int(10, 1, 100000),
  LOCKOUT_SECONDS: int(900, 1, 86400),
  MFA_VERIFY_LIMIT: int(5, 1, 100000),
  MFA_VERIFY_WINDOW_SECONDS: int(300, 1, 86400),
  FORGOT_PASSWORD_LIMIT: int(5, 1, 100000),
  REGISTER_LIMIT: int(5, 1, 100000),
  REGISTER_PARTNER_LIMIT: int(3, 1, 100000),
  SSO_EXCHANGE_LIMIT: int(30, 1, 100000),
  // Unauthenticated SSO starts and SAML posts per client IP per minute, and live login sessions per provider.
  SSO_LOGIN_LIMIT: int(60, 1, 100000),
  PASSKEY_SIGNIN_LIMIT: int(30, 1, 100000),
  DISCOVER_LIMIT: int(10, 1, 100000),
  DISCOVER_IP_LIMIT: int(60, 1, 100000),
  SAML_ACS_LIMIT: int(60, 1, 100000),
  SSO_LOGIN_OUTSTANDING_LIMIT: int(1000, 1, 1000000),
  // POST /agents/enroll per minute: per client IP (every attempt, wrong keys included) and per enrolment key.
  ENROLL_IP_LIMIT: int(60, 1, 1000000),
  ENROLL_KEY_LIMIT: int(600, 1, 1000000),
  // Keel's SAML service-provider entity id (docs/specification.md "Single sign-on: providers": configurable per deployment); default {PUBLIC_URL}/api/v1/sso/saml/metadata.
  SAML_SP_ENTITY_ID: z.string().trim().min(1).max(500).optional(),
  PASSWORD_REENTRY_LIMIT: int(5, 1, 100000),
  SMS_PER_TEMP_TOKEN_LIMIT: int(3, 1, 1000),
  SMS_PER_PHONE_HOURLY_LIMIT: int(5, 1, 100000),
  PHONE_VERIFY_HOURLY_LIMIT: int(5, 1, 100000),
  PHONE_VERIFY_PER_PHONE_HOURLY_LIMIT: int(3, 1, 100000),
  PHONE_VERIFY_TENANTLESS_DAILY_LIMIT: int(3, 1, 100000),
  // Invitation emails to one address per hour (invite, re-invite, resend), and resends by one inviter per hour.
  INVITE_EMAILS_PER_INVITEE_LIMIT: int(5, 1, 100000),
  INVITE_RESENDS_PER_INVITER_LIMIT: int(30, 1, 100000),
  // The built web console served at / (bin/keel.js sets it for `serve`); unset: no console.
  CONSOLE_DIR: optionalString,
  BODY_LIMIT_BYTES: int(1024 * 1024, 1024, 1024 * 1024 * 1024),
  // Webhook delivery (docs/specification.md "Limits": 30,000 ms per attempt): the overall deadline of one attempt, attempts in
  // flight per worker process, and per webhook (so one slow receiver never takes every slot).
  WEBHOOK_TIMEOUT_MS: int(30_000, 100, 120_000),
  WEBHOOK_CONCURRENCY: int(128, 1, 4096),
  WEBHOOK_CONCURRENCY_PER_WEBHOOK: int(8, 1, 256),
  // Webhook limits (docs/decisions.md "Webhooks: limits, retention, rotation, test deliveries"): webhooks
  // per organisation; POST /events per API key per minute; manual tests and retries per minute, per
  // webhook and per caller; days a finished delivery is kept.
  WEBHOOKS_PER_ORG_LIMIT: int(25, 1, 10_000),
  EVENTS_PUBLISH_LIMIT: int(6_000, 1, 1_000_000),
  WEBHOOK_MANUAL_LIMIT: int(10, 1, 100_000),
  WEBHOOK_MANUAL_CALLER_LIMIT: int(30, 1, 100_000),
  WEBHOOK_DELIVERY_RETENTION_DAYS: int(30, 1, 3650),
  // Replay (docs/decisions.md "Webhook replay and partner-wide webhooks"): days an event is kept for a
  // replay (also the longest window a replay may reach back), and the most events one replay sends.
  WEBHOOK_EVENT_RETENTION_DAYS: int(30, 1, 3650),
  WEBHOOK_REPLAY_MAX_EVENTS: int(100_000, 1, 10_000_000),
  // Production readiness (docs/decisions.md "Production readiness"): GET /metrics (off unless enabled; a bearer token when set) and the
  // bound of the password-hashing queue (0: 16 per hashing thread), beyond which logins answer 503.
  METRICS_ENABLED: bool(false),
  WORKER_METRICS_PORT: int(9465, 0, 65535),
  /** How long `keel worker` waits for pending migrations (applied by `keel serve` or `keel migrate`) before it stops. */
  MIGRATION_WAIT_SECONDS: int(300, 0, 86_400),
  METRICS_TOKEN: optionalString.refine((v) => v === undefined || v.length >= 16, { message: 'must be at least 16 characters' }),
  HASH_QUEUE_MAX: int(0, 0, 100000),
  HASH_THREAD_NICE: int(10, 0, 19),
  /** Connections one client address may hold open at once (TRUST_PROXY addresses excepted); past it a new one is closed unread. 0: no limit. */
  MAX_CONNECTIONS_PER_SOURCE: int(512, 0, 1_000_000),
  /** Refusals (503 overloaded) of one client address in one second answered at once; past it they are answered when the second is over. 0: all at once. */
  REFUSAL_HOLD_AFTER: int(20, 0, 1_000_000),
  // Verified domains: the DNS server asked for TXT records (an IP address, with an optional port: `127.0.0.1:5353`, `[::1]:53`); unset: the system's resolvers.
  DNS_RESOLVER: optionalString.refine((v) => v === undefined || /^(\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?|\[[0-9a-fA-F:]+\](:\d{1,5})?|[0-9a-fA-F:]+)$/.test(v), { message: 'must be an IP address with an optional port (127.0.0.1:5353)' }),
  // Verified domains: verification attempts (DNS lookups) per organisation or partner per minute.
  DOMAIN_VERIFY_LIMIT: int(10, 1, 100000),
  // SCIM provisioning: requests per SCIM token per minute (a directory's initial import comes in bursts).
  SCIM_RATE_LIMIT: int(1200, 1, 1000000),
  // SCIM provisioning: the most resources a filter SQL cannot answer whole is applied to in memory (beyond: 400 tooMany).
  SCIM_FILTER_SCAN_LIMIT: int(5000, 1, 1000000),
  // SCIM provisioning: managed users one batch re-decides after the group mappings are saved.
  SCIM_REEVALUATION_BATCH: int(200, 1, 10000),

  // Audit (docs/decisions.md "Audit: hash chain, checkpoints, security events"): the Ed25519 key signing the
  // daily chain checkpoints (base64 of its 32-byte seed; unset: no checkpoints), and the days an entry is
  // kept (0: forever).
  AUDIT_CHECKPOINT_KEY: optionalString.refine((v) => v === undefined || (/^[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v, 'base64').length === 32), {
    message: 'must be 32 bytes in base64 (an Ed25519 seed: openssl rand -base64 32)',
  }),
  AUDIT_RETENTION_DAYS: int(0, 0, 36_500),

  // Tracing (docs/deploy.md "Tracing"): OpenTelemetry's own variables, off unless an endpoint is set.
  // Keel reads the endpoints, the service name, the sampler and OTEL_SDK_DISABLED; the exporter and the
  // resource detector read the headers and the resource attributes themselves (checked here, so a typo
  // stops the start).
  OTEL_EXPORTER_OTLP_ENDPOINT: url(['http:', 'https:']),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: url(['http:', 'https:']),
  OTEL_EXPORTER_OTLP_HEADERS: optionalString,
  OTEL_SERVICE_NAME: optionalString,
  OTEL_RESOURCE_ATTRIBUTES: optionalString,
  OTEL_SDK_DISABLED: bool(false),
  OTEL_TRACES_SAMPLER: z.enum(['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio']).optional(),
  OTEL_TRACES_SAMPLER_ARG: optionalString.refine((v) => v === undefined || (/^\d*\.?\d+$/.test(v) && Number(v) <= 1), { message: 'must be a number from 0 to 1' }),
});

export type Env = z.infer<typeof envSchema>;

export interface Config extends Omit<Env, 'PUBLIC_URL' | 'PUBLIC_APP_URL' | 'DASHBOARD_URL' | 'SERVICE_VERSION'> {
  production: boolean;
  /**
   * PUBLIC_URL, else PUBLIC_APP_URL, else DASHBOARD_URL, else http://localhost:<the port Keel listens
   * on>; no trailing slash.
   */
  publicUrl: string;
  /** True when no public URL was configured: the server sets `publicUrl` from the port it actually listens on. */
  publicUrlFromListenPort: boolean;
  serviceVersion: string;
}

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/** AGENT_RELEASE_PUBLIC_KEY(S) parse as Ed25519 keys; production needs AGENT_RELEASE_PUBLIC_KEYS (builds must be signed). */
function checkReleaseKeys(e: Env, production: boolean): void {
  for (const name of ['AGENT_RELEASE_PUBLIC_KEYS', 'AGENT_RELEASE_PUBLIC_KEY'] as const) {
    try {
      if (name === 'AGENT_RELEASE_PUBLIC_KEYS') parseReleaseKeys(e[name]);
      else if (e[name]) parseReleaseKey(e[name]);
    } catch {
      throw new ConfigError(`Invalid configuration: ${name} must be Ed25519 public keys (PEM, or the raw 32 bytes in base64)${name.endsWith('S') ? ', comma-separated' : ''}`);
    }
  }
  if (production && parseReleaseKeys(e.AGENT_RELEASE_PUBLIC_KEYS).length === 0) {
    throw new ConfigError('Invalid configuration: AGENT_RELEASE_PUBLIC_KEYS is required when NODE_ENV=production (agents only run signed builds)');
  }
  const sig = e.AGENT_RELEASE_KEYS_SIGNATURE?.trim();
  if (sig !== undefined && sig !== '') {
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(sig) || Buffer.from(sig, 'base64').length !== 64) {
      throw new ConfigError('Invalid configuration: AGENT_RELEASE_KEYS_SIGNATURE must be a base64 Ed25519 signature (64 bytes)');
    }
    if (parseReleaseKeys(e.AGENT_RELEASE_PUBLIC_KEYS).length === 0) {
      throw new ConfigError('Invalid configuration: AGENT_RELEASE_KEYS_SIGNATURE needs AGENT_RELEASE_PUBLIC_KEYS (the list it signs)');
    }
  }
}

/** Parses the environment. Throws ConfigError with one line naming the first bad variable. */
/** Names read outside the schema (the test harness, Node itself): never reported as look-alikes. */
const READ_ELSEWHERE = new Set(['NODE_OPTIONS', 'NODE_ENV', 'KEEL_TEST_DB', 'KEEL_LOOPBACK_GUARD', 'REQUIRE_REAL_BACKENDS', 'CONSOLE_DIR']);

/** Edit distance counting a swap of two neighbours as one edit (SMTP_ULR), stopping early past `max`. */
function distance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  const at = (row: number[], j: number): number => row[j] ?? Number.POSITIVE_INFINITY;
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      let v = Math.min(at(prev, j) + 1, at(row, j - 1) + 1, at(prev, j - 1) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, at(before, j - 2) + 1);
      row.push(v);
      best = Math.min(best, v);
    }
    if (best > max) return max + 1;
    before = prev;
    prev = row;
  }
  return at(prev, b.length);
}

/**
 * Environment variables that are not Keel's settings but look like one (a typo such as `SMTP_ULR`
 * or `ALLOW_INSECURE_TARGET`): each with the known name it is closest to. A misspelt setting is
 * otherwise silently ignored and its default applies; every command logs these as warnings.
 */
export function lookalikeSettings(env: Record<string, string | undefined> = process.env): { name: string; closest: string }[] {
  const known = Object.keys(envSchema.shape);
  const out: { name: string; closest: string }[] = [];
  for (const name of Object.keys(env)) {
    if (known.includes(name) || READ_ELSEWHERE.has(name) || !/^[A-Z][A-Z0-9_]*$/.test(name)) continue;
    const max = name.length <= 8 ? 1 : 2;
    let closest: string | null = null;
    let bestDistance = max + 1;
    for (const k of known) {
      const d = distance(name, k, max);
      if (d < bestDistance) {
        bestDistance = d;
        closest = k;
      }
    }
    if (closest) out.push({ name, closest });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = issue ? String(issue.path[0] ?? 'environment') : 'environment';
    const value = env[name];
    const message = issue?.message ?? 'invalid';
    throw new ConfigError(
      `Invalid configuration: ${name} ${message}${value !== undefined && !/SECRET|KEY|PASSWORD|TOKEN/.test(name) ? ` (got "${value}")` : ''}`,
    );
  }
  const e = parsed.data;
  const production = e.NODE_ENV === 'production';
  if (production && e.ALLOW_INSECURE_TARGETS) {
    throw new ConfigError('Invalid configuration: ALLOW_INSECURE_TARGETS=true is refused when NODE_ENV=production');
  }
  if (production && !(e.APP_ENCRYPTION_KEY ?? e.SECRET_ENCRYPTION_KEY)) {
    throw new ConfigError('Invalid configuration: APP_ENCRYPTION_KEY (or SECRET_ENCRYPTION_KEY) is required when NODE_ENV=production');
  }
  if (production && !e.JWT_SECRET) {
    throw new ConfigError('Invalid configuration: JWT_SECRET is required when NODE_ENV=production');
  }
  if (e.SMS_PROVIDER === 'twilio' && !(e.TWILIO_ACCOUNT_SID && e.TWILIO_AUTH_TOKEN && e.TWILIO_FROM)) {
    throw new ConfigError('Invalid configuration: SMS_PROVIDER=twilio needs TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM');
  }
  if (production && e.AGENT_RELEASE_URL && !e.AGENT_RELEASE_PUBLIC_KEY) {
    throw new ConfigError('Invalid configuration: AGENT_RELEASE_PUBLIC_KEY is required when NODE_ENV=production and AGENT_RELEASE_URL is set (release manifests must be signed)');
  }
  checkReleaseKeys(e, production);
  checkSecrets(e);
  checkAdmin(e);
  checkTrustProxy(e.TRUST_PROXY);
  const configured = e.PUBLIC_URL ?? e.PUBLIC_APP_URL ?? e.DASHBOARD_URL;
  const publicUrl = (configured ?? `http://localhost:${e.PORT}`).replace(/\/+$/, '');
  const { PUBLIC_URL: _a, PUBLIC_APP_URL: _b, DASHBOARD_URL: _c, SERVICE_VERSION, ...rest } = e;
  return { ...rest, production, publicUrl, publicUrlFromListenPort: configured === undefined, serviceVersion: SERVICE_VERSION ?? packageVersion() };
}

const JWT_SECRET_MIN = 32;

/** The secrets given in the environment are usable (every command checks them, not only `serve`). */
function checkSecrets(e: Env): void {
  const keyName = e.APP_ENCRYPTION_KEY !== undefined ? 'APP_ENCRYPTION_KEY' : 'SECRET_ENCRYPTION_KEY';
  const keyText = e.APP_ENCRYPTION_KEY ?? e.SECRET_ENCRYPTION_KEY;
  const key = keyText === undefined ? null : parseKey(keyText);
  if (keyText !== undefined && !key) throw new ConfigError(`Invalid configuration: ${keyName} must be 32 bytes as 64 hex characters or base64`);
  const previousKeys = (e.APP_ENCRYPTION_KEYS_PREVIOUS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (previousKeys.some((k) => !parseKey(k))) {
    throw new ConfigError('Invalid configuration: APP_ENCRYPTION_KEYS_PREVIOUS holds a key that is not 32 bytes (64 hex characters or base64)');
  }
  if (e.JWT_SECRET !== undefined && e.JWT_SECRET.length < JWT_SECRET_MIN) {
    throw new ConfigError(`Invalid configuration: JWT_SECRET must be at least ${JWT_SECRET_MIN} characters`);
  }
  const previousJwt = (e.JWT_SECRETS_PREVIOUS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (previousJwt.some((s) => s.length < JWT_SECRET_MIN)) {
    throw new ConfigError(`Invalid configuration: JWT_SECRETS_PREVIOUS holds a secret shorter than ${JWT_SECRET_MIN} characters`);
  }
  if (key && e.JWT_SECRET !== undefined && key.equals(Buffer.from(e.JWT_SECRET))) {
    throw new ConfigError(`Invalid configuration: ${keyName} must differ from JWT_SECRET`);
  }
}

/** ADMIN_EMAIL and ADMIN_PASSWORD come together (the password's strength is checked when it is used). */
function checkAdmin(e: Env): void {
  if (e.ADMIN_EMAIL !== undefined && e.ADMIN_PASSWORD === undefined) {
    throw new ConfigError('Invalid configuration: ADMIN_PASSWORD is required when ADMIN_EMAIL is set (the first administrator needs both)');
  }
  if (e.ADMIN_PASSWORD !== undefined && e.ADMIN_EMAIL === undefined) {
    throw new ConfigError('Invalid configuration: ADMIN_EMAIL is required when ADMIN_PASSWORD is set (the first administrator needs both)');
  }
}

/** TRUST_PROXY: comma-separated IP addresses of the proxies in front of Keel (each compared exactly). */
function checkTrustProxy(value: string | undefined): void {
  if (value === undefined) return;
  for (const entry of value.split(',').map((s) => s.trim())) {
    if (isIP(entry) === 0) {
      throw new ConfigError(
        `Invalid configuration: TRUST_PROXY must be a comma-separated list of proxy IP addresses, e.g. 127.0.0.1,10.0.0.5 (got "${entry}")`,
      );
    }
  }
}
