/*
 * Whether an error means "the database cannot be reached right now" rather than "this statement is
 * wrong": a refused or dropped connection, a server shutting down or starting up, no connection slot.
 * Such a request is answered 503 with Retry-After (platform/http/errors.ts), never 500, and succeeds
 * once PostgreSQL is back: node-postgres's pool opens new connections by itself.
 */

/** Node socket errors and PostgreSQL SQLSTATEs of an unreachable or restarting server. */
const CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTCONN', '57P01', '57P02', '57P03', '53300']);
const MESSAGES = /Connection terminated|connection timeout|Client has encountered a connection error|Client was closed and is not queryable|timeout exceeded when trying to connect/i;

export function databaseUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && (CODES.has(code) || code.startsWith('08'))) return true;
    const message = (e as { message?: unknown }).message;
    if (typeof message === 'string' && MESSAGES.test(message)) return true;
    // AggregateError (a connection attempt to several addresses) carries its reasons in `errors`.
    const errors = (e as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors.some((x) => databaseUnavailable(x))) return true;
  }
  return false;
}
