import { pino, type Logger } from 'pino';

/** Paths whose values never reach a log line, wherever they appear in a logged object. */
const REDACT = [
  'password', 'currentPassword', 'newPassword', 'secret', 'clientSecret', 'token', 'tempToken', 'refreshToken',
  'accessToken', 'code', 'key', 'authorization', 'cookie', 'set-cookie', 'mfaSecret', 'recoveryCodes',
];

export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino({
    level,
    base: { service: 'keel', ...base },
    redact: {
      paths: [...REDACT, ...REDACT.map((p) => `*.${p}`), 'req.headers.authorization', 'req.headers.cookie'],
      censor: '[redacted]',
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}

export type { Logger };
