import type { Logger } from './logger.js';

export interface SmsMessage {
  /** E.164 number. */
  to: string;
  body: string;
}

/** Why a message could not be handed to the gateway. Never carries the message body. */
export class SmsSendError extends Error {
  override name = 'SmsSendError';
  constructor(
    message: string,
    readonly status: number | null = null,
    readonly providerCode: string | null = null,
  ) {
    super(message);
  }
}

export interface SmsGateway {
  /** `log` (development sink) or `twilio`. */
  readonly provider: 'log' | 'twilio';
  /**
   * False when nothing would reach a phone: the log sink under production (docs/decisions.md "Keys and URLs": SMS MFA then
   * answers 503 `sms_unavailable`).
   */
  readonly available: boolean;
  /**
   * Hands the message to the gateway; throws SmsSendError when it refuses or cannot be reached. `log`:
   * for the lines about this message (the request's logger, `requestLog`); the gateway's own by default.
   */
  send(message: SmsMessage, log?: Logger): Promise<void>;
}

export interface SmsGatewayOptions {
  provider: 'log' | 'twilio';
  production: boolean;
  log: Logger;
  twilio?: {
    accountSid: string | undefined;
    authToken: string | undefined;
    from: string | undefined;
    /** Default https://api.twilio.com; tests point it at a local HTTP server. */
    baseUrl?: string | undefined;
    timeoutMs?: number;
  };
}

/**
 * The development sink: the message (code included) goes to the log, clearly marked, and only when
 * NODE_ENV is not production. Under production it is unavailable and prints nothing.
 */
export function logSmsGateway(production: boolean, log: Logger): SmsGateway {
  return {
    provider: 'log',
    available: !production,
    send(message, lineLog = log) {
      if (production) return Promise.reject(new SmsSendError('no SMS gateway configured (SMS_PROVIDER=log under production)'));
      lineLog.warn({ devSmsSink: true, to: message.to, body: message.body }, 'DEVELOPMENT SMS (not sent; set SMS_PROVIDER=twilio)');
      return Promise.resolve();
    },
  };
}

/**
 * Twilio's Messages API: `POST {base}/2010-04-01/Accounts/{sid}/Messages.json`, form-encoded
 * `To`, `From`, `Body`, HTTP basic auth with the account SID and auth token. A 2xx answer means
 * the message was accepted for delivery.
 */
export function twilioSmsGateway(opts: {
  accountSid: string;
  authToken: string;
  from: string;
  baseUrl?: string | undefined;
  timeoutMs?: number | undefined;
  log: Logger;
}): SmsGateway {
  const base = (opts.baseUrl ?? 'https://api.twilio.com').replace(/\/+$/, '');
  const endpoint = `${base}/2010-04-01/Accounts/${encodeURIComponent(opts.accountSid)}/Messages.json`;
  const authorization = `Basic ${Buffer.from(`${opts.accountSid}:${opts.authToken}`).toString('base64')}`;
  return {
    provider: 'twilio',
    available: true,
    async send(message, log = opts.log) {
      let res: Response;
      try {
        res = await fetch(endpoint, {
          method: 'POST',
          headers: { authorization, 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
          body: new URLSearchParams({ To: message.to, From: opts.from, Body: message.body }).toString(),
          signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
        });
      } catch (err) {
        throw new SmsSendError(`SMS gateway unreachable: ${err instanceof Error ? err.message : String(err)}`);
      }
      const text = await res.text().catch(() => '');
      if (!res.ok) {
        // Twilio answers errors as {code, message, more_info, status}; keep the code, never our body.
        let providerCode: string | null = null;
        try {
          const parsed = JSON.parse(text) as { code?: unknown };
          if (typeof parsed.code === 'number' || typeof parsed.code === 'string') providerCode = String(parsed.code);
        } catch {
          // not JSON
        }
        throw new SmsSendError(`SMS gateway answered ${res.status}`, res.status, providerCode);
      }
      log.debug({ smsProvider: 'twilio', status: res.status }, 'SMS accepted by the gateway');
    },
  };
}

export function createSmsGateway(opts: SmsGatewayOptions): SmsGateway {
  if (opts.provider === 'twilio') {
    const t = opts.twilio;
    if (!t?.accountSid || !t.authToken || !t.from) throw new Error('SMS_PROVIDER=twilio needs TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM');
    return twilioSmsGateway({ accountSid: t.accountSid, authToken: t.authToken, from: t.from, baseUrl: t.baseUrl, timeoutMs: t.timeoutMs, log: opts.log });
  }
  return logSmsGateway(opts.production, opts.log);
}
