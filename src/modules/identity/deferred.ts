import type { Logger } from '../../platform/logger.js';
import { loggableError } from '../../platform/safe-error.js';
import { requestLog, type RequestRef } from '../../platform/request-scope.js';

/**
 * Work queued to run after the answer has been sent, in this process (forgot-password: finding the
 * account, creating the reset token, sending the email). The route does the same work whatever the
 * outcome will be and answers at once, so neither timing nor a failure tells anything to the caller.
 * A failure is logged with the task's name, never surfaced. The task is handed a logger naming the
 * request that queued it (`request`: its request id and traceparent), for the lines it writes.
 * `idle()` resolves once nothing is queued or running: tests wait on it instead of sleeping, and a
 * shutdown can wait on it.
 */
export class Deferred {
  readonly #running = new Set<Promise<void>>();

  constructor(private readonly log: Logger) {}

  /** Queues `work` behind `request` (it starts on a later turn of the event loop). */
  run(name: string, request: RequestRef, work: (log: Logger) => Promise<void>): void {
    const log = requestLog(this.log, request);
    const task = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => work(log))
      .catch((err: unknown) => {
        // Logged like an unhandled request error (platform/http/errors.ts): a database error's
        // parameters and failing row never reach the log.
        log.error({ task: name, error: loggableError(err) }, 'queued work failed');
      })
      .finally(() => {
        this.#running.delete(task);
      });
    this.#running.add(task);
  }

  /** Resolves when every queued task (and any task they queued) has finished. */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.all([...this.#running]);
  }
}
