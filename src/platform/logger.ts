import { writev, writevSync } from 'node:fs';
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';
import { loggableError, type LoggedError } from './safe-error.js';

/**
 * The fields of a log line. An error has one shape, `{ error: loggableError(err) }`: `error` takes
 * only what `loggableError` returns (a branded type), `err` (pino's own key) is refused, and so is an
 * error, a string or an `unknown` passed as the fields (an Error has no index signature).
 */
export interface LogFields {
  error?: LoggedError;
  err?: never;
  [field: string]: unknown;
}

/** A level method: a message, or fields and a message. No printf-style arguments. */
export interface LogFn {
  (msg: string): void;
  (fields: LogFields, msg?: string): void;
}

/**
 * The logger the code holds: pino's, seen through its level methods typed by `LogFields` (a pino
 * logger is one; its children are too).
 */
export interface Logger {
  level: string;
  trace: LogFn;
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  fatal: LogFn;
  child(bindings: Record<string, unknown>): Logger;
  isLevelEnabled(level: string): boolean;
}

/** Keys whose values never reach a log line, at any depth of a logged object. */
const REDACT = new Set([
  'password', 'currentPassword', 'newPassword', 'secret', 'clientSecret', 'token', 'tempToken', 'refreshToken',
  'accessToken', 'key', 'authorization', 'cookie', 'set-cookie', 'mfaSecret', 'recoveryCodes', 'ssoCode',
  'SAMLResponse', 'RelayState',
]);
/*
 * A `code` is a secret only by where it sits: the OAuth authorization code, an SSO exchange code or a
 * one-time code arrive as `code` in a request's query, body, form or parameters, so `code` is redacted
 * under those keys. Elsewhere `code` is an error code (`sso_error`, `23505`, `validation_failed`) and
 * stays visible: it is what an operator searches the logs for.
 */
