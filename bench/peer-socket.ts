/**
 * What one busy client socket costs a bare HTTP server (bench/README.md "A client socket beside the
 * server"): bare hono answering GET /me, alone, and with one TCP connection to a Redis on which it
 * sends one PING a second (what a server holding a database or Redis connection does, far less often
 * than Keel does). Both servers up, measured in alternating rounds, 10 connections.
 *
 *   tsx bench/peer-socket.ts          (needs the PostgreSQL/Redis binaries the tests use)
 */
import { BENCH_SECONDS, fmt, load, okPerSecond, printTable, startBare, startPostgres } from './lib.js';

const ROUNDS = Number(process.env.BENCH_READ_ROUNDS ?? '3');
const server = await startPostgres();
if (!server?.redisUrl) {
  process.stderr.write('Redis binaries not found: nothing to measure\n');
  process.exit(0);
}
const redis = new URL(server.redisUrl);
const plain = await startBare();
const peered = await startBare({ BARE_PEER: `${redis.hostname}:${redis.port}` });
const rows: string[][] = [];
try {
  for (let round = 1; round <= ROUNDS; round++) {
    const a = okPerSecond(await load({ url: `${plain.url}/me`, connections: 10, duration: BENCH_SECONDS }));
    const b = okPerSecond(await load({ url: `${peered.url}/me`, connections: 10, duration: BENCH_SECONDS }));
    rows.push([String(round), fmt(a), fmt(b), (b / a).toFixed(2)]);
  }
} finally {
  await plain.stop();
  await peered.stop();
  await server.stop();
}
printTable('Bare hono GET /me, alone and beside one client socket sending a PING a second', ['round', 'alone req/s', 'with the socket req/s', 'share'], rows);
