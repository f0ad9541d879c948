/**
 * What an AsyncLocalStorage costs every promise of the process (README "Request ids and tracing"):
 * a chain of awaits, as a request handler makes, timed with no AsyncLocalStorage in the process,
 * then inside `als.run` once one exists. On Node 20 any AsyncLocalStorage turned on the promise
 * hooks for every promise; from Node 24 it is built on AsyncContextFrame (the context travels with
 * the continuation, no hook per promise). Run it on each Node to compare:
 *   npx tsx bench/async-context.ts          (Node 24, the project's)
 * Prints the ns per await of each case and their ratio (best of 5 rounds).
 */
const ROUNDS = 5;
const AWAITS = 2_000_000;

function step(n: number): Promise<number> {
  return Promise.resolve(n + 1);
}

async function chain(): Promise<number> {
  let n = 0;
  for (let i = 0; i < AWAITS; i++) n = await step(n);
  return n;
}

async function best(run: () => Promise<unknown>): Promise<number> {
  let min = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const t = process.hrtime.bigint();
    await run();
    min = Math.min(min, Number(process.hrtime.bigint() - t) / AWAITS);
  }
  return min;
}

const plain = await best(chain);
const { AsyncLocalStorage } = await import('node:async_hooks');
const als = new AsyncLocalStorage<{ reqId: string }>();
const stored = await best(() => als.run({ reqId: 'r' }, chain));
const after = await best(chain);
console.log(`node ${process.version}: ${plain.toFixed(1)} ns/await without AsyncLocalStorage, ${stored.toFixed(1)} inside als.run (x${(stored / plain).toFixed(2)}), ${after.toFixed(1)} outside it once one exists (x${(after / plain).toFixed(2)}); load ${(await import('node:os')).loadavg()[0]?.toFixed(2)}`);