const REDACT_UNDER = new Set(['query', 'body', 'params', 'form', 'searchParams', 'json']);
const CONTEXT_SECRETS = new Set(['code']);
/** A URL (absolute or a path) with a query string or fragment, which may carry a code or token. */
const URL_WITH_QUERY = /^(?:[a-z][a-z\d+.-]*:\/\/|\/)[^\s?#]*[?#]\S*$/i;
const CENSOR = '[redacted]';

/** A URL's query string and fragment replaced (`https://x/cb?[redacted]`); anything else as it is. */
function redactUrl(value: string): string {
  if (value.length < 3 || (!value.includes('?') && !value.includes('#')) || !URL_WITH_QUERY.test(value)) return value;
  const cut = value.search(/[?#]/);
  return `${value.slice(0, cut)}${value[cut]}${CENSOR}`;
}
const REDACT_DEPTH = 8;

function isPlain(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null || Array.isArray(value);
}

/*
 * Redaction walks the logged object's own keys once and copies only when a secret key is found, so
 * a line without secrets (every access line) costs a few Set lookups. pino's `redact` option
 * (fast-redact with a wildcard per key) cost about 12 µs a line, most of an access line's price.
 * Plain objects and arrays are walked (to REDACT_DEPTH); anything else (Date, Buffer, class
 * instances) is left to JSON as it is, and errors go through pino's `err` serializer first.
 */
export function redactSecrets<T>(value: T, depth = 0, parentKey?: string): T {
  if (typeof value === 'string') return redactUrl(value) as T;
  if (typeof value !== 'object' || value === null || depth > REDACT_DEPTH || !isPlain(value)) return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      const next = redactSecrets(item, depth + 1);
      if (next !== item) {
        copy ??= [...(value as unknown[])];
        copy[i] = next;
      }
    }
    return (copy ?? value) as T;
  }
  const source = value as Record<string, unknown>;
  const request = parentKey !== undefined && REDACT_UNDER.has(parentKey);
  let copy: Record<string, unknown> | null = null;
  for (const key of Object.keys(source)) {
    const item = source[key];
    const secret = REDACT.has(key) || (request && CONTEXT_SECRETS.has(key));
    const next = secret && item !== undefined && item !== null ? CENSOR : redactSecrets(item, depth + 1, key);
    if (next !== item) {
      copy ??= { ...source };
      copy[key] = next;
    }
  }
  return (copy ?? value) as T;
}

/*
 * Log lines go to stdout through one buffered, asynchronous writer per process (docs/decisions.md "Operating Keel: data directory, CLI, start-up, access log").
 * pino's default writes each line with its own synchronous write(2): at info, one access line per
 * request, that cost a large part of a cached read. Here a line is encoded straight into a chunk of
 * memory (no per-line Buffer; sonic-boom, pino's own asynchronous destination, measures the byte
 * length of its whole pending buffer on every line, ~3 µs a line at 8 KiB batches), and the chunks
 * go out in one asynchronous writev once LOG_BATCH_BYTES wait, or LOG_FLUSH_MS after the first line,
 * so a quiet server's lines still appear at once. Nothing is lost on a stop: `flushLogs()` resolves
 * when all is written (the `serve` shutdown awaits it), and on exit (process.exit, the end of the
 * event loop, a fatal error) the rest is written synchronously. A reader that stops reading (a full
 * pipe) makes lines wait, up to LOG_MAX_PENDING_BYTES; beyond that, lines are dropped and counted,
 * and the count is written once the output moves again. Written chunks are filled again (a few are
 * kept): a new 64 KiB chunk for every few hundred lines made the heap and RSS grow between
 * collections and cost a cached read about 15% of its throughput (bench/README.md).
 */
const CHUNK_BYTES = 64 * 1024;
const LOG_BATCH_BYTES = 32 * 1024;
const SPARE_CHUNKS = 4;
const LOG_FLUSH_MS = 50;
const LOG_MAX_PENDING_BYTES = 16 * 1024 * 1024;
const RETRY_MS = 10;

/** `buffers` without their first `bytes` bytes. */
function skipBytes(buffers: Buffer[], bytes: number): Buffer[] {
  let rest = bytes;
  const out: Buffer[] = [];
  for (const b of buffers) {
    if (rest >= b.length) rest -= b.length;
    else {
      out.push(rest > 0 ? b.subarray(rest) : b);
      rest = 0;
    }
  }
  return out;
}

export class BatchedWriter implements DestinationStream {
  private chunks: Buffer[] = [];
  private current = Buffer.allocUnsafe(CHUNK_BYTES);
  private used = 0;
  private pending = 0;
  private dropped = 0;
  private writing = false;
  private broken = false;
  private timer: NodeJS.Timeout | null = null;
  private waiters: (() => void)[] = [];
  /** Chunks already written, filled again: a busy server seals a 64 KiB chunk a few hundred times a second. */
  private spare: Buffer<ArrayBuffer>[] = [];

  constructor(private readonly fd: number) {}

  write(line: string): boolean {
    if (this.broken) return true;
    if (this.pending >= LOG_MAX_PENDING_BYTES) {
      this.dropped++;
      return false;
    }
    // UTF-8 takes at most 3 bytes per UTF-16 unit: a line that might not fit starts a new chunk.
    if (line.length * 3 > CHUNK_BYTES - this.used) {
      this.seal();
      if (line.length * 3 > CHUNK_BYTES) {
        const own = Buffer.from(line);
        this.chunks.push(own);
        this.pending += own.length;
        this.schedule();
        return true;
      }
    }
    const n = this.current.write(line, this.used);
    this.used += n;
    this.pending += n;
    this.schedule();
    return true;
  }

  /** Calls `done` once every line written so far is out. */
  flush(done: () => void): void {
    if (!this.writing && this.pending === 0 && this.dropped === 0) {
      done();
      return;
    }
    this.waiters.push(done);
    if (!this.writing) this.writeOut();
  }

  /** Writes the waiting lines now, synchronously (exit paths). A write already in flight completes on its own. */
  flushSync(): void {
    let buffers = this.take();
    while (!this.broken && buffers.length > 0) {
      try {
        buffers = skipBytes(buffers, writevSync(this.fd, buffers));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') this.broken = true;
        else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, RETRY_MS);
      }
    }
  }

  private schedule(): void {
    if (this.writing) return;
    if (this.pending >= LOG_BATCH_BYTES) this.writeOut();
    else this.timer ??= setTimeout(this.onTimer, LOG_FLUSH_MS).unref();
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    if (!this.writing) this.writeOut();
  };

  private seal(): void {
    if (this.used === 0) return;
    this.chunks.push(this.current.subarray(0, this.used));
    this.current = this.spare.pop() ?? Buffer.allocUnsafe(CHUNK_BYTES);
    this.used = 0;
  }

  private take(): Buffer[] {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.dropped > 0) {
      const note = { level: 40, time: new Date().toISOString(), service: 'keel', dropped: this.dropped, msg: 'log lines dropped: the output was not being read' };
      this.dropped = 0;
      this.seal();
      this.chunks.push(Buffer.from(`${JSON.stringify(note)}\n`));
    }
    this.seal();
    const out = this.chunks;
    this.chunks = [];
    this.pending = 0;
    return out;
  }

  private writeOut(): void {
    if (this.pending === 0 && this.dropped === 0) {
      this.settle();
      return;
    }
    this.writing = true;
    const taken = this.take();
    const attempt = (buffers: Buffer[]): void => {
      writev(this.fd, buffers, (err, written) => {
        if (err) {
          if (err.code === 'EAGAIN') {
            setTimeout(() => attempt(buffers), RETRY_MS);
            return;
          }
          this.broken = true; // EPIPE and the like: nobody reads stdout any more
        } else {
          const rest = skipBytes(buffers, written);
          if (rest.length > 0) {
            attempt(rest);
            return;
          }
        }
        this.writing = false;
        this.recycle(taken);
        if (this.broken) this.settle();
        else if (this.pending >= LOG_BATCH_BYTES || (this.waiters.length > 0 && this.pending > 0)) this.writeOut();
        else if (this.pending > 0) this.timer ??= setTimeout(this.onTimer, LOG_FLUSH_MS).unref();
        else this.settle();
      });
    };
    attempt(taken);
  }

  /**
   * Keeps written chunks to fill again: the views of whole CHUNK_BYTES allocations (a sealed chunk is
   * never the current one; a line too long for a chunk, or the dropped-lines note, has its own buffer).
   */
  private recycle(written: Buffer[]): void {
    for (const b of written) {
      if (this.spare.length >= SPARE_CHUNKS) return;
      if (b.byteOffset === 0 && b.buffer.byteLength === CHUNK_BYTES) this.spare.push(Buffer.from(b.buffer as ArrayBuffer, 0, CHUNK_BYTES));
    }
  }

  private settle(): void {
    if (this.writing || (this.pending > 0 && !this.broken)) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const done of waiters) done();
  }
}

