import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import type { Context } from 'hono';

/**
 * The web console (web/, built by bin/console.js) served beside the API: the build's files from
 * memory, and index.html for every other GET path that is not the API's (the console routes itself:
 * /login, /accept-invite, /reset-password, ...).
 *
 * - Hashed files under /assets/ never change under their name: cached a year, `immutable`.
 * - index.html and the other top-level files: `no-cache` (revalidated with their ETag), so a new
 *   build is picked up at the next load.
 * - Every answer carries a Content-Security-Policy that allows scripts and styles only from this
 *   origin (no inline script, no eval), images from here and `data:` (the TOTP QR code), and no
 *   framing.
 */

export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
  '.map': 'application/json',
};

const IMMUTABLE = 'public, max-age=31536000, immutable';

interface StaticFile {
  body: Uint8Array;
  /** The body gzipped once at load (text files), for clients that accept it. */
  gzip: Uint8Array | null;
  type: string;
  etag: string;
  cacheControl: string;
}

function load(dir: string, file: string): StaticFile {
  const body = readFileSync(file);
  const path = `/${relative(dir, file).split(sep).join('/')}`;
  const type = TYPES[extname(file)] ?? 'application/octet-stream';
  const text = /^(text\/|image\/svg|application\/json)/.test(type);
  return {
    body,
    gzip: text && body.length > 1024 ? gzipSync(body) : null,
    type,
    etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
    cacheControl: path.startsWith('/assets/') ? IMMUTABLE : 'no-cache',
  };
}

function walk(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path, out);
    else if (entry.name !== 'FINGERPRINT') out.push(path);
  }
  return out;
}

/** Paths the console never answers: the API and the health check keep their JSON 404. */
function isServerPath(path: string): boolean {
  return path === '/api' || path.startsWith('/api/') || path === '/health';
}

/**
 * A handler for paths no route matched: the console's answer for a GET (or HEAD) of a console path,
 * or null when the path is not the console's (the caller answers its JSON 404).
 * Reads the build once: it never changes under a running server (a new build is a new folder).
 */
export function consoleHandler(dir: string): (c: Context) => Response | null {
  const files = new Map<string, StaticFile>();
  for (const file of walk(dir)) files.set(`/${relative(dir, file).split(sep).join('/')}`, load(dir, file));
  const index = files.get('/index.html');
  if (!index) throw new Error(`CONSOLE_DIR ${dir} holds no index.html: build the console with npm run build`);

  const answer = (c: Context, file: StaticFile): Response => {
    const headers: Record<string, string> = {
      'Content-Type': file.type,
      'Cache-Control': file.cacheControl,
      ETag: file.etag,
      'Content-Security-Policy': CONSOLE_CSP,
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'X-Frame-Options': 'DENY',
    };
    if (file.gzip) headers.Vary = 'Accept-Encoding';
    if (c.req.header('if-none-match') === file.etag) return new Response(null, { status: 304, headers });
    let body = file.body;
    if (file.gzip && /\bgzip\b/.test(c.req.header('accept-encoding') ?? '')) {
      headers['Content-Encoding'] = 'gzip';
      body = file.gzip;
    }
    return new Response(c.req.method === 'HEAD' ? null : body, { status: 200, headers });
  };

  return (c) => {
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD') return null;
    const path = c.req.path;
    if (isServerPath(path)) return null;
    const file = files.get(path);
    if (file) return answer(c, file);
    // A missing file (an old asset name, a typo) is a 404, never the page in its place.
    if (path.startsWith('/assets/') || extname(path) !== '') return null;
    return answer(c, index);
  };
}
