import { loadConfig, type Config } from './config.js';
import { createLogger, type Logger } from './platform/logger.js';
import { resolveSecrets, type Secrets } from './platform/keys.js';
import { openDatabase, pgliteDirFor, type Database, type Db } from './platform/db/client.js';
import { migrate, pendingMigrations, MigrationError } from './platform/db/migrator.js';
import { connectRedis, type Redis } from './platform/redis.js';
import { RateLimits } from './platform/rate-limit.js';
import { createMailer, type Mailer } from './platform/mail.js';
import { createSmsGateway, type SmsGateway } from './platform/sms.js';
import { Invalidation } from './platform/invalidation.js';
import { EventBus } from './events.js';
import { SingleUseStore } from './platform/single-use.js';
import type { OutboundPolicy } from './platform/outbound.js';
import { hashesYieldTo, setHashQueueMax, setHashThreadNice } from './platform/argon2-pool.js';
import { createMetrics, type Metrics } from './platform/metrics.js';
import { ModuleRegistry } from './platform/module.js';
import { RequestLoad } from './platform/http/load.js';

/** Everything a module needs, built once per process and handed to each module's routes and services. */
export interface Keel {
  config: Config;
  log: Logger;
  database: Database;
  db: Db;
  secrets: Secrets;
  redis: Redis | null;
  limits: RateLimits;
  mailer: Mailer;
  /** SMS gateway: the development log sink or Twilio (SMS_PROVIDER). */
  sms: SmsGateway;
  events: EventBus;
  invalidation: Invalidation;
  singleUse: SingleUseStore;
  /** The policy every outbound request passes (platform/outbound.ts); one object, so one connection pool. */
  outbound: OutboundPolicy;
  /** Counters, gauges and histograms (platform/metrics.ts): no-ops unless METRICS_ENABLED. */
  metrics: Metrics;
  /** The requests this process is answering now (platform/http/load.ts): background work yields while it is busy. */
  requests: RequestLoad;
  /**
   * The installed modules' handles and background jobs (platform/module.ts), filled by the composition
   * root (src/compose.ts); a process starts the jobs of its roles (`keel.modules.start`).
   */
  modules: ModuleRegistry;
  /** Registers what `close` must stop before the container's own parts (a module's worker). */
  onClose(stop: () => Promise<void>): void;
  close(): Promise<void>;
}

export interface KeelOptions {
  config?: Config;
  log?: Logger;
  /** An already open database (tests share one); otherwise opened from the config. */
  database?: Database;
  /** Skip migrations and seed (the caller already did them). */
  skipMigrate?: boolean;
  /**
   * Start-up work of the modules on the freshly migrated database (the seed, the first administrator):
   * handed in by the composition root (src/compose.ts), since this container knows no module.
   */
  prepare?: (database: Database, opts: { config: Config; log: Logger; migrated: boolean }) => Promise<void>;
}

export async function createKeel(opts: KeelOptions = {}): Promise<Keel> {
  // A copy: the server completes `publicUrl` from the port it listens on (server.ts), per process.
  const config: Config = { ...(opts.config ?? loadConfig()) };
  const log = opts.log ?? createLogger(config.LOG_LEVEL);
  setHashQueueMax(config.HASH_QUEUE_MAX);
  setHashThreadNice(config.HASH_THREAD_NICE);
  const secrets = resolveSecrets(config, log);
  const sms = createSmsGateway({
    provider: config.SMS_PROVIDER,
    production: config.production,
    log,
    twilio: { accountSid: config.TWILIO_ACCOUNT_SID, authToken: config.TWILIO_AUTH_TOKEN, from: config.TWILIO_FROM, baseUrl: config.TWILIO_BASE_URL },
  });
  const ownsDatabase = !opts.database;
  const database = opts.database ?? (await openDatabase({ url: config.DATABASE_URL, pgliteDir: pgliteDirFor(config.DATA_DIR) }));
  try {
    if (!opts.skipMigrate) {
      if (config.AUTO_MIGRATE) {
        const { applied } = await migrate(database);
        if (applied.length > 0) log.info({ applied }, 'migrations applied');
      } else {
        const pending = await pendingMigrations(database);
        if (pending.length > 0) throw new MigrationError(`Pending migrations (${pending.join(', ')}) and AUTO_MIGRATE=false: run \`keel migrate\``);
      }
    }
    await opts.prepare?.(database, { config, log, migrated: !opts.skipMigrate });
  } catch (err) {
    if (ownsDatabase) await database.close();
    throw err;
  }
  const redis = config.REDIS_URL ? await connectRedis(config.REDIS_URL) : null;
  // Several processes can share PostgreSQL: a missed message (a process stopped before it could
  // announce, a bus that lost it) leaves a cache stale for at most CACHE_MAX_STALENESS_SECONDS.
  const invalidation = new Invalidation({ database, redisUrl: config.REDIS_URL, redis }, log, database.kind === 'postgres' ? { maxStalenessMs: config.CACHE_MAX_STALENESS_SECONDS * 1000 } : {});
  await invalidation.start();
  const closers: (() => Promise<void>)[] = [];
  const metrics = await createMetrics(config.METRICS_ENABLED);
  const keel: Keel = {
    config,
    log,
    database,
    db: database.db,
    secrets,
    redis,
    limits: new RateLimits(redis),
    mailer: createMailer({ smtpUrl: config.SMTP_URL, from: config.MAIL_FROM, production: config.production, log }),
    sms,
    events: new EventBus(),
    invalidation,
    singleUse: new SingleUseStore(secrets.sealer),
    outbound: { allowInsecure: config.ALLOW_INSECURE_TARGETS },
    metrics,
    requests: new RequestLoad(),
    modules: new ModuleRegistry(),
    onClose(stop) {
      closers.push(stop);
    },
    async close() {
      // The jobs still running (the delivery engine cancels and releases its attempts), then what the
      // modules registered, newest first, then what they use.
      await keel.modules.stop({ graceful: false });
      for (const stop of closers.splice(0).reverse()) await stop();
      await invalidation.stop();
      redis?.disconnect();
      if (ownsDatabase) await database.close();
    },
  };
  // Hashing yields while this process's API is saturated (argon2-pool.ts): a login flood does not take the cores from reads.
  const stopYielding = hashesYieldTo(() => keel.requests.saturated);
  keel.onClose(() => Promise.resolve(stopYielding()));
  return keel;
}
