import { pino, type DestinationStream, type Logger } from 'pino';

/** Paths whose values never reach a log line, wherever they appear in a logged object. */
const REDACT = [
  'password', 'currentPassword', 'newPassword', 'secret', 'clientSecret', 'token', 'tempToken', 'refreshToken',
  'accessToken', 'code', 'key', 'authorization', 'cookie', 'set-cookie', 'mfaSecret', 'recoveryCodes',
];

/*
 * Log lines go to stdout through one buffered, asynchronous destination per process (issue 14.2).
 * pino's default writes each line with its own synchronous write(2): at info, one access line per
 * request, that cost about 40% of a cached read's throughput. Here lines collect in memory and are
 * written in batches of LOG_BATCH_BYTES by an asynchronous write, and at least every
 * LOG_FLUSH_INTERVAL_MS, so a quiet server's lines still appear at once. Nothing is lost on a stop:
 * `flushLogs()` waits for the buffer to be written (the `serve` shutdown calls it), and on exit
 * (process.exit, the end of the event loop, a fatal error handled in main.ts) pino writes the rest
 * synchronously (its exit hook, `flushLogsSync`).
 */
const LOG_BATCH_BYTES = 8192;
const LOG_FLUSH_INTERVAL_MS = 100;

type SonicBoom = ReturnType<typeof pino.destination>;
let stdoutDestination: SonicBoom | null = null;

function stdout(): SonicBoom {
  stdoutDestination ??= pino.destination({ dest: 1, sync: false, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_INTERVAL_MS });
  return stdoutDestination;
}

/** A logger at `level`; by default writing to the process's buffered stdout destination (above). */
export function createLogger(level: string, base: Record<string, unknown> = {}, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'keel', ...base },
      redact: {
        paths: [...REDACT, ...REDACT.map((p) => `*.${p}`), 'req.headers.authorization', 'req.headers.cookie'],
        censor: '[redacted]',
      },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination ?? stdout(),
  );
}

/** Resolves when every line logged so far to stdout has been written. */
export function flushLogs(): Promise<void> {
  const dest = stdoutDestination;
  if (!dest) return Promise.resolve();
  return new Promise((resolve) => {
    dest.flush(() => resolve());
  });
}

/** Writes every buffered stdout line now, synchronously (for paths that exit at once: fatal errors). */
export function flushLogsSync(): void {
  try {
    stdoutDestination?.flushSync();
  } catch {
    // not ready yet (nothing written), or a write already in flight that the exit hook completes
  }
}

export type { Logger };
