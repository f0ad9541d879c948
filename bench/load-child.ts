/**
 * One autocannon run in a process of its own (bench/lib.ts `loadInChild`): its options arrive as JSON
 * in LOAD_OPTIONS, its result leaves as JSON on stdout. A second load that shares the bench process
 * with a flood (bench/overload.ts) measures the bench's own event loop as much as the server.
 */
import autocannon, { type Options } from 'autocannon';

const opts = JSON.parse(process.env.LOAD_OPTIONS ?? '{}') as Options;
// LOAD_BODIES: request bodies sent in turn (a callback cannot cross the process boundary).
const bodies = JSON.parse(process.env.LOAD_BODIES ?? '[]') as string[];
if (bodies.length > 0 && opts.requests?.[0]) {
  let next = 0;
  opts.requests[0].setupRequest = (req) => ({ ...req, body: bodies[next++ % bodies.length] ?? '' });
}
autocannon(opts, (err, result) => {
  if (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
  process.stdout.write(JSON.stringify(result));
});
