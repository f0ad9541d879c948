import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { ConfigError, type Config } from '../config.js';
import { KeyedHash, parseKey, Sealer, sealingKey } from './crypto.js';
import type { Logger } from './logger.js';

export interface Secrets {
  sealer: Sealer;
  /** Keyed hashes under the same keyring: recovery codes, SMS codes, the SSO state cookie. */
  keyed: KeyedHash;
  /** Current JWT signing secret first, then older ones still accepted for verification. */
  jwtSecrets: Buffer[];
}

interface DevSecretsFile {
  appEncryptionKey: string;
  jwtSecret: string;
}

/**
 * Resolves the encryption key and JWT secret. In production both come from the environment
 * (config.ts refuses to start otherwise). In development, missing ones are generated once into
 * DATA_DIR/secrets.json (mode 0600) with a warning, so restarts keep sessions and sealed data.
 */
export function resolveSecrets(config: Config, log: Logger): Secrets {
  let appKeyText = config.APP_ENCRYPTION_KEY ?? config.SECRET_ENCRYPTION_KEY;
  let jwtText = config.JWT_SECRET;
  if (!appKeyText || !jwtText) {
    const file = join(config.DATA_DIR, 'secrets.json');
    let stored: DevSecretsFile;
    if (existsSync(file)) {
      try {
        stored = JSON.parse(readFileSync(file, 'utf8')) as DevSecretsFile;
      } catch {
        throw new ConfigError(`Invalid configuration: ${file} is not readable JSON (restore it, or set APP_ENCRYPTION_KEY and JWT_SECRET)`);
      }
    } else {
      mkdirSync(config.DATA_DIR, { recursive: true });
      stored = { appEncryptionKey: randomBytes(32).toString('hex'), jwtSecret: randomBytes(48).toString('base64url') };
      writeFileSync(file, JSON.stringify(stored, null, 2), { mode: 0o600 });
      chmodSync(file, 0o600);
    }
    log.warn({ file }, 'APP_ENCRYPTION_KEY or JWT_SECRET not set: using development secrets generated in DATA_DIR (never do this in production)');
    appKeyText ??= stored.appEncryptionKey;
    jwtText ??= stored.jwtSecret;
  }
  // Values from the environment were checked by loadConfig (config.ts checkSecrets); these guard a hand-edited secrets.json.
  const appKey = parseKey(appKeyText);
  if (!appKey) throw new ConfigError('Invalid configuration: APP_ENCRYPTION_KEY must be 32 bytes as 64 hex characters or base64');
  const previous = (config.APP_ENCRYPTION_KEYS_PREVIOUS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const k = parseKey(s);
      if (!k) throw new ConfigError('Invalid configuration: APP_ENCRYPTION_KEYS_PREVIOUS holds a key that is not 32 bytes');
      return sealingKey(k);
    });
  if (jwtText.length < 32) throw new ConfigError('Invalid configuration: JWT_SECRET must be at least 32 characters');
  const jwtSecrets = [jwtText, ...(config.JWT_SECRETS_PREVIOUS ?? '').split(',').map((s) => s.trim()).filter(Boolean)].map((s) =>
    Buffer.from(s),
  );
  if (appKey.equals(jwtSecrets[0] ?? Buffer.alloc(0))) {
    throw new ConfigError('Invalid configuration: APP_ENCRYPTION_KEY must differ from JWT_SECRET');
  }
  return { sealer: new Sealer(sealingKey(appKey), previous), keyed: new KeyedHash(sealingKey(appKey), previous), jwtSecrets };
}
