/**
 * Where the CPU of a benchmark goes, from Linux's /proc: a server's main thread and its other
 * threads (hashing, V8's helpers), the database servers on this machine (postgres, redis-server),
 * the load generator (this process) and the machine as a whole. Divided by the operations counted
 * in the same window, it gives CPU milliseconds per operation: with every core busy, throughput is
 * the cores divided by that, so this is what a ratio to a physical limit is made of.
 *
 * Without /proc (not Linux) every figure is NaN and the tables print '-'.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';

/** Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux everywhere). */
const TICKS = 100;
const DATABASE_SERVERS = new Set(['postgres', 'redis-server']);

interface Snapshot {
  main: number;
  threads: number;
  /** CPU seconds of each database server process, by pid. */
  servers: Map<string, number>;
  loadGenerator: number;
  /** Busy seconds of the whole machine (all cores, all processes, kernel included). */
  machine: number;
}

export interface CpuPerOp {
  /** The server's main thread (JavaScript, HTTP, PGlite). */
  mainMs: number;
  /** The server's other threads: Argon2 hashing above all, V8's compiler and GC helpers. */
  threadsMs: number;
  /** postgres and redis-server processes. */
  serversMs: number;
  /** This process: autocannon, or the verify loop of the bare baseline. */
  loadGeneratorMs: number;
  /** Everything busy on the machine: the above, the kernel's own work and anything else running. */
  machineMs: number;
}

function statFields(path: string): string[] | null {
  try {
    const stat = readFileSync(path, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** utime + stime of a /proc stat file, in seconds (fields 14 and 15 of proc(5)). */
function cpuOf(path: string): number {
  const f = statFields(path);
  return f ? (Number(f[11]) + Number(f[12])) / TICKS : 0;
}

function commOf(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '';
  }
}

function machineBusy(): number {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait.
  const total = cpu.reduce((a, b) => a + b, 0);
  return (total - (cpu[3] ?? 0) - (cpu[4] ?? 0)) / TICKS;
}

function snapshot(serverPid: number | null): Snapshot {
  let main = 0;
  let threads = 0;
  if (serverPid !== null) {
    for (const tid of readdirSync(`/proc/${serverPid}/task`)) {
      const cpu = cpuOf(`/proc/${serverPid}/task/${tid}/stat`);
      if (Number(tid) === serverPid) main += cpu;
      else threads += cpu;
    }
  }
  const servers = new Map<string, number>();
  for (const pid of readdirSync('/proc')) {
    if (/^\d+$/.test(pid) && DATABASE_SERVERS.has(commOf(pid))) servers.set(pid, cpuOf(`/proc/${pid}/stat`));
  }
  const own = process.cpuUsage();
  return { main, threads, servers, loadGenerator: (own.user + own.system) / 1e6, machine: machineBusy() };
}

const cpuMeasurable = existsSync('/proc/stat') && existsSync(`/proc/${process.pid}/task`);

/**
 * Starts measuring the server `serverPid` (null: none); `stop(ops)` answers CPU ms per operation.
 */
export function cpuMeter(serverPid: number | null): { stop(ops: number): CpuPerOp } {
  const before = cpuMeasurable ? snapshot(serverPid) : null;
  return {
    stop(ops: number): CpuPerOp {
      if (!before || ops <= 0) return { mainMs: NaN, threadsMs: NaN, serversMs: NaN, loadGeneratorMs: NaN, machineMs: NaN };
      const after = snapshot(serverPid);
      const per = (a: number, b: number): number => ((b - a) * 1000) / ops;
      // A database backend that ended inside the window took its CPU with it; one that started counts whole.
      let servers = 0;
      for (const [pid, cpu] of after.servers) servers += cpu - (before.servers.get(pid) ?? 0);
      return {
        mainMs: per(before.main, after.main),
        threadsMs: per(before.threads, after.threads),
        serversMs: per(0, servers),
        loadGeneratorMs: per(before.loadGenerator, after.loadGenerator),
        machineMs: per(before.machine, after.machine),
      };
    },
  };
}
