/**
 * Modules and their background jobs (docs/architecture.md "Modules and their jobs"). Each module with
 * state exports an `install(keel)` that answers a `KeelModule`: its handle (its caches, limits, ports)
 * and the jobs it runs in the background. The composition root installs every module, in layer order,
 * into the container's registry (`keel.modules`); a process starts the jobs of its roles.
 *
 * The platform knows no module: each module adds its handle's type to `ModuleHandles` by declaration
 * merging, so `keel.modules.get('agents')` is typed without this file naming it.
 */

/**
 * What a process does: `api` answers HTTP (`keel serve`), `worker` runs the background work that needs
 * one process of the fleet at least (`keel worker`, or `keel serve` with WORKER=inline).
 */
export type ProcessRole = 'api' | 'worker';

export interface JobStopOptions {
  /** Let work in flight finish (a signal) rather than cancel it (a close without one). */
  graceful: boolean;
}

export interface Job {
  /** `<module>.<job>`, unique in the process. */
  name: string;
  /** The process roles that run it: it starts when the process has one of them. */
  roles: readonly ProcessRole[];
  start(): void | Promise<void>;
  stop(opts: JobStopOptions): void | Promise<void>;
}

export interface KeelModule<H> {
  handle: H;
  jobs?: readonly Job[];
}

/** The handles of the installed modules, by name: each module adds its own entry (`declare module`). */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface ModuleHandles {}

export type ModuleName = keyof ModuleHandles;

export class ModuleRegistry {
  readonly #handles = new Map<string, unknown>();
  readonly #jobs: Job[] = [];
  #started: Job[] = [];

  /** Installs a module once per container; its jobs are declared, not started. Answers its handle. */
  install<N extends ModuleName>(name: N, module: KeelModule<ModuleHandles[N]>): ModuleHandles[N] {
    if (this.#handles.has(name)) throw new Error(`module ${name} is installed twice on this Keel`);
    for (const job of module.jobs ?? []) {
      if (this.#jobs.some((j) => j.name === job.name)) throw new Error(`job ${job.name} is declared twice`);
      this.#jobs.push(job);
    }
    this.#handles.set(name, module.handle);
    return module.handle;
  }

  /** The handle of an installed module; throws for one that was not installed (nothing is created lazily). */
  get<N extends ModuleName>(name: N): ModuleHandles[N] {
    if (!this.#handles.has(name)) throw new Error(`module ${name} is not installed on this Keel: build it through openKeel (src/compose.ts)`);
    return this.#handles.get(name) as ModuleHandles[N];
  }

  /** Every declared job, in install order. */
  jobs(): readonly Job[] {
    return this.#jobs;
  }

  /** The jobs a process with these roles runs, in install order. */
  jobsFor(roles: readonly ProcessRole[]): Job[] {
    return this.#jobs.filter((j) => j.roles.some((r) => roles.includes(r)));
  }

  /** The jobs started in this process, in start order. */
  running(): readonly Job[] {
    return this.#started;
  }

  /** Starts the jobs of these roles not yet running, in install order. */
  async start(roles: readonly ProcessRole[]): Promise<void> {
    for (const job of this.jobsFor(roles)) {
      if (this.#started.includes(job)) continue;
      await job.start();
      this.#started.push(job);
    }
  }

  /** Stops the running jobs, newest first (the container's `close` does it too, not gracefully). */
  async stop(opts: JobStopOptions): Promise<void> {
    const started = this.#started;
    this.#started = [];
    for (const job of started.reverse()) await job.stop(opts);
  }
}

/**
 * A job that runs `run` every `everyMs` (a timer that keeps no process alive). A run still going when
 * the next is due is not doubled; a failed run goes to `failed` and the next tick tries again. `stop`
 * clears the timer, waits for a run in flight, then runs `finally` (a last flush).
 */
export function intervalJob(opts: {
  name: string;
  roles: readonly ProcessRole[];
  everyMs: number;
  run: () => Promise<unknown>;
  failed: (err: unknown) => void;
  finally?: () => Promise<void>;
}): Job {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  const tick = (): void => {
    if (running) return;
    running = opts
      .run()
      .then(() => undefined, opts.failed)
      .finally(() => {
        running = null;
      });
  };
  return {
    name: opts.name,
    roles: opts.roles,
    start() {
      if (timer) return;
      timer = setInterval(tick, opts.everyMs);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = null;
      if (running) await running;
      await opts.finally?.();
    },
  };
}
