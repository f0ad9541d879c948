/**
 * The signatures of a delivery (src/modules/webhooks/signing.ts) without a receiver: the Standard
 * Webhooks key is the secret's UTF-8 bytes, and every HMAC key reaches `createHmac` as a string (on
 * Node 24 a Buffer or other object key costs ~40 µs a signature: docs/decisions.md "Speed:
 * publishing and deliveries").
 */
import * as crypto from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';

vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  return { ...actual, createHmac: vi.fn(actual.createHmac) };
});

const { deliveryHeaders, standardSignature } = await import('../../src/modules/webhooks/signing.js');
const real = (await vi.importActual<typeof import('node:crypto')>('node:crypto')).createHmac;

const SECRET = 'grüße-an-den-empfänger-0123456789-☃';
const BODY = '{"id":"e1","type":"device.online","timestamp":"2026-05-01T12:00:00.000Z","orgId":"o1","data":{"deviceId":"d-1"}}';

afterEach(() => vi.mocked(crypto.createHmac).mockClear());

describe('delivery signatures', () => {
  it('the Standard Webhooks signature is the HMAC keyed with the secret\'s UTF-8 bytes', () => {
    const expected = `v1,${real('sha256', Buffer.from(SECRET, 'utf8')).update(`e1.1777636800.${BODY}`).digest('base64')}`;
    expect(standardSignature(SECRET, 'e1', '1777636800', BODY)).toBe(expected);
  });

  it('every HMAC of a delivery is keyed with a string, never a Buffer', () => {
    deliveryHeaders({ deliveryId: 'd1', eventId: 'e1', eventType: 'device.online', body: BODY, secrets: [SECRET, 'the-previous-secret-0123456789'], nowMs: 1_777_636_800_000, custom: [] });
    const keys = vi.mocked(crypto.createHmac).mock.calls.map((c) => c[1]);
    expect(keys).toHaveLength(4);
    for (const key of keys) expect(typeof key).toBe('string');
  });
});
