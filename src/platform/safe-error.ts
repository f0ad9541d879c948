/**
 * What of an error may reach a log line (docs/security.md "Findings", 6).
 *
 * Database errors carry what was sent with the query: PGlite's errors have `params`, drizzle's
 * `DrizzleQueryError` has `params` and writes them into its message (and so into its stack), and
 * PostgreSQL's `detail` repeats the failing row ("Failing row contains (…)", with a password hash or
 * a token hash in it) or the duplicate key's value. A log line gets, of a database error, only what
 * names the failure: its SQLSTATE code, severity, the constraint, table, column and schema, the
 * message with any quoted value taken out, the query text (placeholders, never values) and the stack
 * frames; of any other error its name, message, code and stack; the same for each `cause`. Nothing
 * else of an error object is copied, so a property a library adds later cannot leak either.
 */

declare const loggable: unique symbol;

/**
 * What `loggableError` returns, and the only type a log line's `error` field takes (platform/logger.ts
 * `LogFields`): the brand cannot be written by hand, so a string, a raw error or an object that only
 * looks like one is a type error at the log call.
 */
export type LoggedError = LoggedErrorFields & { readonly [loggable]: true };

interface LoggedErrorFields {
  name: string;
  message: string;
  code?: string | number;
  severity?: string;
  constraint?: string;
  table?: string;
  column?: string;
  schema?: string;
  /** SQL text with its placeholders ($1, $2 …); never the values. */
  query?: string;
  stack?: string;
  cause?: LoggedError;
}

const SQLSTATE = /^[0-9A-Z]{5}$/;

type Props = Record<string, unknown>;

const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** A driver error (pg, PGlite): an SQLSTATE code and PostgreSQL's own fields. */
function isDatabaseError(e: Props): boolean {
  return typeof e.code === 'string' && SQLSTATE.test(e.code) && ('severity' in e || 'routine' in e || 'constraint' in e);
}

/** An error that wraps a failed query with its parameters (drizzle's DrizzleQueryError, or anything shaped like it). */
function isQueryWrapper(e: Props, name: string): boolean {
  return name === 'DrizzleQueryError' || ('params' in e && 'query' in e);
}

/** PostgreSQL quotes an offending value at the end of some messages (`invalid input syntax for type uuid: "…"`). */
function withoutValues(message: string): string {
  return message.replace(/: ".*"$/s, ': "…"').replace(/\bvalue "[^"]*"/g, 'value "…"');
}

/** The stack's frames, without the message line(s) above them. */
function frames(stack: unknown): string | undefined {
  if (typeof stack !== 'string') return undefined;
  const lines = stack.split('\n').filter((l) => /^\s+at /.test(l));
  return lines.length > 0 ? lines.join('\n') : undefined;
}

function put<K extends keyof LoggedErrorFields>(out: LoggedErrorFields, key: K, value: LoggedErrorFields[K] | undefined): void {
  if (value !== undefined) out[key] = value;
}

/** The loggable form of anything thrown (see above). */
export function loggableError(err: unknown, depth = 0): LoggedError {
  if (typeof err !== 'object' || err === null) return { name: typeof err, message: String(err).slice(0, 500) } as LoggedError;
  const e = err as Props;
  const name = text(e.name) ?? err.constructor.name;
  let out: LoggedErrorFields;
  if (isDatabaseError(e)) {
    out = { name, message: withoutValues(text(e.message) ?? '') };
    put(out, 'code', text(e.code));
    put(out, 'severity', text(e.severity));
    put(out, 'constraint', text(e.constraint));
    put(out, 'table', text(e.table));
    put(out, 'column', text(e.column));
    put(out, 'schema', text(e.schema));
    put(out, 'query', text(e.query));
    put(out, 'stack', frames(e.stack));
  } else if (isQueryWrapper(e, name)) {
    out = { name, message: 'Failed query' };
    put(out, 'query', text(e.query));
    put(out, 'stack', frames(e.stack));
  } else {
    out = { name, message: text(e.message) ?? '' };
    if (typeof e.code === 'string' || typeof e.code === 'number') out.code = e.code;
    put(out, 'stack', text(e.stack));
  }
  if (e.cause !== undefined && depth < 5) out.cause = loggableError(e.cause, depth + 1);
  return out as LoggedError;
}
