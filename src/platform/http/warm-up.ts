import { createServer, type Server } from 'node:http';
import { Worker } from 'node:worker_threads';

/**
 * Node's HTTP server path, warmed before the process has any client-socket traffic (`keel serve` on
 * PostgreSQL or Redis; bench/README.md "A client socket beside the server").
 *
 * V8 optimises Node's shared stream code (`onwrite`, `Readable.read`, `endReadable`, …) for the
 * sockets it sees first. When a database or Redis client socket has carried traffic before the first
 * HTTP requests, the server's sockets take the slow path for good: a bare server with one idle
 * connection that sends a PING a second answers 0.78-0.85 of the requests it answers alone, unless
 * it served HTTP first. So before Keel opens PostgreSQL or Redis, it answers WARM_REQUESTS requests
 * from a worker thread (its own V8 isolate: the client side leaves no trace in this one) on a
 * loopback port closed right after. At most WARM_MS; a failure only skips the warm-up.
 */
export const WARM_REQUESTS = 3_000;
const WARM_MS = 2_000;
const BODY = JSON.stringify({ id: '00000000-0000-7000-8000-000000000000', email: 'warm-up@example.com', name: 'Warm up', status: 'active', permissions: [] });

const CLIENT = `
const { workerData, parentPort } = require('node:worker_threads');
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
let left = workerData.requests;
const one = () => new Promise((resolve, reject) => {
  const req = http.request({ host: '127.0.0.1', port: workerData.port, path: '/warm-up', method: left % 2 ? 'GET' : 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => { res.resume(); res.on('end', resolve); });
  req.on('error', reject);
  req.end(left % 2 ? undefined : '{"warm":true}');
});
Promise.all([0, 1, 2, 3].map(async () => { while (left-- > 0) await one(); }))
  .then(() => parentPort.postMessage('done'), () => parentPort.postMessage('failed'))
  .finally(() => agent.destroy());
`;

/** Serves WARM_REQUESTS loopback requests from a worker thread; resolves (with how many it answered) when done, or after WARM_MS. */
export async function warmHttpPath(requests = WARM_REQUESTS): Promise<number> {
  let answered = 0;
  let server: Server | null = null;
  let worker: Worker | null = null;
  let timer: NodeJS.Timeout | undefined;
  try {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        answered++;
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) });
        res.end(BODY);
      });
    });
    const listening = server;
    await new Promise<void>((resolve, reject) => {
      listening.once('error', reject);
      listening.listen(0, '127.0.0.1', () => resolve());
    });
    const address = listening.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const started = new Worker(CLIENT, { eval: true, workerData: { port, requests } });
    worker = started;
    await new Promise<void>((resolve) => {
      timer = setTimeout(resolve, WARM_MS);
      started.once('message', () => resolve());
      started.once('error', () => resolve());
      started.once('exit', () => resolve());
    });
  } catch {
    // No warm-up: slower, never broken.
  } finally {
    clearTimeout(timer);
    await worker?.terminate().catch(() => undefined);
    const open = server;
    if (open) {
      open.closeAllConnections();
      await new Promise<void>((resolve) => open.close(() => resolve()));
    }
  }
  return answered;
}
