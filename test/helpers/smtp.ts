/**
 * A real local SMTP server for tests (smtp-server), plus a deliberately small MIME
 * parser: enough to read the Subject and the text/plain (or text/html) body of what
 * nodemailer sends, including quoted-printable / base64 transfer encodings, RFC 2047
 * encoded-word subjects and multipart/alternative or multipart/mixed bodies.
 *
 *   const smtp = await startSmtpServer();            // smtp.url = smtp://127.0.0.1:PORT
 *   ...configure the app with smtp.url, trigger a mail...
 *   const mail = await smtp.waitFor((m) => m.to.includes('alice@example.com'));
 *   const link = mail.urls.find((u) => u.includes('/reset'));
 *   await smtp.close();
 */
import { SMTPServer } from 'smtp-server';
import type { SMTPServerDataStream, SMTPServerSession } from 'smtp-server';

export interface SmtpMessage {
  /** Envelope sender (MAIL FROM), '' for the null sender. */
  from: string;
  /** Envelope recipients (RCPT TO). */
  to: string[];
  /** The message as received (headers + body, CRLF line endings). */
  raw: string;
  /** Top-level headers, lower-cased names, unfolded, not decoded (last occurrence wins). */
  headers: Record<string, string>;
  /** Decoded Subject header. */
  subject: string;
  /** Decoded text/plain body ('' if none). */
  text: string;
  /** Decoded text/html body ('' if none). */
  html: string;
  /** http(s) URLs found in `text` (or in `html` when there is no text part), in order. */
  urls: string[];
  /** Username the client authenticated as (any credentials are accepted), or null. */
  user: string | null;
}

