/**
 * The physical baseline for logins: Argon2id verifies per second with @node-rs/argon2's defaults
 * (the parameters Keel hashes with), `BENCH_CONCURRENCY` verifies in flight for `BENCH_SECONDS`.
 * Runs in its own process (started by bench/login.ts) and prints one JSON line.
 */
import { hash, verify } from '@node-rs/argon2';

const concurrency = Number(process.env.BENCH_CONCURRENCY ?? '8');
const seconds = Number(process.env.BENCH_SECONDS ?? '10');
const password = 'correct-horse-battery-0-staple';
const stored = await hash(password);

// A short warm-up, as the HTTP runs have (connections opening, JIT).
const warmUntil = performance.now() + 1_000;
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (performance.now() < warmUntil) await verify(stored, password);
}));

let done = 0;
let failed = 0;
// This process's CPU (main thread and libuv's pool, where the verifies run) over the counted window.
const cpuBefore = process.cpuUsage();
const started = performance.now();
const until = started + seconds * 1000;
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (performance.now() < until) {
    if (await verify(stored, password)) done++;
    else failed++;
  }
}));
const elapsed = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
const cpuMsPerVerify = (cpu.user + cpu.system) / 1000 / done;
process.stdout.write(`${JSON.stringify({ verifies: done, failed, seconds: elapsed, perSecond: done / elapsed, cpuMsPerVerify, concurrency, params: stored.split('$')[3] })}\n`);
