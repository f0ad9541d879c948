/**
 * A loopback HTTP proxy in front of a test app, for reference-agent tests: the agent's `server` is the
 * proxy, which forwards every request to Keel (claiming the app's client address through
 * X-Forwarded-For) and can play the man in the middle: rewrite heartbeat answers, tamper with
 * downloads, answer enrolment attempts itself. It records what passed (update reports, download
 * requests and whether they carried a token). Download URLs of Keel's own origin in heartbeat answers
 * are rewritten to the proxy's, so downloads pass through it too.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestApp } from '../helpers/app.js';

export interface KeelProxy {
  url: string;
  port: number;
  /** Rewrites each heartbeat answer (parsed JSON) before the agent sees it. */
  onHeartbeat: ((answer: any) => any) | null;
  /** Rewrites the bytes of a download. */
  onDownload: ((body: Buffer) => Buffer) | null;
  /** Answers a request itself with this status (and an error envelope) when it returns one, instead of forwarding it. */
  refuse: ((path: string, body: any) => number | null) | null;
  /** Answers the next enrolment attempts itself (one entry each), then forwards again. */
  enrollAnswers: { status: number; headers?: Record<string, string>; body?: unknown }[];
  /** Update reports the agents sent (the request bodies), in order. */
  reports: { deviceToken: string; body: any }[];
  /** Download requests that passed: whether each carried an Authorization header. */
  downloads: { path: string; authorized: boolean }[];
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Listens on `port` (0: any free port). */
export async function startKeelProxy(app: TestApp, port = 0): Promise<KeelProxy> {
  const keelOrigin = new URL(app.publicUrl).origin;
  const proxy: KeelProxy = {
    url: '',
    port: 0,
    onHeartbeat: null,
    onDownload: null,
    refuse: null,
    enrollAnswers: [],
    reports: [],
    downloads: [],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = req.url ?? '/';
    const body = await readBody(req);
    if (path === '/api/v1/agents/enroll') {
      const canned = proxy.enrollAnswers.shift();
      if (canned) {
        res.writeHead(canned.status, { 'content-type': 'application/json', ...canned.headers });
        res.end(JSON.stringify(canned.body ?? { error: 'canned', code: 'canned' }));
        return;
      }
    }
    let parsedBody: unknown = null;
    try {
      parsedBody = body.length ? JSON.parse(body.toString('utf8')) : null;
    } catch {
      // not JSON: the hook sees null
    }
    const refused = proxy.refuse?.(path, parsedBody) ?? null;
    if (refused !== null) {
      res.writeHead(refused, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'refused by the test proxy', code: 'proxy_refused' }));
      return;
    }
    const authorization = req.headers.authorization;
    if (path === '/api/v1/agents/update-report') proxy.reports.push({ deviceToken: (authorization ?? '').replace(/^Bearer /, ''), body: JSON.parse(body.toString('utf8')) });
    if (path.includes('/download/')) proxy.downloads.push({ path, authorized: authorization !== undefined });
    const headers: Record<string, string> = { 'x-forwarded-for': app.ip };
    for (const name of ['authorization', 'content-type']) if (req.headers[name]) headers[name] = req.headers[name] as string;
    const answer = await fetch(`${app.url}${path}`, { method: req.method ?? 'GET', headers, ...(body.length ? { body } : {}) });
    let out: Buffer = Buffer.from(await answer.arrayBuffer());
    if (path === '/api/v1/agents/heartbeat' && answer.status === 200) {
      let parsed = JSON.parse(out.toString('utf8'));
      if (parsed.update && new URL(parsed.update.url).origin === keelOrigin) parsed.update.url = parsed.update.url.replace(keelOrigin, proxy.url);
      if (proxy.onHeartbeat) parsed = proxy.onHeartbeat(parsed);
      out = Buffer.from(JSON.stringify(parsed));
    }
    if (path.includes('/download/') && answer.status === 200 && proxy.onDownload) out = proxy.onDownload(out);
    const reply: Record<string, string> = { 'content-length': String(out.length) };
    for (const name of ['content-type', 'retry-after']) {
      const v = answer.headers.get(name);
      if (v !== null) reply[name] = v;
    }
    res.writeHead(answer.status, reply);
    res.end(out);
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      res.writeHead(502);
      res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  proxy.port = (server.address() as AddressInfo).port;
  proxy.url = `http://127.0.0.1:${proxy.port}`;
  return proxy;
}
