import type { Database } from './client.js';
import type { LogFields } from '../logger.js';
import { loggableError } from '../safe-error.js';

/**
 * VACUUM and ANALYZE for the embedded database, which has no autovacuum: PGlite runs PostgreSQL as a
 * single standalone backend (`autovacuum` says `on`, but there is no launcher to act on it). Without
 * this, every update and delete leaves its dead row for good (a webhook delivery is written twice, a
 * session several times), the planner's statistics never change, and after about two billion
 * transactions PostgreSQL stops taking writes to protect itself from transaction id wraparound
 * (weeks at a thousand transactions a second).
 *
 * Every `intervalMs` the server does what autovacuum would, with its default thresholds, one table at
 * a time (PGlite runs on the main thread: a VACUUM holds every request while it runs, so tables go one
 * by one with the event loop in between, and each only when it has gathered enough work to be worth
 * it):
 * - VACUUM (ANALYZE) a table with more than 50 + 20% of its rows dead, or more than 1,000 + 20%
 *   inserted since its last VACUUM (so insert-only tables get frozen too);
 * - VACUUM (FREEZE) a table whose oldest unfrozen transaction id is older than `freezeAge`
 *   (autovacuum_freeze_max_age's default, 200 million), whatever its dead rows;
 * - ANALYZE a table with more than 50 + 10% of its rows changed since its last ANALYZE.
 *
 * On PostgreSQL the server's own autovacuum does this; the class is never started there.
 */

export interface MaintenanceStep {
  table: string;
  action: 'vacuum' | 'freeze' | 'analyze';
  deadRows: number;
  ms: number;
}

export interface MaintenanceLog {
  info(fields: LogFields, msg: string): void;
  warn(fields: LogFields, msg: string): void;
}

export interface MaintenanceOptions {
  /** Between two passes (default 30 s). */
  intervalMs?: number;
  /** Transaction id age at which a table is frozen (default 200 million). */
  freezeAge?: number;
}

interface TableStats extends Record<string, unknown> {
  table: string;
  live: number;
  dead: number;
  inserted: number;
  modified: number;
  xid_age: number;
}

const STATS = `
  select s.relname as table, s.n_live_tup::float8 as live, s.n_dead_tup::float8 as dead,
         s.n_ins_since_vacuum::float8 as inserted, s.n_mod_since_analyze::float8 as modified,
         age(c.relfrozenxid)::float8 as xid_age
    from pg_stat_user_tables s join pg_class c on c.oid = s.relid
   where s.schemaname = 'public'
   order by s.relname`;

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

export class PgliteMaintenance {
  readonly #database: Pick<Database, 'query'>;
  readonly #log: MaintenanceLog;
  readonly #intervalMs: number;
  readonly #freezeAge: number;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<MaintenanceStep[]> | null = null;
  #stopped = false;

  constructor(database: Pick<Database, 'query'>, log: MaintenanceLog, opts: MaintenanceOptions = {}) {
    this.#database = database;
    this.#log = log;
    this.#intervalMs = opts.intervalMs ?? 30_000;
    this.#freezeAge = opts.freezeAge ?? 200_000_000;
  }

  start(): void {
    this.#stopped = false;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.runOnce().finally(() => this.#schedule());
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and waits for a pass in progress (its current table) to end. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#running?.catch(() => undefined);
  }

  /** One pass: what it did, table by table. Errors are logged, never thrown (the next pass tries again). */
  runOnce(): Promise<MaintenanceStep[]> {
    this.#running ??= this.#pass().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #pass(): Promise<MaintenanceStep[]> {
    const done: MaintenanceStep[] = [];
    let tables: TableStats[];
    try {
      // This backend's counts since its last report, made visible to the query below.
      await this.#database.query('select pg_stat_force_next_flush()');
      tables = await this.#database.query<TableStats>(STATS);
    } catch (err) {
      this.#log.warn({ error: loggableError(err) }, 'database maintenance: the table statistics could not be read');
      return done;
    }
    for (const t of tables) {
      if (this.#stopped) break;
      const action = this.#due(t);
      if (!action) continue;
      const sql = action === 'analyze' ? `analyze ${quoted(t.table)}` : action === 'freeze' ? `vacuum (freeze, analyze) ${quoted(t.table)}` : `vacuum (analyze) ${quoted(t.table)}`;
      const t0 = performance.now();
      try {
        await this.#database.query(sql);
      } catch (err) {
        this.#log.warn({ table: t.table, error: loggableError(err) }, `database maintenance: ${action} failed`);
        continue;
      }
      const step: MaintenanceStep = { table: t.table, action, deadRows: t.dead, ms: Math.round(performance.now() - t0) };
      done.push(step);
      this.#log.info({ ...step }, `database maintenance: ${action} ${t.table}`);
      // Requests that waited for this table go first.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    return done;
  }

  #due(t: TableStats): MaintenanceStep['action'] | null {
    if (t.xid_age >= this.#freezeAge) return 'freeze';
    if (t.dead > 50 + 0.2 * t.live || t.inserted > 1_000 + 0.2 * t.live) return 'vacuum';
    if (t.modified > 50 + 0.1 * t.live) return 'analyze';
    return null;
  }
}
