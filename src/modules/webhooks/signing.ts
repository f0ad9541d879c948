import { createHmac } from 'node:crypto';

/**
 * The request a webhook delivery sends (docs/specification.md "Webhooks: deliveries"), signed two ways:
 *
 * - the spec's scheme: `X-Service-Signature: sha256=<hex HMAC-SHA256(secret, "<ts>.<raw body>")>`, where
 *   `<ts>` is `X-Service-Signature-Timestamp` (Unix milliseconds of the attempt);
 * - Standard Webhooks: `webhook-id`, `webhook-timestamp` (Unix seconds) and
 *   `webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")>`, the key being the
 *   UTF-8 bytes of the webhook's secret (docs/decisions.md "Webhook shapes").
 *
 * During a rotation's overlap, `secrets` holds the newest secret first and the previous one second:
 * `X-Service-Signature` carries the newest, `X-Service-Signature-Previous` the previous, and
 * `webhook-signature` one `v1,…` per secret, space-separated.
 *
 * A test delivery (`POST /webhooks/:id/test`) carries `X-Service-Test: true` and `"test": true` in
 * its body (docs/decisions.md "Webhook shapes": both), so a receiver never takes it for a real event.
 */

export const USER_AGENT = 'Service-Webhooks/1.0';

/** Header names (lower case) a webhook's custom headers may not set. */
export function reservedHeader(name: string): boolean {
  const n = name.toLowerCase();
  return (
    n === 'content-type' ||
    n === 'user-agent' ||
    n.startsWith('x-service-') ||
    n.startsWith('webhook-') ||
    // What frames or routes the request is undici's and Keel's, not a receiver's setting.
    ['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'expect', 'proxy-connection'].includes(n)
  );
}

/**
 * Whether a stored body is a test delivery's: its keys are `id, type, timestamp, orgId, test, data`
 * in this order (model.ts `eventBody`), and none of the first four can hold `,"data":`, so the
 * first `,"data":` is the data key and a test body has `,"test":true` right before it. A real event
 * whose data holds `"test": true` is not one. No parse: this runs on every attempt.
 */
export function isTestBody(body: string): boolean {
  const at = body.indexOf(',"data":');
  return at > 0 && body.startsWith(',"test":true', at - ',"test":true'.length);
}

export interface SignInput {
  deliveryId: string;
  eventId: string;
  eventType: string;
  body: string;
  /** Newest first; empty when the webhook has no secret. */
  secrets: readonly string[];
  nowMs: number;
  custom: readonly { key: string; value: string }[];
}

export function serviceSignature(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * The key is the secret's UTF-8 bytes, given as the string (createHmac encodes a string key as UTF-8):
 * on Node 24 a Buffer key costs ~40 µs a signature more than a string (its key checks throw and catch
 * for any object), which was a fifth of a delivery's CPU (docs/decisions.md "Speed: publishing and deliveries").
 */
export function standardSignature(secret: string, id: string, timestampSeconds: string, body: string): string {
  return `v1,${createHmac('sha256', secret).update(`${id}.${timestampSeconds}.${body}`).digest('base64')}`;
}

export function deliveryHeaders(input: SignInput): Record<string, string> {
  const ts = String(input.nowMs);
  const seconds = String(Math.floor(input.nowMs / 1000));
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'User-Agent': USER_AGENT,
    'X-Service-Delivery-Id': input.deliveryId,
    'X-Service-Event-Id': input.eventId,
    'X-Service-Event-Type': input.eventType,
    'X-Service-Timestamp': ts,
  };
  // A test delivery says so in a header, and in the body (`"test": true`), which the signatures cover.
  if (isTestBody(input.body)) headers['X-Service-Test'] = 'true';
  const [newest, previous] = input.secrets;
  if (newest !== undefined) {
    headers['X-Service-Signature'] = serviceSignature(newest, ts, input.body);
    headers['X-Service-Signature-Timestamp'] = ts;
    if (previous !== undefined) headers['X-Service-Signature-Previous'] = serviceSignature(previous, ts, input.body);
  }
  headers['webhook-id'] = input.eventId;
  headers['webhook-timestamp'] = seconds;
  if (input.secrets.length > 0) {
    headers['webhook-signature'] = input.secrets.map((s) => standardSignature(s, input.eventId, seconds, input.body)).join(' ');
  }
  // Custom headers after the standard ones; validation keeps them from replacing any of them.
  for (const { key, value } of input.custom) headers[key] = value;
  return headers;
}
