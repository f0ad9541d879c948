import type { Logger } from '../logger.js';
import type { Keel } from '../../keel.js';
import { clock } from '../clock.js';

/**
 * Requests refused before they were read (the admission gate: platform/http/admission.ts) are logged
 * as ONE line per source address and second instead of an access line each (docs/deploy.md "Logs"):
 * under a flood a line per refusal cost about as much as the refusal itself.
 *
 * The line (pino, level warn, message `requests refused`), written once the second is over (at the
 * next refusal of a later second, on a timer, or when the process stops):
 *
 *   {"level":40,"time":…,"msg":"requests refused","source":"203.0.113.7","second":"2026-11-28T03:40:12.000Z",
 *    "refused":412,"status":503,"code":"overloaded","routes":{"POST /api/v1/auth/login":400,"POST /api/v1/auth/register":12}}
 *
 * Connections closed at once because their source holds MAX_CONNECTIONS_PER_SOURCE already (server.ts)
 * are counted the same way, on a line of their own with `"code":"connection_budget"`, no `status` (no
 * answer is sent) and `routes: {"connection": n}`.
 *
 * Past REFUSAL_LOG_SOURCES sources in one second, the others share one line whose `source` is
 * `other` with `sources` (how many), so a flood from many addresses still writes a bounded number
 * of lines.
 */

/** Sources logged on a line of their own per second; the rest are summed on one `other` line. */
export const REFUSAL_LOG_SOURCES = 100;

interface Entry {
  source: string;
  refused: number;
  status: number | undefined;
  code: string;
  routes: Map<string, number>;
  /** On an `other` line: the sources it sums with their counts (emptied every second, so bounded by a second's refusals). */
  others: Map<string, number> | null;
}

export class RefusalLog {
  readonly #log: Logger;
  #second = -1;
  readonly #bySource = new Map<string, Entry>();
  #timer: NodeJS.Timeout | null = null;

  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Counts one refusal from `source` in the current second (clock.ts): `route` is `METHOD path` or
   * `connection`; `status` is undefined when no answer was sent. Answers how many refusals with this
   * code `source` has had in this second, this one included (what refusal-hold.ts paces by).
   */
  refused(source: string, route: string, status: number | undefined, code: string): number {
    const second = clock.nowSeconds();
    if (second !== this.#second) {
      this.flush();
      this.#second = second;
    }
    let entry = this.#bySource.get(`${source} ${code}`);
    if (!entry) {
      const other = this.#bySource.size >= REFUSAL_LOG_SOURCES;
      const key = `${other ? 'other' : source} ${code}`;
      entry = this.#bySource.get(key);
      if (!entry) {
        entry = { source: other ? 'other' : source, refused: 0, status, code, routes: new Map(), others: other ? new Map() : null };
        this.#bySource.set(key, entry);
      }
    }
    entry.refused++;
    entry.routes.set(route, (entry.routes.get(route) ?? 0) + 1);
    this.#arm();
    if (!entry.others) return entry.refused;
    const count = (entry.others.get(source) ?? 0) + 1;
    entry.others.set(source, count);
    return count;
  }

  /** Writes the lines of the second counted so far (nothing when nothing was refused). */
  flush(): void {
    if (this.#bySource.size === 0) return;
    const second = new Date(this.#second * 1000).toISOString();
    for (const e of this.#bySource.values()) {
      this.#log.warn(
        {
          source: e.source,
          ...(e.others ? { sources: e.others.size } : {}),
          second,
          refused: e.refused,
          ...(e.status === undefined ? {} : { status: e.status }),
          code: e.code,
          routes: Object.fromEntries(e.routes),
        },
        'requests refused',
      );
    }
    this.#bySource.clear();
  }

  /** Stops the timer and writes what is counted (the process is stopping). */
  close(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.flush();
  }

  /** Once a second while refusals are counted: writes them when their second is over. */
  #arm(): void {
    if (this.#timer) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      if (clock.nowSeconds() !== this.#second) this.flush();
      if (this.#bySource.size > 0) this.#arm();
    }, 1000);
    this.#timer.unref();
  }
}

const logs = new WeakMap<Keel, RefusalLog>();

/** The refusal log of a Keel: one per process, shared by the HTTP app and the server; written out when the Keel closes. */
export function refusalLogOf(keel: Keel): RefusalLog {
  let log = logs.get(keel);
  if (!log) {
    const created = new RefusalLog(keel.log);
    keel.onClose(() => Promise.resolve(created.close()));
    logs.set(keel, created);
    log = created;
  }
  return log;
}