let stdoutWriter: BatchedWriter | null = null;

function stdout(): BatchedWriter {
  if (!stdoutWriter) {
    const writer = new BatchedWriter(1);
    process.on('exit', () => writer.flushSync());
    stdoutWriter = writer;
  }
  return stdoutWriter;
}

let lastMs = -1;
let lastTime = '';

/** pino's isoTime, formatted once per millisecond (a busy server writes many lines in each). */
function isoTime(): string {
  const now = Date.now();
  if (now !== lastMs) {
    lastMs = now;
    lastTime = `,"time":"${new Date(now).toISOString()}"`;
  }
  return lastTime;
}

/**
 * A logger at `level`; by default writing to the process's buffered stdout destination (above).
 * A line about a request carries its `reqId` (and `traceparent`) through `requestLog`
 * (platform/request-scope.ts).
 */
export function createLogger(level: string, base: Record<string, unknown> = {}, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'keel', ...base },
      formatters: { log: (object) => redactSecrets(object) },
      // Errors are logged as `{ error: loggableError(err) }` (the `Logger` type refuses an `err` key). An `err`
      // that still arrives (a library's) goes through the same allow-list: a string stays one field, never
      // one key per character, and a database error never brings its parameters.
      serializers: { err: (err: unknown) => redactSecrets({ ...loggableError(err) }) },
      timestamp: isoTime,
    },
    destination ?? stdout(),
  );
}

/** Writes one access-log line: the request's id and traceparent, method, path (no query string), status and milliseconds. */
export type AccessLog = (reqId: string, traceparent: string | undefined, method: string, path: string, status: number, ms: number) => void;

type PinoInternals = PinoLogger & { [pino.symbols.chindingsSym]?: string; [pino.symbols.streamSym]?: DestinationStream };

/*
 * The access line is the one line written for every request, so it is formatted here by hand, the
 * way pino itself writes a line (level, time, the logger's bindings, the fields, msg), from
 * positional fields (no object per line), and handed straight to the logger's destination: pino's
 * mixin, formatters and generic serializer, and the line object, cost about 6 µs of a cached
 * read's ~40 (bench/README.md "Reads"). The fields are known: the id is `[\w.-]{1,100}` or a UUID
 * and the traceparent is validated hex (request-scope.ts), so only the method and path need JSON
 * escaping; no field is a secret (the path carries no query string). A 5xx goes through pino, at
 * error, whatever the level.
 */
export function accessLogger(log: Logger): AccessLog {
  const internals = log as unknown as PinoInternals;
  const bindings = internals[pino.symbols.chindingsSym] ?? '';
  const destination = internals[pino.symbols.streamSym];
  return (reqId, traceparent, method, path, status, ms) => {
    const rounded = Math.round(ms * 10) / 10;
    if (status >= 500 || !destination) {
      const line = traceparent === undefined ? { reqId, method, path, status, ms: rounded } : { reqId, traceparent, method, path, status, ms: rounded };
      if (status >= 500) log.error(line, 'request');
      else if (log.isLevelEnabled('info')) log.info(line, 'request');
      return;
    }
    if (!log.isLevelEnabled('info')) return;
    const trace = traceparent === undefined ? '' : `,"traceparent":"${traceparent}"`;
    destination.write(
      `{"level":30${isoTime()}${bindings},"reqId":"${reqId}"${trace},"method":${JSON.stringify(method)},"path":${JSON.stringify(path)},"status":${status},"ms":${rounded},"msg":"request"}\n`,
    );
  };
}

/** Resolves when every line logged so far to stdout has been written. */
export function flushLogs(): Promise<void> {
  const writer = stdoutWriter;
  if (!writer) return Promise.resolve();
  return new Promise((resolve) => writer.flush(resolve));
}

/** Writes every buffered stdout line now, synchronously (for paths that exit at once: fatal errors). */
export function flushLogsSync(): void {
  stdoutWriter?.flushSync();
}

