import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the stand-in received, as Twilio would see it. */
export interface CapturedSms {
  method: string;
  path: string;
  authorization: string | undefined;
  contentType: string | undefined;
  to: string | null;
  from: string | null;
  body: string | null;
}

export interface TwilioStub {
  url: string;
  accountSid: string;
  authToken: string;
  from: string;
  received: CapturedSms[];
  /** The next answers (status and JSON body) instead of 201; consumed in order. */
  failNext(status: number, body: Record<string, unknown>): void;
  /** Env for startTestApp: SMS_PROVIDER=twilio against this server. */
  env(): Record<string, string>;
  /** The 6-digit code of the last message sent to `to` (fails the test when there is none). */
  lastCode(to: string): string;
  close(): Promise<void>;
}

/**
 * A local HTTP server standing in for Twilio's Messages API: it records each form-encoded
 * `POST /2010-04-01/Accounts/{sid}/Messages.json` and answers 201 like Twilio does.
 */
export async function startTwilioStub(): Promise<TwilioStub> {
  const accountSid = `AC${Math.random().toString(16).slice(2).padEnd(32, '0').slice(0, 32)}`;
  const authToken = `tok_${Math.random().toString(36).slice(2)}`;
  const from = '+15005550006';
  const received: CapturedSms[] = [];
  const failures: { status: number; body: Record<string, unknown> }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      received.push({
        method: req.method ?? '',
        path: req.url ?? '',
        authorization: req.headers.authorization,
        contentType: req.headers['content-type'],
        to: form.get('To'),
        from: form.get('From'),
        body: form.get('Body'),
      });
      const failure = failures.shift();
      res.setHeader('content-type', 'application/json');
      if (failure) {
        res.statusCode = failure.status;
        res.end(JSON.stringify(failure.body));
        return;
      }
      res.statusCode = 201;
      res.end(JSON.stringify({ sid: `SM${received.length}`, status: 'queued', to: form.get('To'), from: form.get('From') }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    accountSid,
    authToken,
    from,
    received,
    failNext(status, body) {
      failures.push({ status, body });
    },
    env: () => ({
      SMS_PROVIDER: 'twilio',
      TWILIO_ACCOUNT_SID: accountSid,
      TWILIO_AUTH_TOKEN: authToken,
      TWILIO_FROM: from,
      TWILIO_BASE_URL: url,
    }),
    lastCode(to) {
      const last = [...received].reverse().find((r) => r.to === to);
      const code = /\b(\d{6})\b/.exec(last?.body ?? '')?.[1];
      if (!code) throw new Error(`no SMS code was sent to ${to}`);
      return code;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A random valid US number (+1 415 2xx-xxxx), so parallel test files never share a per-number limit. */
export function randomPhone(): string {
  return `+1415${2000000 + Math.floor(Math.random() * 7_999_999)}`;
}