export interface SmtpTestServer {
  /** smtp://127.0.0.1:PORT (no TLS, no auth required). */
  url: string;
  host: string;
  port: number;
  /** Every message received so far, oldest first. */
  messages: SmtpMessage[];
  /**
   * Resolves with the first message (already received or arriving later) matching
   * `predicate`; rejects after `timeoutMs`.
   */
  waitFor(predicate?: (message: SmtpMessage) => boolean, timeoutMs?: number): Promise<SmtpMessage>;
  /** Forgets the messages received so far. */
  clear(): void;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------
// tiny MIME parser

interface MimePart {
  headers: Record<string, string>;
  body: string;
}

interface HeaderValue {
  value: string;
  params: Record<string, string>;
}

function splitPart(raw: string): MimePart {
  const match = /\r?\n\r?\n/.exec(raw);
  const headerText = match === null ? raw : raw.slice(0, match.index);
  const body = match === null ? '' : raw.slice(match.index + match[0].length);
  const headers: Record<string, string> = {};
  for (const line of headerText.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { headers, body };
}

/** `text/plain; charset="utf-8"` -> { value: 'text/plain', params: { charset: 'utf-8' } } */
function parseHeaderValue(header: string | undefined): HeaderValue {
  const [first = '', ...rest] = (header ?? '').split(';');
  const params: Record<string, string> = {};
  for (const param of rest) {
    const eq = param.indexOf('=');
    if (eq <= 0) continue;
    params[param.slice(0, eq).trim().toLowerCase()] = param
      .slice(eq + 1)
      .trim()
      .replace(/^"(.*)"$/, '$1');
  }
  return { value: first.trim().toLowerCase(), params };
}

function decodeBytes(bytes: Uint8Array, charset: string | undefined): string {
  try {
    return new TextDecoder(charset ?? 'utf-8').decode(bytes);
  } catch {
    return new TextDecoder('utf-8').decode(bytes);
  }
}

/** Quoted-printable bytes: drops soft line breaks (`=\r\n`) and decodes `=XX` (e.g. `=3D`). */
function quotedPrintableBytes(input: string, underscoreIsSpace = false): Uint8Array {
  const text = input.replace(/=\r?\n/g, '');
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] ?? '';
    const hex = text.slice(i + 1, i + 3);
    if (ch === '=' && /^[0-9A-Fa-f]{2}$/.test(hex)) {
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else if (ch === '_' && underscoreIsSpace) {
      bytes.push(0x20);
    } else {
      bytes.push(...Buffer.from(ch, 'utf8'));
    }
  }
  return Uint8Array.from(bytes);
}

function decodeTransfer(body: string, encoding: string | undefined, charset: string | undefined): string {
  switch ((encoding ?? '').trim().toLowerCase()) {
    case 'quoted-printable':
      return decodeBytes(quotedPrintableBytes(body), charset);
    case 'base64':
      return decodeBytes(Buffer.from(body.replace(/\s+/g, ''), 'base64'), charset);
    default:
      return body;
  }
}

/** RFC 2047: `=?UTF-8?Q?Reset_your_password?=` / `=?UTF-8?B?...?=` */
function decodeEncodedWords(value: string): string {
  return value
    .replace(/(\?=)\s+(?==\?)/g, '$1') // whitespace between adjacent encoded words is not significant
    .replace(/=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g, (_m, charset: string, enc: string, data: string) => {
      const cs = charset.split('*')[0]; // strip RFC 2231 language
      return enc.toUpperCase() === 'B'
        ? decodeBytes(Buffer.from(data, 'base64'), cs)
        : decodeBytes(quotedPrintableBytes(data, true), cs);
    });
}

/** Depth-first: first text/plain and text/html leaf parts (not attachments). */
function collectBodies(part: MimePart, out: { text?: string; html?: string }): void {
  const type = parseHeaderValue(part.headers['content-type'] ?? 'text/plain');
  const boundary = type.params.boundary;
  if (type.value.startsWith('multipart/') && boundary !== undefined) {
    const delimiter = `--${boundary}`;
    const sections = part.body.split(new RegExp(`^${delimiter.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?:--)?[ \\t]*\\r?$\\n?`, 'm'));
    // sections[0] is the preamble; the one after the closing delimiter is the epilogue.
    for (const section of sections.slice(1)) {
      if (section.trim() === '') continue;
      collectBodies(splitPart(section.replace(/\r?\n$/, '')), out);
    }
    return;
  }
  if (parseHeaderValue(part.headers['content-disposition']).value === 'attachment') return;
  const decoded = decodeTransfer(part.body, part.headers['content-transfer-encoding'], type.params.charset);
  if (type.value === 'text/plain' && out.text === undefined) out.text = decoded;
  if (type.value === 'text/html' && out.html === undefined) out.html = decoded;
}

/** http(s) URLs in a text, without trailing punctuation; `&amp;` is unescaped (for HTML). */
export function extractUrls(text: string): string[] {
  return (text.match(/https?:\/\/[^\s<>"'`]+/g) ?? []).map((url) => url.replace(/&amp;/g, '&').replace(/[.,;:!?)\]}]+$/, ''));
}

export function parseMessage(raw: string, envelope: { from: string; to: string[]; user?: string | null }): SmtpMessage {
  const top = splitPart(raw);
  const bodies: { text?: string; html?: string } = {};
  collectBodies(top, bodies);
  const text = bodies.text ?? '';
  const html = bodies.html ?? '';
  return {
    from: envelope.from,
    to: envelope.to,
    raw,
    headers: top.headers,
    subject: decodeEncodedWords(top.headers.subject ?? ''),
    text,
    html,
    urls: extractUrls(text !== '' ? text : html),
    user: envelope.user ?? null,
  };
}

// ---------------------------------------------------------------------------
// server

async function readStream(stream: SMTPServerDataStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)));
  return Buffer.concat(chunks).toString('utf8');
}

export async function startSmtpServer(): Promise<SmtpTestServer> {
  const messages: SmtpMessage[] = [];
  const waiters = new Set<(message: SmtpMessage) => void>();

  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    allowInsecureAuth: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    // No reverse DNS of the client (it would ask the system resolver, off loopback: docs/testing.md "Network").
    disableReverseLookup: true,
    closeTimeout: 1_000,
    onAuth(auth, _session, callback) {
      callback(null, { user: auth.username ?? 'anonymous' });
    },
    onData(stream: SMTPServerDataStream, session: SMTPServerSession, callback) {
      readStream(stream).then(
        (raw) => {
          const { mailFrom, rcptTo } = session.envelope;
          const message = parseMessage(raw, {
            from: mailFrom === false ? '' : mailFrom.address,
            to: rcptTo.map((r) => r.address),
            user: typeof session.user === 'string' ? session.user : null,
          });
          messages.push(message);
          for (const waiter of [...waiters]) waiter(message);
          callback();
        },
        (error: unknown) => {
          callback(error instanceof Error ? error : new Error(String(error)));
        },
      );
    },
  });

  const port = await new Promise<number>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.server.off('error', reject);
      const address = server.server.address();
      if (address === null || typeof address === 'string') reject(new Error('SMTP server has no TCP address'));
      else resolve(address.port);
    });
  });
  // Keep late socket errors (client resets) from becoming unhandled 'error' events.
  server.on('error', () => undefined);

  let closed: Promise<void> | undefined;
  return {
    url: `smtp://127.0.0.1:${port}`,
    host: '127.0.0.1',
    port,
    messages,
    waitFor(predicate = () => true, timeoutMs = 5_000) {
      const existing = messages.find(predicate);
      if (existing !== undefined) return Promise.resolve(existing);
      return new Promise<SmtpMessage>((resolve, reject) => {
        const waiter = (message: SmtpMessage): void => {
          if (!predicate(message)) return;
          clearTimeout(timer);
          waiters.delete(waiter);
          resolve(message);
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          const seen = messages.map((m) => `  to=${m.to.join(',')} subject=${JSON.stringify(m.subject)}`);
          reject(
            new Error(
              `No matching mail within ${timeoutMs} ms; ${messages.length} received:` +
                (seen.length > 0 ? `\n${seen.join('\n')}` : ' none'),
            ),
          );
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
    clear() {
      messages.length = 0;
    },
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      });
      return closed;
    },
  };
}
