import { describe, expect, it } from 'vitest';
import { resolveRelyingParty } from '../../src/modules/mfa/webauthn.js';

const rp = (publicUrl: string, extra: { WEBAUTHN_RP_ID?: string; WEBAUTHN_ORIGIN?: string } = {}) =>
  resolveRelyingParty({ publicUrl, WEBAUTHN_RP_ID: extra.WEBAUTHN_RP_ID, WEBAUTHN_ORIGIN: extra.WEBAUTHN_ORIGIN });

describe('WebAuthn relying party', () => {
  it('takes RP ID and origin from PUBLIC_URL', () => {
    expect(rp('http://localhost:3000')).toEqual({ ok: true, rp: { rpId: 'localhost', rpName: 'Keel', origin: 'http://localhost:3000' } });
    expect(rp('https://id.example.com/base')).toEqual({ ok: true, rp: { rpId: 'id.example.com', rpName: 'Keel', origin: 'https://id.example.com' } });
  });

  it('lets WEBAUTHN_RP_ID name a parent domain and WEBAUTHN_ORIGIN the page origin', () => {
    expect(rp('https://api.example.com', { WEBAUTHN_RP_ID: 'example.com', WEBAUTHN_ORIGIN: 'https://app.example.com' })).toEqual({
      ok: true,
      rp: { rpId: 'example.com', rpName: 'Keel', origin: 'https://app.example.com' },
    });
  });

  it('refuses IP addresses, foreign origins and plain http off localhost', () => {
    for (const [url, extra] of [
      ['http://127.0.0.1:3000', {}],
      ['http://[::1]:3000', {}],
      ['https://id.example.com', { WEBAUTHN_RP_ID: '10.0.0.1' }],
      ['https://id.example.com', { WEBAUTHN_RP_ID: 'other.com' }],
      ['http://id.example.com', {}],
    ] as const) {
      const r = rp(url, extra);
      expect(r.ok, url).toBe(false);
    }
    const ip = rp('http://127.0.0.1:3000');
    expect(ip.ok ? '' : ip.reason).toMatch(/IP address/);
  });
});
