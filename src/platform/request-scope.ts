import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * What every log line written while serving a request carries (docs/decisions.md "Production
 * readiness"): the request id and, when the client sent a valid W3C `traceparent`, that header.
 * `requestContext` (platform/http/middleware.ts) runs the rest of the request inside `runInRequest`;
 * the logger (platform/logger.ts `createLogger`) adds these fields to each line through pino's
 * mixin, so no call site passes them by hand. Work a request leaves behind (a deferred task, an
 * afterCommit hook) keeps the fields: AsyncLocalStorage follows promises and timers.
 */
export interface RequestFields {
  readonly reqId: string;
  readonly traceparent?: string;
}

const scope = new AsyncLocalStorage<RequestFields>();

/** Runs `fn` with `fields` as the current request's fields. */
export function runInRequest<T>(fields: RequestFields, fn: () => T): T {
  return scope.run(fields, fn);
}

/** The fields of the request being served, or undefined outside a request (start-up, the delivery worker). */
export function currentRequest(): RequestFields | undefined {
  return scope.getStore();
}

/** `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case, neither id all zeros (W3C Trace Context, version 00). */
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

/** The incoming `traceparent` when it is valid (version 00 as W3C writes it), else undefined: an invalid one is ignored. */
export function validTraceparent(value: string | undefined): string | undefined {
  return value !== undefined && value.length === 55 && TRACEPARENT.test(value) ? value : undefined;
}
