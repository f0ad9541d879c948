import type { Logger } from './logger.js';

/*
 * Which request a log line belongs to (docs/decisions.md "Production readiness", Request ids on every line). The access
 * line carries the request id and the client's `traceparent`; a service line written for a request
 * carries them through `requestLog`, given the request facts the route already hands every service
 * for its audit entries (`requestInfo(c)`: `requestId`, `traceparent`). Work a request leaves behind
 * (identity's deferred queue: emails after the answer) is handed the same logger.
 *
 * This is explicit on purpose. An AsyncLocalStorage made it implicit, but on Node 20 it turns on
 * the promise hooks for every promise the process makes, and that cost 10 to 30% of the throughput
 * of every route (bench/README.md "Figures at stop 25"), for the dozen lines a request may write.
 */

/** The request facts a line needs; `requestInfo(c)` (and every audit context built from it) has them. */
export interface RequestRef {
  readonly requestId?: string | null | undefined;
  readonly traceparent?: string | null | undefined;
}

/** `log`, with the request's `reqId` and `traceparent` on every line when `request` names one. */
export function requestLog(log: Logger, request: RequestRef | null | undefined): Logger {
  if (!request?.requestId) return log;
  return log.child(request.traceparent ? { reqId: request.requestId, traceparent: request.traceparent } : { reqId: request.requestId });
}

/** `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case, neither id all zeros (W3C Trace Context, version 00). */
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

/** The incoming `traceparent` when it is valid (version 00 as W3C writes it), else undefined: an invalid one is ignored. */
export function validTraceparent(value: string | undefined): string | undefined {
  return value !== undefined && value.length === 55 && TRACEPARENT.test(value) ? value : undefined;
}
