/**
 * The webhook receiver of bench/webhooks.ts, in its own process (PORT from the environment, loopback
 * only): answers every POST with 200, reads the body's `timestamp` (when the event was published, by
 * the server's clock on this same machine) and keeps publish-to-arrival latencies. `GET /stats` gives
 * the count and the percentiles since the last `POST /reset`.
 */
import { createServer } from 'node:http';

let count = 0;
let first = 0;
let last = 0;
let latencies: number[] = [];
/** Arrivals per wall-clock second (the most in any one second is reported). */
let perSecond = new Map<number, number>();

const pct = (sorted: number[], p: number): number => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]! : NaN);

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/health') return void res.end('ok');
  if (req.method === 'GET' && req.url === '/stats') {
    const sorted = [...latencies].sort((a, b) => a - b);
    res.setHeader('content-type', 'application/json');
    return void res.end(JSON.stringify({ count, first, last, p50: pct(sorted, 0.5), p95: pct(sorted, 0.95), p99: pct(sorted, 0.99), max: sorted[sorted.length - 1] ?? NaN, maxPerSecond: Math.max(0, ...perSecond.values()) }));
  }
  if (req.method === 'POST' && req.url === '/reset') {
    count = 0;
    first = 0;
    last = 0;
    latencies = [];
    perSecond = new Map();
    return void res.end('ok');
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const now = Date.now();
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { timestamp?: string };
      if (body.timestamp) latencies.push(now - Date.parse(body.timestamp));
    } catch {
      // not a webhook body
    }
    count++;
    perSecond.set(Math.floor(now / 1000), (perSecond.get(Math.floor(now / 1000)) ?? 0) + 1);
    if (first === 0) first = now;
    last = now;
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? '0'), '127.0.0.1');
